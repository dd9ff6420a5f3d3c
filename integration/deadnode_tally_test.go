package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go-micro.dev/v4/client"
	merrors "go-micro.dev/v4/errors"
	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
	"go-micro.dev/v4/util/backoff"
)

// settleAfter is how many failed attempts in a row at the dead node are "the
// first few": the attempts a client starts after it has reported that many
// to its selector's Mark are its steady state. It is regcache's default
// number of failures in a row that ejects a node, and it is counted the same
// way for every client, whatever its selector does with Mark.
const settleAfter = 3

// deadTally counts one client's RPCs and attempts in the dead-node
// scenario. A call wrapper sees every attempt and the node the selector
// picked for it; the selector wrapper (markingSelector) sees every outcome
// go-micro's client reports to Mark.
type deadTally struct {
	dead string // the dead node's Id

	// open: attempts that start now are counted.
	open atomic.Bool
	// settled: the client has reported settleAfter failures in a row of
	// the dead node to Mark.
	settled atomic.Bool

	attempts, deadAttempts, settledAttempts, settledDead atomic.Int64

	mu      sync.Mutex     // guards what follows
	streak  int            // failures in a row of the dead node, until settled
	byNode  map[string]int // attempts by node Id
	lat     []time.Duration
	failed  int
	lastErr error
}

// wrap is the client's call wrapper: go-micro runs it around every attempt,
// with the attempt's node.
func (t *deadTally) wrap(next client.CallFunc) client.CallFunc {
	return func(ctx context.Context, node *registry.Node, req client.Request, rsp interface{}, opts client.CallOptions) error {
		if t.open.Load() {
			dead := node != nil && node.Id == t.dead
			t.mu.Lock()
			if t.byNode == nil {
				t.byNode = map[string]int{}
			}
			t.byNode[node.Id]++
			t.mu.Unlock()
			t.attempts.Add(1)
			if dead {
				t.deadAttempts.Add(1)
			}
			if t.settled.Load() {
				t.settledAttempts.Add(1)
				if dead {
					t.settledDead.Add(1)
				}
			}
		}
		return next(ctx, node, req, rsp, opts)
	}
}

// marked notes the outcome of an attempt at the dead node.
func (t *deadTally) marked(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.settled.Load():
	case err == nil:
		t.streak = 0
	default:
		t.streak++
		if t.streak >= settleAfter {
			t.settled.Store(true)
		}
	}
}

// record notes an RPC of the window that took d and returned err.
func (t *deadTally) record(d time.Duration, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lat = append(t.lat, d)
	if err != nil {
		t.failed++
		t.lastErr = err
	}
}

// markingSelector is the selector a client holds: its selector, with the
// outcomes of attempts at the dead node passed on to the tally after the
// selector has had them.
type markingSelector struct {
	selector.Selector
	t *deadTally
}

func (m *markingSelector) Mark(service string, node *registry.Node, err error) {
	m.Selector.Mark(service, node, err)
	if node != nil && node.Id == m.t.dead {
		m.t.marked(err)
	}
}

// deadRow is what one client saw in the window.
type deadRow struct {
	RPCs, Failed int
	LastErr      error
	// Attempts and Dead count every attempt and those sent to the dead
	// node; Settled and SettledDead the same for the attempts that
	// started after settleAfter failures in a row there.
	Attempts, Dead, Settled, SettledDead int64
	// WasSettled: the dead node failed settleAfter times in a row.
	WasSettled    bool
	P50, P99, Max time.Duration
}

func (r deadRow) deadShare() float64    { return share(r.Dead, r.Attempts) }
func (r deadRow) settledShare() float64 { return share(r.SettledDead, r.Settled) }

func share(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// row is the tally's figures. Every RPC must have ended.
func (t *deadTally) row() deadRow {
	t.mu.Lock()
	defer t.mu.Unlock()
	lat := append([]time.Duration(nil), t.lat...)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return deadRow{
		RPCs: len(lat), Failed: t.failed, LastErr: t.lastErr,
		Attempts: t.attempts.Load(), Dead: t.deadAttempts.Load(),
		Settled: t.settledAttempts.Load(), SettledDead: t.settledDead.Load(),
		WasSettled: t.settled.Load(),
		P50:        quantile(lat, 0.50), P99: quantile(lat, 0.99), Max: quantile(lat, 1),
	}
}

// quantile is the nearest-rank q-quantile of sorted, or 0 if it is empty.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

// retryUnreachable retries an attempt that did not reach its node: a
// connection error or a timeout, which go-micro's client reports with its
// own Id (the policy docs/client.md shows). go-micro's default,
// client.RetryOnError, retries timeouts only, so an RPC whose first node
// refuses the connection would fail although its request was never sent.
func retryUnreachable(_ context.Context, _ client.Request, _ int, err error) (bool, error) {
	var e *merrors.Error
	if errors.As(err, &e) && e.Id == "go.micro.client" &&
		(e.Code == 408 || strings.HasPrefix(e.Detail, "connection error")) {
		return true, nil
	}
	return false, nil
}

// deadRequestTimeout is every client's request timeout in the scenario,
// retries included: the one the other RPC tests here use.
const deadRequestTimeout = 5 * time.Second

// retryPolicy says, for the log, what every client does when an attempt
// fails.
func retryPolicy() string {
	var waits []string
	for i := 1; i <= client.DefaultRetries; i++ {
		waits = append(waits, backoff.Do(i).Round(time.Millisecond).String())
	}
	return fmt.Sprintf("up to %d retries (go-micro's default) after go-micro's default backoff (%s before the 2nd to %dth attempt); "+
		"connection errors and timeouts retried (go-micro's default retries timeouts only); request timeout %v, retries included; "+
		"a connection per attempt (PoolSize 0)",
		client.DefaultRetries, strings.Join(waits, ", "), client.DefaultRetries+1, deadRequestTimeout)
}

// quietLogger is the logger of the scenario's clients, which log every
// retry.
func quietLogger() logger.Logger {
	return logger.NewLogger(logger.WithLevel(logger.FatalLevel), logger.WithOutput(io.Discard))
}

// byNodes says how many attempts went to each of nodes, in order.
func (t *deadTally) byNodes(nodes []string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var parts []string
	for _, n := range nodes {
		parts = append(parts, fmt.Sprintf("%s %d", n, t.byNode[n]))
	}
	return strings.Join(parts, ", ")
}
