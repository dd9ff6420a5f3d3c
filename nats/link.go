package nats

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
)

// The causes of a watch's end, which Next returns.
var (
	errReconnected = errors.New("nats: the connection to NATS was re-established: what was announced while it was down is lost")
	errClosed      = errors.New("nats: the connection to NATS is closed (nats.go gave up reconnecting)")
)

// lostError is the cause of a watch's end when the connection is lost.
func lostError(err error) error {
	if err == nil {
		return errors.New("nats: the connection to NATS was lost: what is announced until it is re-established is lost")
	}
	return fmt.Errorf("nats: the connection to NATS was lost (%w): what is announced until it is re-established is lost", err)
}

// A link follows the watchers' connection: its handlers end the current
// epoch at every change (lost, re-established, closed), and with it every
// watch made during it.
type link struct {
	// conn is the connection, set once it is made, before the link is
	// shared.
	conn *nats.Conn

	mu sync.Mutex
	// epoch is done, with the change as its cause, when the connection
	// next changes; end ends it.
	epoch context.Context
	end   context.CancelCauseFunc
}

// dial makes the connection with o, the link's handlers in it, and
// returns its link.
func dial(o nats.Options) (*link, error) {
	l := &link{}
	l.epoch, l.end = context.WithCancelCause(context.Background())
	o.DisconnectedErrCB = func(_ *nats.Conn, err error) { l.changed(lostError(err)) }
	o.ReconnectedCB = func(*nats.Conn) { l.changed(errReconnected) }
	o.ClosedCB = func(*nats.Conn) { l.changed(errClosed) }
	conn, err := o.Connect()
	if err != nil {
		return nil, fmt.Errorf("nats: connect: %w", err)
	}
	l.conn = conn
	return l, nil
}

// changed ends the current epoch with cause, and starts the next.
func (l *link) changed(cause error) {
	l.mu.Lock()
	end := l.end
	l.epoch, l.end = context.WithCancelCause(context.Background())
	l.mu.Unlock()
	end(cause)
}

// current returns the current epoch, done at the connection's next change.
func (l *link) current() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epoch
}
