package cache_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	merrors "go-micro.dev/v4/errors"
	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
)

// What the selector survives: odd inputs, a logger that hangs, and
// everything at once.

// A Mark with a nil node, an empty service, and nodes without Id or address
// do not panic; strategies returning nil or an error at once pass it on.
func TestOddInputsDoNotPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 3)
		assert.NotPanics(t, func() {
			s.sel.Mark("svc", nil, errRefused)
			s.sel.Mark("", listedNode("n1"), errRefused)
			s.sel.Mark("svc", &registry.Node{}, errRefused)
			s.sel.Mark("svc", &registry.Node{}, nil)
			s.sel.Mark("svc", &registry.Node{Id: "n1"}, errRefused)
		})
		boom := errors.New("boom")
		next, err := s.sel.Select("svc", selector.WithStrategy(func([]*registry.Service) selector.Next {
			return func() (*registry.Node, error) { return nil, boom }
		}))
		require.NoError(t, err)
		_, err = next()
		assert.ErrorIs(t, err, boom)
	})
}

// regcache's own cache drops nil nodes, in a registry's answer and in watch
// events, so Select, Next and Mark never meet one.
func TestNilNodesInEventsNeverReachTheSelector(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 3)
		_, err := s.sel.Select("svc")
		require.NoError(t, err)
		svc := selService("1", "n4")
		svc.Nodes = append([]*registry.Node{nil}, svc.Nodes...)
		s.event("update", svc)
		s.event("delete", &registry.Service{Name: "svc", Version: "1", Nodes: []*registry.Node{nil}})
		s.sel.Mark("svc", listedNode("n1"), errRefused) // the service has state
		next, err := s.sel.Select("svc")
		require.NoError(t, err)
		for i := 0; i < 100; i++ {
			n, err := next()
			require.NoError(t, err)
			require.NotNil(t, n)
		}
	})
}

// lineLog records log lines; with gate set, it blocks every line that
// contains on until gate is closed.
type lineLog struct {
	mu    sync.Mutex
	lines []string
	on    string
	gate  chan struct{}
}

func (l *lineLog) Init(...logger.Option) error { return nil }

func (l *lineLog) Options() logger.Options { return logger.Options{} }

func (l *lineLog) Fields(map[string]interface{}) logger.Logger { return l }

func (l *lineLog) String() string { return "lines" }

func (l *lineLog) Log(level logger.Level, v ...interface{}) { l.add(fmt.Sprint(v...)) }

func (l *lineLog) Logf(level logger.Level, format string, v ...interface{}) {
	l.add(fmt.Sprintf(format, v...))
}

func (l *lineLog) add(s string) {
	if l.gate != nil && strings.Contains(s, l.on) {
		<-l.gate
	}
	l.mu.Lock()
	l.lines = append(l.lines, s)
	l.mu.Unlock()
}

func (l *lineLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

// A logger that hangs on the ejection line blocks only the Mark that
// ejected: Selects, picks, other Marks (of the same service) and Stats go
// on, and the node is out already.
func TestHangingLoggerBlocksOnlyTheEjectingMark(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &lineLog{on: "ejected", gate: make(chan struct{})}
		r := newReg(selService("1", "n1", "n2", "n3"))
		c := cache.New(r, cache.WithLogger(l), cache.WithTTL(time.Hour))
		defer c.Stop()
		sel := cache.NewSelector(c)
		failN(t, sel, listedNode("n3"), 2)
		done := make(chan struct{})
		go func() {
			defer close(done)
			sel.Mark("svc", listedNode("n3"), errRefused) // ejects, then hangs in the logger
		}()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("the logger did not block")
		default:
		}
		next, err := sel.Select("svc")
		require.NoError(t, err)
		picks := pickCounts(t, next, 300)
		assert.Zero(t, picks["n3"])
		sel.Mark("svc", listedNode("n2"), errDialTimedOut)
		sel.Mark("svc", listedNode("n2"), nil)
		sel.Mark("svc", listedNode("n3"), errDialTimedOut)
		assert.Equal(t, []string{"n3"}, ejectedIDs(selStats(t, sel)))
		close(l.gate)
		<-done
	})
}

// Concurrent Selects, Nexts, Marks of every kind, list changes, Resets,
// Inits (percent, off and on) and Stats, for the race detector; then
// everything recovers and nothing stays ejected.
func TestSelectorConcurrentEverything(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 6, cache.WithEjectionTime(time.Second, 4*time.Second))
		_, err := s.sel.Select("svc")
		require.NoError(t, err)
		codec := merrors.InternalServerError("go.micro.client.codec", "bad request")
		errs := []error{nil, errRefused, errTimedOut, errBroken, codec, merrors.InternalServerError("svc", "handler")}
		opts := [][]selector.SelectOption{nil,
			{selector.WithStrategy(selector.RoundRobin)},
			{selector.WithStrategy(selector.Random)},
			{selector.WithFilter(selector.FilterLabel("zone", "a"))}}
		var wg sync.WaitGroup
		end := time.Now().Add(2 * time.Minute)
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 1))
				for time.Now().Before(end) {
					next, err := s.sel.Select("svc", opts[rng.IntN(len(opts))]...)
					if err != nil {
						time.Sleep(10 * time.Millisecond)
						continue
					}
					for try := 0; try < 3; try++ {
						n, err := next()
						if err != nil {
							break
						}
						e := errs[rng.IntN(len(errs))]
						if n.Id == "n5" || n.Id == "n6" {
							e = errRefused // dead
						}
						time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
						s.sel.Mark("svc", n, e)
						if e == nil {
							break
						}
					}
					s.sel.Mark("svc", withAddressNode(fmt.Sprintf("10.0.0.%d:1", rng.IntN(100))), errRefused)
					time.Sleep(5 * time.Millisecond)
				}
			}(g)
		}
		wg.Add(1)
		go func() { // control
			defer wg.Done()
			rng := rand.New(rand.NewPCG(99, 1))
			for time.Now().Before(end) {
				switch rng.IntN(6) {
				case 0:
					s.sel.Reset("svc")
				case 1:
					_ = s.sel.Init(cache.WithMaximumEjectedPercent([]int{0, 50, 100}[rng.IntN(3)]))
				case 2:
					_ = s.sel.Init(cache.WithEjectAfter(rng.IntN(2) * 3))
				case 3:
					_ = selStats(t, s.sel)
				case 4:
					id := fmt.Sprintf("n%d", 2+rng.IntN(5))
					if rng.IntN(2) == 0 {
						s.event("delete", &registry.Service{Name: "svc", Version: "1", Nodes: []*registry.Node{{Id: id, Address: "x"}}})
					} else {
						s.event("create", selService("1", id))
					}
				case 5:
					time.Sleep(500 * time.Millisecond)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		wg.Wait()
		require.NoError(t, s.sel.Init(cache.WithEjectAfter(3), cache.WithMaximumEjectedPercent(50)))
		time.Sleep(time.Minute)
		for i := 1; i <= 6; i++ {
			s.sel.Mark("svc", listedNode(fmt.Sprintf("n%d", i)), nil)
		}
		st := selStats(t, s.sel)
		assert.Empty(t, st.Ejected, "after recovery")
		t.Logf("failures %d ejections %d refused %d readmitted %d ignored %d", st.Failures, st.Ejections, st.Refused, st.Readmitted, st.Ignored)
	})
}
