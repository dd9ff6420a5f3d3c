package storm

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go-micro.dev/v4/client"
	merrors "go-micro.dev/v4/errors"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
)

// SettleAfter is how many failed attempts in a row at the dead node "the
// first few" are: the attempts that a client starts once it has reported
// that many to its selector's Mark are its steady state. It is regcache's
// default number of failures in a row that ejects a node, and applies to
// every client alike. (A request that the killed instance finished serving
// while it stopped can end between two failures: it breaks the row.)
const SettleAfter = 3

// RPCRow is what one RPC client saw in the client path, from the moment
// the dead node died to the end of the scenario.
type RPCRow struct {
	Client string
	// RPCs counts the calls that started in the window; Failed those that
	// returned an error, Timeouts those of them that ran out of the
	// request timeout, and Unreachable those that failed with a
	// connection error (every attempt went to the dead node).
	RPCs, Failed, Timeouts, Unreachable int64
	// Untouched counts the failed RPCs none of whose attempts went to the
	// dead node: they ran out of the request timeout on live instances,
	// on a machine too busy to serve them in time.
	Untouched int64
	// Attempts counts the attempts that started in the window (go-micro
	// makes one per try of an RPC, each to a node the selector picked),
	// and DeadAttempts those that went to the dead node.
	Attempts, DeadAttempts int64
	// Settled and SettledDead are the same, for the attempts that started
	// after the client had told its selector of SettleAfter failures in a
	// row of the dead node; SettledDeadEarly counts those of the latter
	// that were retries of an RPC that had started before.
	Settled, SettledDead, SettledDeadEarly int64
	// P50, P99, Max: latency of the RPCs, retries included.
	P50, P99, Max time.Duration
	// Ejections is the number of ejections the selector made, if it
	// reports them (HasEjections).
	Ejections    uint64
	HasEjections bool
	// FailedPerSlot and DeadPerSlot are Failed and DeadAttempts slot by
	// slot of the scenario, as in Row: an RPC counts in the slot it
	// started in, an attempt in its own. They add up to Failed and
	// DeadAttempts.
	FailedPerSlot, DeadPerSlot []int64
}

// DeadShare is the share of the attempts that went to the dead node; and
// SettledShare the same after SettleAfter failures in a row there.
func (r RPCRow) DeadShare() float64    { return frac(r.DeadAttempts, r.Attempts) }
func (r RPCRow) SettledShare() float64 { return frac(r.SettledDead, r.Settled) }

func frac(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// tally counts one client's RPCs and attempts. Attempts are seen by a call
// wrapper, which go-micro's client runs around each attempt, with the node
// the selector picked for it; their outcomes by the selector's Mark (see
// marking). Every RPC runs on a goroutine of its own.
type tally struct {
	dead string // the dead node's Id
	// tl and p place RPCs and attempts in the slots of the client path.
	tl *timeline
	p  int32

	// open says that the window is open: RPCs and attempts that start
	// while it is are counted.
	open atomic.Bool
	// settledNow says that the client has reported SettleAfter failures
	// in a row of the dead node to its selector's Mark.
	settledNow atomic.Bool

	attempts, deadAttempts, settled, settledDead, settledDeadEarly atomic.Int64
	deadPerSlot                                                    []atomic.Int64

	// For the progress line: every RPC that ended, counted or not.
	ended, failedAll atomic.Int64

	mu                                             sync.Mutex // guards what follows
	streak                                         int        // failures in a row of the dead node, until settled
	h                                              hist
	rpcs, failed, timeouts, unreachable, untouched int64
	failedPerSlot                                  []int64
}

// newTally is the tally of one client in scenario p of tl, with dead the
// dead node's Id.
func newTally(dead string, tl *timeline, p int32) *tally {
	n := tl.slots[p]
	return &tally{dead: dead, tl: tl, p: p, deadPerSlot: make([]atomic.Int64, n), failedPerSlot: make([]int64, n)}
}

func (t *tally) wrap(next client.CallFunc) client.CallFunc {
	return func(ctx context.Context, node *registry.Node, req client.Request, rsp interface{}, opts client.CallOptions) error {
		dead := node != nil && node.Id == t.dead
		if st, _ := ctx.Value(rpcKey{}).(*rpcState); st != nil && dead {
			st.touched.Store(true)
		}
		if t.open.Load() {
			t.attempts.Add(1)
			if dead {
				t.deadAttempts.Add(1)
				t.deadPerSlot[t.tl.slotOf(t.p, time.Now())].Add(1)
			}
			if t.settledNow.Load() {
				t.settled.Add(1)
				if dead {
					t.settledDead.Add(1)
					if st, _ := ctx.Value(rpcKey{}).(*rpcState); st != nil && st.early {
						t.settledDeadEarly.Add(1)
					}
				}
			}
		}
		return next(ctx, node, req, rsp, opts)
	}
}

// marking is the selector the client holds: sel, with its Mark calls
// counted. go-micro's client reports each attempt's outcome to Mark; an
// attempt counts as settled once the selector has been told of
// SettleAfter failures in a row of the dead node, whatever it does with
// them.
type marking struct {
	selector.Selector
	t *tally
}

func (m *marking) Mark(service string, node *registry.Node, err error) {
	m.Selector.Mark(service, node, err)
	if node != nil && node.Id == m.t.dead {
		m.t.marked(err)
	}
}

// marked notes an outcome of an attempt at the dead node, reported to
// Mark.
func (t *tally) marked(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.settledNow.Load():
	case err == nil:
		t.streak = 0
	default:
		t.streak++
		if t.streak >= SettleAfter {
			t.settledNow.Store(true)
		}
	}
}

