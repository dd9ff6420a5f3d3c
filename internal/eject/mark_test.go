package eject

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

// TestPassiveStateIsBounded: failures of ever-new nodes, as in a service
// that scales up and down while failing, leave state only for the nodes
// that failed in the last maximum ejection time.
func TestPassiveStateIsBounded(t *testing.T) {
	p, _, now := testPassive()
	refused := merrors.InternalServerError("go.micro.client", "connection error: refused")
	for i := 0; i < 10_000; i++ {
		svc := fmt.Sprintf("svc-%d", i%10)
		p.Mark(svc, &registry.Node{Id: fmt.Sprintf("node-%d", i)}, refused)
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
	p2.Mark("svc", n, refused)
	assert.EqualValues(t, 1, p2.tracked.Load())
	p2.Mark("svc", n, nil)
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
		p.Mark("svc", n, refused)
	}
	require.True(t, p.lookup("svc").node(n).ejectedAt(p.nanos(*now)))
	*now = now.Add(30 * time.Second)
	p.Mark("svc", n, nil) // readmitted on trial, and reached
	h := p.lookup("svc")
	require.NotNil(t, h)
	assert.False(t, h.node(n).ejectedAt(p.nanos(*now)))
	assert.Equal(t, 1, h.node(n).streak)
	*now = now.Add(29 * time.Second)
	p.Mark("svc", n, nil)
	assert.NotNil(t, p.lookup("svc"), "streak not decayed yet")
	*now = now.Add(time.Second)
	p.Mark("svc", n, nil)
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
		p.Mark("svc", n, refused)
	}
	*now = now.Add(30 * time.Second)
	p.Mark("svc", n, nil) // readmitted; its streak keeps its state
	require.NotNil(t, p.lookup("svc"))
	for i := 0; i < 5; i++ {
		p.Mark("svc", n, refused)
		p.Mark("svc", n, refused)
		if i%2 == 0 {
			p.Mark("svc", n, nil)
		} else {
			p.Mark("svc", n, errors.New("handler error"))
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
		p.Mark("svc", n, refused)
	}
	var got []time.Duration
	for i := 0; i < 6; i++ {
		nh := p.lookup("svc").node(n)
		until := func() time.Time { return p.at(nh.until.Load()) }
		got = append(got, until().Sub(*now))
		// A failure of an attempt that began before the ejection
		// changes nothing.
		p.Mark("svc", n, refused)
		assert.Equal(t, got[i], until().Sub(*now))
		*now = until()
		p.Mark("svc", n, refused) // on trial: ejected again at once
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
	p.Mark("svc", &registry.Node{Id: "n1"}, refused) // the service has state
	for i := 0; i < 10; i++ {
		p.Mark("svc", &registry.Node{Id: "n1"}, refused)
		p.Mark("svc", &registry.Node{Id: "n2"}, refused)
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
		p.Mark("svc", n, refused)
	}
	*now = now.Add(30 * time.Second)
	p.Mark("svc", n, nil) // readmitted; one ejection in a row left to decay
	h := p.lookup("svc")
	require.NotNil(t, h)
	h.mu.Lock()
	done := make(chan struct{})
	go func() {
		for i := 0; i < 1000; i++ {
			p.Mark("svc", n, nil)
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
	p.Mark("svc", n, nil)
	assert.Nil(t, p.lookup("svc"))
}

// TestRefusedConnectionEjectsAtOnce: nothing listens at a node whose host
// refuses the connection, so one such failure ejects it, whatever the
// count of failures in a row that ejects a node; the share of ejected
// nodes still holds, and off is off.
func TestRefusedConnectionEjectsAtOnce(t *testing.T) {
	refused := merrors.InternalServerError("go.micro.client", "connection error: dial tcp 10.0.0.1:8080: connect: connection refused")
	timeout := merrors.InternalServerError("go.micro.client", "connection error: dial tcp 10.0.0.2:8080: i/o timeout")
	n1 := &registry.Node{Id: "n1", Address: "10.0.0.1:8080"}
	n2 := &registry.Node{Id: "n2", Address: "10.0.0.2:8080"}

	p, l, now := testPassive(n1, n2)
	p.Mark("svc", n1, refused)
	assert.True(t, p.lookup("svc").node(n1).ejectedAt(p.nanos(*now)), "ejected by one refused connection")
	assert.EqualValues(t, 1, p.ejections.Load())
	assert.Equal(t, []string{`warn regcache: node "n1" (10.0.0.1:8080) of service "svc" ejected for 30s after 1 failure in a row: ` + refused.Error()}, l.all())
	// Another dial failure is a failure like the others.
	p.Mark("svc", n2, timeout)
	assert.False(t, p.lookup("svc").node(n2).ejectedAt(p.nanos(*now)))

	// The share: one of two nodes ejected already, n2 stays in rotation.
	p.Mark("svc", n2, refused)
	assert.False(t, p.lookup("svc").node(n2).ejectedAt(p.nanos(*now)), "kept by the share")
	assert.EqualValues(t, 1, p.refused.Load())

	// A higher count changes nothing for a refused connection.
	p, _, now = testPassive(n1, n2)
	cfg := defaults
	cfg.EjectAfter = 10
	p.Configure(cfg)
	p.Mark("svc", n1, refused)
	assert.True(t, p.lookup("svc").node(n1).ejectedAt(p.nanos(*now)))

	// Off: nothing recorded.
	p, _, _ = testPassive(n1, n2)
	cfg.EjectAfter = 0
	p.Configure(cfg)
	p.Mark("svc", n1, refused)
	assert.Nil(t, p.lookup("svc"))
	assert.Zero(t, p.ejections.Load())
}
