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
