package cache

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	merrors "go-micro.dev/v4/errors"
	"go-micro.dev/v4/registry"
)

func TestClassify(t *testing.T) {
	refused := merrors.InternalServerError("go.micro.client", "connection error: dial tcp 127.0.0.1:1: connect: connection refused")
	tests := []struct {
		name string
		err  error
		want outcome
	}{
		{"success", nil, reached},
		{"connection refused", refused, unreachable},
		{"dial timeout", merrors.InternalServerError("go.micro.client", "connection error: dial tcp 10.0.0.1:80: i/o timeout"), unreachable},
		{"attempt timed out", merrors.Timeout("go.micro.client", "context deadline exceeded"), unreachable},
		{"connection broke", merrors.InternalServerError("go.micro.client.transport", "EOF"), unreachable},
		{"wrapped by a call wrapper", fmt.Errorf("tracing: %w", refused), unreachable},
		{"plain handler error", errors.New("business rule"), reached},
		{"handler error with the service's Id", merrors.InternalServerError("greeter", "database down"), reached},
		{"handler timeout with the service's Id", merrors.Timeout("greeter", "slow downstream"), reached},
		{"handler error with no Id", merrors.Parse("boom"), reached},
		{"4xx of the client", merrors.BadRequest("go.micro.client", "bad request"), unrelated},
		{"client codec", merrors.InternalServerError("go.micro.client.codec", "cannot encode"), unrelated},
		{"client panic", merrors.InternalServerError("go.micro.client", "panic recovered: oops"), unrelated},
		{"client backoff", merrors.InternalServerError("go.micro.client", "backoff error: stop"), unrelated},
		{"typed nil", (*merrors.Error)(nil), reached},
		{"joined with a handler error", errors.Join(errors.New("tracing"), refused), unreachable},
		{"two %w", fmt.Errorf("%w after %w", errors.New("retry budget"), refused), unreachable},
		{"joined, nested", fmt.Errorf("wrapper: %w", errors.Join(errors.New("a"), fmt.Errorf("b: %w", refused))), unreachable},
		{"joined handler errors", errors.Join(errors.New("a"), merrors.InternalServerError("greeter", "db")), reached},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, classify(tt.err), tt.name)
	}
}

func TestEjectionDecisions(t *testing.T) {
	c := &healthConfig{ejectAfter: 3, baseEjection: 30 * time.Second, maxEjection: 2 * time.Minute, maxEjectedPcnt: 50}
	t.Run("ejection time grows by the base and stops at the max", func(t *testing.T) {
		want := []time.Duration{30 * time.Second, time.Minute, 90 * time.Second, 2 * time.Minute, 2 * time.Minute, 2 * time.Minute}
		for i, w := range want {
			assert.Equal(t, w, ejectionTime(c, i+1), "ejection %d", i+1)
		}
		assert.Equal(t, 4, maxStreak(c))
		odd := &healthConfig{baseEjection: 30 * time.Second, maxEjection: 100 * time.Second}
		assert.Equal(t, 4, maxStreak(odd))
		assert.Equal(t, 100*time.Second, ejectionTime(odd, 4))
	})
	t.Run("ejections in a row decay by one per base period", func(t *testing.T) {
		end := time.Unix(1000, 0)
		tests := []struct {
			n     int
			since time.Duration
			want  int
		}{
			{0, time.Hour, 0},
			{3, -time.Second, 3}, // still ejected
			{3, 0, 3},
			{3, 29 * time.Second, 3},
			{3, 30 * time.Second, 2},
			{3, 61 * time.Second, 1},
			{3, time.Hour, 0},
		}
		for _, tt := range tests {
			assert.Equal(t, tt.want, decayed(c, tt.n, end, end.Add(tt.since)), "%d after %v", tt.n, tt.since)
		}
	})
	t.Run("share of ejected nodes", func(t *testing.T) {
		tests := []struct {
			pct, ejected, nodes int
			want                bool
		}{
			{50, 0, 1, true}, // always one
			{0, 0, 10, true},
			{0, 1, 10, false},
			{50, 1, 2, false},
			{50, 1, 3, false},
			{50, 1, 4, true},
			{50, 2, 4, false},
			{50, 4, 10, true},
			{50, 5, 10, false},
			{100, 2, 3, true},
			{100, 3, 3, false},
		}
		for _, tt := range tests {
			c := &healthConfig{maxEjectedPcnt: tt.pct}
			assert.Equal(t, tt.want, mayEject(c, tt.ejected, tt.nodes), "%d%%: %d of %d ejected", tt.pct, tt.ejected, tt.nodes)
		}
	})
}

// testPassive returns passive health with the default configuration, a
// recording logger and a clock that the test moves. listed, if any, is
// the service's cached list, as the cache would hold it.
func testPassive(listed ...*registry.Node) (*passive, *testLogger, *time.Time) {
	p := newPassive(nil, defaultHealth)
	l := &testLogger{}
	p.log = l
	now := time.Unix(1_000_000, 0)
	p.now, p.start = func() time.Time { return now }, now
	if len(listed) > 0 {
		svcs := []*registry.Service{{Name: "svc", Version: "1", Nodes: listed}}
		p.held = func(string) []*registry.Service { return svcs }
	}
	return p, l, &now
}