// rpcState is what the call wrapper learns of one RPC, through its
// context.
type rpcState struct {
	// early says that the RPC started before the client had told its
	// selector of SettleAfter failures in a row of the dead node.
	early bool
	// touched says that an attempt went to the dead node. (go-micro's
	// client runs each attempt on a goroutine of its own.)
	touched atomic.Bool
}

type rpcKey struct{}

// rpcContext is the context of an RPC that starts now, and its state.
func (t *tally) rpcContext() (context.Context, *rpcState) {
	st := &rpcState{early: !t.settledNow.Load()}
	return context.WithValue(context.Background(), rpcKey{}, st), st
}

// errBadAnswer is an RPC that returned no error and not the answer.
var errBadAnswer = errors.New("the RPC returned a wrong answer")

// record notes an RPC that started at start, took d and returned err;
// counted says whether it started in the window, and st is what its
// attempts did.
func (t *tally) record(start time.Time, d time.Duration, err error, counted bool, st *rpcState) {
	t.ended.Add(1)
	if err != nil {
		t.failedAll.Add(1)
	}
	if !counted {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.h.add(d)
	t.rpcs++
	if err == nil {
		return
	}
	t.failed++
	t.failedPerSlot[t.tl.slotOf(t.p, start)]++
	if !st.touched.Load() {
		t.untouched++
	}
	var e *merrors.Error
	switch {
	case !errors.As(err, &e):
	case e.Code == 408:
		t.timeouts++
	case e.Id == "go.micro.client" && strings.HasPrefix(e.Detail, "connection error"):
		t.unreachable++
	}
}

// row is the tally's row. The window must be closed and every RPC ended.
func (t *tally) row(name string) RPCRow {
	t.mu.Lock()
	defer t.mu.Unlock()
	dead := make([]int64, len(t.deadPerSlot))
	for i := range dead {
		dead[i] = t.deadPerSlot[i].Load()
	}
	return RPCRow{
		Client: name,
		RPCs:   t.rpcs, Failed: t.failed, Timeouts: t.timeouts, Unreachable: t.unreachable, Untouched: t.untouched,
		Attempts: t.attempts.Load(), DeadAttempts: t.deadAttempts.Load(),
		Settled: t.settled.Load(), SettledDead: t.settledDead.Load(), SettledDeadEarly: t.settledDeadEarly.Load(),
		P50: t.h.quantile(0.5), P99: t.h.quantile(0.99), Max: t.h.quantile(1),
		FailedPerSlot: append([]int64(nil), t.failedPerSlot...), DeadPerSlot: dead,
	}
}
