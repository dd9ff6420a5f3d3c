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

// A link follows the plugin's connection: the handlers it adds to the
// nats.Options the plugin is given (hook) tell it of the connection when
// nats.go has made it, and end the current epoch at every change (lost,
// re-established, closed), and with it every watch made during it.
type link struct {
	mu sync.Mutex
	// conn is the plugin's connection, once nats.go has told of it; known
	// is closed then.
	conn  *nats.Conn
	known chan struct{}
	// epoch is done, with the change as its cause, when the connection
	// next changes; end ends it.
	epoch context.Context
	end   context.CancelCauseFunc
}

func newLink() *link {
	l := &link{known: make(chan struct{})}
	l.epoch, l.end = context.WithCancelCause(context.Background())
	return l
}

// hook returns o with the link's handlers, each calling the handler it
// replaces (the caller's) after its own work, so that the caller's
// handlers run as before. nats.go calls the deprecated DisconnectedCB only
// when no DisconnectedErrCB is set: the link's DisconnectedErrCB calls it
// in that case. ConnectedCB, which nats.go calls once the connection is
// made (at once, or later under RetryOnFailedConnect), is how the link
// learns of the connection.
func (l *link) hook(o nats.Options) nats.Options {
	connected := o.ConnectedCB
	o.ConnectedCB = func(c *nats.Conn) {
		l.found(c)
		if connected != nil {
			connected(c)
		}
	}
	disconnected, oldDisconnected := o.DisconnectedErrCB, o.DisconnectedCB
	o.DisconnectedErrCB = func(c *nats.Conn, err error) {
		l.changed(lostError(err))
		switch {
		case disconnected != nil:
			disconnected(c, err)
		case oldDisconnected != nil:
			oldDisconnected(c)
		}
	}
	reconnected := o.ReconnectedCB
	o.ReconnectedCB = func(c *nats.Conn) {
		l.found(c)
		l.changed(errReconnected)
		if reconnected != nil {
			reconnected(c)
		}
	}
	closed := o.ClosedCB
	o.ClosedCB = func(c *nats.Conn) {
		l.changed(errClosed)
		if closed != nil {
			closed(c)
		}
	}
	return o
}

// found records c as the connection, if none is known yet: the plugin
// makes one connection and keeps it.
func (l *link) found(c *nats.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		l.conn = c
		close(l.known)
	}
}

// connection returns the connection, nil while none is known.
func (l *link) connection() *nats.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conn
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