func (p *passive) nodeStates() int {
	n := 0
	p.each(func(h *serviceHealth) {
		h.mu.Lock()
		n += h.count
		h.mu.Unlock()
	})
	return n
}

// TestPassiveStateIsBounded: failures of ever-new nodes, as in a service
// that scales up and down while failing, leave state only for the nodes
// that failed in the last maximum ejection time.
func TestPassiveStateIsBounded(t *testing.T) {
	p, _, now := testPassive()
	refused := merrors.InternalServerError("go.micro.client", "connection error: refused")
	for i := 0; i < 10_000; i++ {
		svc := fmt.Sprintf("svc-%d", i%10)
		p.mark(svc, &registry.Node{Id: fmt.Sprintf("node-%d", i)}, refused)
		*now = now.Add(100 * time.Millisecond)
		// One failure per node, 10 per second: 1200 within 2 minutes,
		// and at most one sweep period (30 s, 300 failures) more.
		require.LessOrEqual(t, p.nodeStates(), 1500, "after %d failures", i+1)
	}
	assert.LessOrEqual(t, p.tracked.Load(), int64(10))

	// Reached again, a node with failures and no ejection is forgotten at
	// once, and a service without state leaves the map.
	p2, _, _ := testPassive()
	n := &registry.Node{Id: "n1"}
	p2.mark("svc", n, refused)
	assert.EqualValues(t, 1, p2.tracked.Load())
	p2.mark("svc", n, nil)
	assert.Zero(t, p2.tracked.Load())
	assert.Zero(t, p2.nodeStates())
}

// TestEjectedNodeIsForgottenOnceItsStreakDecays: a readmitted node keeps
// its count of ejections in a row until it has decayed.
func TestEjectedNodeIsForgottenOnceItsStreakDecays(t *testing.T) {
	p, l, now := testPassive(&registry.Node{Id: "n1", Address: "10.0.0.1:8080"})
	refused := merrors.InternalServerError("go.micro.client", "connection error: refused")
	n := &registry.Node{Id: "n1", Address: "10.0.0.1:8080"}
	for i := 0; i < 3; i++ {
		p.mark("svc", n, refused)
	}
	require.True(t, p.lookup("svc").node(n).ejectedAt(p.nanos(*now)))
	*now = now.Add(30 * time.Second)
	p.mark("svc", n, nil) // readmitted on trial, and reached
	h := p.lookup("svc")
	require.NotNil(t, h)
	assert.False(t, h.node(n).ejectedAt(p.nanos(*now)))
	assert.Equal(t, 1, h.node(n).streak)
	*now = now.Add(29 * time.Second)
	p.mark("svc", n, nil)
	assert.NotNil(t, p.lookup("svc"), "streak not decayed yet")
	*now = now.Add(time.Second)
	p.mark("svc", n, nil)
	assert.Nil(t, p.lookup("svc"), "forgotten")
	assert.EqualValues(t, 1, p.readmitted.Load())

	lines := strings.Join(l.all(), "\n")
	assert.Contains(t, lines, `warn regcache: node "n1" (10.0.0.1:8080) of service "svc" ejected for 30s after 3 failures in a row: `)
	assert.Contains(t, lines, `info regcache: node "n1" (10.0.0.1:8080) of service "svc" is reachable again after its ejection`)
}

// TestFailuresCountOnlyInARow: an answer between two failures, a success
// or a handler error, starts the count again.
func TestFailuresCountOnlyInARow(t *testing.T) {
	p, _, now := testPassive(&registry.Node{Id: "n1"})
	refused := merrors.InternalServerError("go.micro.client", "connection error: refused")
	n := &registry.Node{Id: "n1"}
	for i := 0; i < 3; i++ {
		p.mark("svc", n, refused)
	}
	*now = now.Add(30 * time.Second)
	p.mark("svc", n, nil) // readmitted; its streak keeps its state
	require.NotNil(t, p.lookup("svc"))
	for i := 0; i < 5; i++ {
		p.mark("svc", n, refused)
		p.mark("svc", n, refused)
		if i%2 == 0 {
			p.mark("svc", n, nil)
		} else {
			p.mark("svc", n, errors.New("handler error"))
		}
	}
	assert.EqualValues(t, 1, p.ejections.Load())
	assert.False(t, p.lookup("svc").node(n).ejectedAt(p.nanos(*now)))
}

