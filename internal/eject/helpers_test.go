package eject

import (
	"fmt"
	"sync"
	"time"

	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
)

// defaults is the selector's default configuration (its options'
// defaults), which the tests assume.
var defaults = Config{EjectAfter: 3, BaseEjection: 30 * time.Second, MaxEjection: 2 * time.Minute, MaxEjectedPercent: 50}

// testLogger records log lines instead of printing them, each led by its
// level.
type testLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *testLogger) Init(...log.Option) error                 { return nil }
func (l *testLogger) Options() log.Options                     { return log.Options{} }
func (l *testLogger) Fields(map[string]interface{}) log.Logger { return l }
func (l *testLogger) String() string                           { return "test" }
func (l *testLogger) Log(level log.Level, v ...interface{}) {
	l.add(level, fmt.Sprint(v...))
}
func (l *testLogger) Logf(level log.Level, format string, v ...interface{}) {
	l.add(level, fmt.Sprintf(format, v...))
}
func (l *testLogger) add(level log.Level, s string) {
	l.mu.Lock()
	l.lines = append(l.lines, level.String()+" "+s)
	l.mu.Unlock()
}

func (l *testLogger) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// testPassive returns passive health with the selector's default
// configuration, a recording logger and a clock that the test moves.
// listed, if any, is the service's cached list, as the cache would hold
// it.
func testPassive(listed ...*registry.Node) (*Health, *testLogger, *time.Time) {
	l := &testLogger{}
	p := New(defaults, nil, l)
	now := time.Unix(1_000_000, 0)
	p.now, p.start = func() time.Time { return now }, now
	if len(listed) > 0 {
		svcs := []*registry.Service{{Name: "svc", Version: "1", Nodes: listed}}
		p.held = func(string) []*registry.Service { return svcs }
	}
	return p, l, &now
}

// nodeStates returns the number of node states of every service.
func (p *Health) nodeStates() int {
	n := 0
	p.each(func(h *serviceHealth) {
		h.mu.Lock()
		n += h.count
		h.mu.Unlock()
	})
	return n
}
