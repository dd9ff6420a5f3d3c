package etcd

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/connectivity"
)

// grace is how long the gRPC connection to etcd may be away from READY,
// without a failure, before Next reports it. A connection that gRPC is
// merely re-establishing (a GOAWAY, an endpoint update) is READY again in
// milliseconds, and etcd's client then resumes the watch from its last
// revision, losing nothing: a cache need not resync for it. A connection
// that cannot be made shows TRANSIENT_FAILURE at once, which is reported
// at once; grace bounds the rest, such as a dial that hangs on an
// unreachable host, so that an outage shows within a second.
const grace = time.Second

// connState is what watchConnection needs of a *grpc.ClientConn.
type connState interface {
	GetState() connectivity.State
	WaitForStateChange(ctx context.Context, source connectivity.State) bool
}

// backoffConn is what resetBackoffWhileFailing needs of a
// *grpc.ClientConn.
type backoffConn interface {
	connState
	ResetConnectBackoff()
}

// resetEvery is the least time between two resets of gRPC's connect
// backoff while a Watch waits for etcd: how soon after etcd's return the
// client dials it, at most, and how often, at most, it dials an etcd that
// is still down while a Watch waits.
const resetEvery = 250 * time.Millisecond

// resetBackoffWhileFailing resets conn's connect backoff whenever conn is
// in TRANSIENT_FAILURE: at once, and again every `every` while it stays
// there, until ctx is done.
//
// etcd's client (v3.5) leaves reconnecting to gRPC with gRPC's defaults:
// it sets no connect parameters, and its own backoff (25 ms, 10 % jitter)
// is for retrying requests, not dials. gRPC waits 1 s after the first
// failed dial, then 1.6 times longer after each, ±20 %, up to 2 min: after
// a long outage, a Watch once etcd is back would time out waiting for the
// next dial. A reset makes the next dial now; one at the start of the
// Watch alone would leave a Watch that waits through the end of an outage
// to gRPC's backoff again after its first failed dial (the next ones 1 s,
// then 2.6 s, 5.2 s later), so the reset is repeated. gRPC keeps the
// connection in TRANSIENT_FAILURE until it is READY, through the dials in
// between, so the repeats are paced by a timer, not by state changes.
func resetBackoffWhileFailing(ctx context.Context, conn backoffConn, every time.Duration) {
	for {
		state := conn.GetState()
		if state != connectivity.TransientFailure {
			if !conn.WaitForStateChange(ctx, state) {
				return
			}
			continue
		}
		conn.ResetConnectBackoff()
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// watchConnection returns an error as soon as conn is in
// TRANSIENT_FAILURE or SHUTDOWN, or has been away from READY for grace
// (counted from when it left READY, however often it changes state in
// between); or nil when ctx is done.
//
// It is why an etcd outage shows on the stream: etcd's client keeps a
// broken watch open and re-establishes it by itself when etcd is back, so
// its channel shows nothing in between, neither the outage nor the
// changes missed during it.
func watchConnection(ctx context.Context, conn connState, grace time.Duration) error {
	var left time.Time // when conn left READY; zero while it is READY
	for {
		state := conn.GetState()
		switch state {
		case connectivity.Ready:
			left = time.Time{}
			if !conn.WaitForStateChange(ctx, state) {
				return nil
			}
			continue
		case connectivity.TransientFailure, connectivity.Shutdown:
			return fmt.Errorf("etcd: the connection to etcd is %v", state)
		}
		if left.IsZero() {
			left = time.Now()
		}
		wait, cancel := context.WithDeadline(ctx, left.Add(grace))
		changed := conn.WaitForStateChange(wait, state)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case !changed:
			return fmt.Errorf("etcd: the connection to etcd is %v, not READY for %v", state, grace)
		}
	}
}
