package storm

import (
	"context"
	"reflect"
	"testing"
	"time"

	"go-micro.dev/v4/client"
	merrors "go-micro.dev/v4/errors"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
)

// nopSelector is a selector whose Mark does nothing, as go-micro's default
// selector's.
type nopSelector struct{ selector.Selector }

func (nopSelector) Mark(string, *registry.Node, error) {}

// The tally counts what go-micro's client does around each attempt: the
// call wrapper sees the attempt and its node, then the client reports the
// outcome to Mark. Three RPCs, as they could interleave.
func TestTally(t *testing.T) {
	// One scenario of two slots, an hour each: every RPC and attempt falls
	// in the first.
	tl := newTally("dead", &timeline{phaseStart: []time.Time{time.Now()}, slot: time.Hour, slots: []int{2}}, 0)
	tl.open.Store(true)
	m := &marking{Selector: nopSelector{}, t: tl}
	dead, live := &registry.Node{Id: "dead"}, &registry.Node{Id: "live"}
	refused := merrors.InternalServerError("go.micro.client", "connection error: dial tcp: connection refused")
	timeout := merrors.Timeout("go.micro.client", "call timeout: context deadline exceeded")
	attempt := func(ctx context.Context, n *registry.Node, err error) {
		call := tl.wrap(func(context.Context, *registry.Node, client.Request, interface{}, client.CallOptions) error {
			return err
		})
		m.Mark("s", n, call(ctx, n, nil, nil, client.CallOptions{}))
	}

	ctx1, rpc1 := tl.rpcContext() // starts before the row
	attempt(ctx1, dead, refused)
	attempt(ctx1, dead, refused)
	ctx2, rpc2 := tl.rpcContext()
	attempt(ctx2, dead, refused) // the third in a row: settled from now on
	attempt(ctx1, dead, refused) // a retry of an RPC that started before
	attempt(ctx1, live, nil)
	tl.record(time.Now(), 700*time.Millisecond, nil, true, rpc1)
	attempt(ctx2, live, nil)
	tl.record(time.Now(), 100*time.Millisecond, nil, true, rpc2)
	ctx3, rpc3 := tl.rpcContext()
	attempt(ctx3, live, timeout)
	tl.record(time.Now(), time.Second, timeout, true, rpc3) // never tried the dead node

	got := tl.row("c")
	want := RPCRow{Client: "c", RPCs: 3, Failed: 1, Timeouts: 1, Untouched: 1,
		Attempts: 7, DeadAttempts: 4, Settled: 4, SettledDead: 1, SettledDeadEarly: 1,
		FailedPerSlot: []int64{1, 0}, DeadPerSlot: []int64{4, 0}}
	got.P50, got.P99, got.Max = 0, 0, 0
	if !reflect.DeepEqual(got, want) {
		t.Errorf("row\n got %+v\nwant %+v", got, want)
	}
	if tl.row("c").Max != time.Second {
		t.Errorf("max latency %v, want 1s", tl.row("c").Max)
	}
}