// TestStreakOfANodeThatKeepsFailing: each failure on trial ejects the node
// again, for longer each time up to the max, and the log hears of each.
func TestStreakOfANodeThatKeepsFailing(t *testing.T) {
	p, l, now := testPassive(&registry.Node{Id: "n1"})
	refused := merrors.InternalServerError("go.micro.client", "connection error: refused")
	n := &registry.Node{Id: "n1"}
	for i := 0; i < 3; i++ {
		p.mark("svc", n, refused)
	}
	var got []time.Duration
	for i := 0; i < 6; i++ {
		nh := p.lookup("svc").node(n)
		until := func() time.Time { return p.at(nh.until.Load()) }
		got = append(got, until().Sub(*now))
		// A failure of an attempt that began before the ejection
		// changes nothing.
		p.mark("svc", n, refused)
		assert.Equal(t, got[i], until().Sub(*now))
		*now = until()
		p.mark("svc", n, refused) // on trial: ejected again at once
	}
	assert.Equal(t, []time.Duration{30 * time.Second, time.Minute, 90 * time.Second, 2 * time.Minute, 2 * time.Minute, 2 * time.Minute}, got)
	assert.EqualValues(t, 7, p.ejections.Load())
	assert.EqualValues(t, 15, p.failures.Load(), "the failures during ejections included")
	assert.Len(t, l.all(), 7)
}

// TestRefusedEjectionIsLoggedOnce: a node kept in rotation by the share of
// ejected nodes is logged once, not at every failure.
func TestRefusedEjectionIsLoggedOnce(t *testing.T) {
	p, l, _ := testPassive(&registry.Node{Id: "n1"}, &registry.Node{Id: "n2"})
	refused := merrors.InternalServerError("go.micro.client", "connection error: refused")
	p.mark("svc", &registry.Node{Id: "n1"}, refused) // the service has state
	for i := 0; i < 10; i++ {
		p.mark("svc", &registry.Node{Id: "n1"}, refused)
		p.mark("svc", &registry.Node{Id: "n2"}, refused)
	}
	assert.EqualValues(t, 1, p.ejections.Load())
	assert.EqualValues(t, 1, p.refused.Load(), "n2, kept in rotation, once for its run of 10 failures")
	assert.Len(t, l.all(), 2)
	assert.Contains(t, l.all()[1], `regcache: node "n2" of service "svc" keeps failing (`)
	assert.Contains(t, l.all()[1], `) but stays in rotation: 1 of its 2 nodes are ejected already`)
}

// TestSuccessOfARecoveredNodeTakesNoLock: a readmitted node keeps its
// state until its ejections in a row have decayed, but the success Marks
// of that time have nothing to change and take no lock: callers of a
// recovered node do not contend on its service. The test holds the lock
// while they run.
func TestSuccessOfARecoveredNodeTakesNoLock(t *testing.T) {
	p, _, now := testPassive()
	refused := merrors.InternalServerError("go.micro.client", "connection error: refused")
	n := &registry.Node{Id: "n1", Address: "10.0.0.1:8080"}
	for i := 0; i < 3; i++ {
		p.mark("svc", n, refused)
	}
	*now = now.Add(30 * time.Second)
	p.mark("svc", n, nil) // readmitted; one ejection in a row left to decay
	h := p.lookup("svc")
	require.NotNil(t, h)
	h.mu.Lock()
	done := make(chan struct{})
	go func() {
		for i := 0; i < 1000; i++ {
			p.mark("svc", n, nil)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second): // a liveness bound: without the lock they end at once
		t.Error("success Marks of a recovered node wait for its service's lock")
	}
	h.mu.Unlock()
	<-done
	*now = now.Add(30 * time.Second) // decayed: the next success forgets it
	p.mark("svc", n, nil)
	assert.Nil(t, p.lookup("svc"))
}

// TestObserveNeverGoesBackToAnOlderList: a Select that looked the service
// up just before the list changed observes the older list after a Mark
// matched the state to the newer one. The state stays matched to the list
// the cache holds: n3, which left, is not counted again.
func TestObserveNeverGoesBackToAnOlderList(t *testing.T) {
	p, _, _ := testPassive()
	refused := merrors.InternalServerError("go.micro.client", "connection error: refused")
	list := func(ids ...string) []*registry.Service {
		s := &registry.Service{Name: "svc", Version: "1"}
		for _, id := range ids {
			s.Nodes = append(s.Nodes, &registry.Node{Id: id, Address: id + ":8080"})
		}
		return []*registry.Service{s}
	}
	old, current := list("n1", "n2", "n3", "n4"), list("n1", "n2", "n4")
	held := old
	p.held = func(string) []*registry.Service { return held }
	n3 := old[0].Nodes[2]
	for i := 0; i < 3; i++ {
		p.mark("svc", n3, refused)
	}
	h := p.lookup("svc")
	require.NotNil(t, h)
	require.True(t, h.node(n3).listed)

	held = current                          // n3 leaves the list
	p.mark("svc", old[0].Nodes[0], refused) // a failure Mark matches the new list
	require.False(t, h.node(n3).listed)
	h.observe(old) // the late Select
	h.mu.Lock()
	defer h.mu.Unlock()
	assert.False(t, h.node(n3).listed, "n3 is listed again after a Select observed the list before it left")
	assert.Equal(t, 3, h.listed())
}
