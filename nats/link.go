package nats

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"unsafe"

	"github.com/nats-io/nats.go"
	"go-micro.dev/v4/registry"
)

// The plugin's connection. The plugin makes one connection to NATS, on
// its first call, and keeps it; it does not export it. This package reads
// it, to watch on it and to learn of its changes, so that there is one
// connection, whose state is the one the plugin's queries and
// announcements go through.

var (
	connType   = reflect.TypeOf((*nats.Conn)(nil))
	stringType = reflect.TypeOf("")
)

// pluginConn returns the connection of the plugin's registry r (nil
// before the plugin's first call) and the subject of its announcements.
// They are read from the fields conn and watchTopic of the plugin's
// *natsRegistry, once their types are checked, under the read lock of
// the sync.RWMutex it embeds, which guards conn. ok is false when r has
// no such fields (another version of the plugin): Watch is then the
// plugin's own.
func pluginConn(r registry.Registry) (conn *nats.Conn, topic string, ok bool) {
	v := reflect.ValueOf(r)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil, "", false
	}
	c, t := v.Elem().FieldByName("conn"), v.Elem().FieldByName("watchTopic")
	if !c.IsValid() || c.Type() != connType || !t.IsValid() || t.Type() != stringType {
		return nil, "", false
	}
	l, locks := r.(interface {
		RLock()
		RUnlock()
	})
	if !locks {
		return nil, "", false
	}
	l.RLock()
	conn = *(**nats.Conn)(unsafe.Pointer(c.UnsafeAddr()))
	l.RUnlock()
	return conn, t.String(), true
}

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

// A link follows one connection: the handlers it adds to it end the
// current epoch at every change (lost, re-established, closed), and with
// it every watch made during it.
type link struct {
	conn *nats.Conn

	mu sync.Mutex
	// epoch is done, with the change as its cause, when the connection
	// next changes; end ends it.
	epoch context.Context
	end   context.CancelCauseFunc
}

// newLink adds the link's handlers to conn, each calling the handler it
// replaces (the caller's, from the nats.Options given to the plugin) after
// its own work, so that the caller's handlers run as before. nats.go calls
// the deprecated DisconnectedCB only when no DisconnectedErrCB is set: the
// link's DisconnectedErrCB calls it in that case.
func newLink(conn *nats.Conn) *link {
	l := &link{conn: conn}
	l.epoch, l.end = context.WithCancelCause(context.Background())

	disconnected, oldDisconnected := conn.DisconnectErrHandler(), conn.Opts.DisconnectedCB
	conn.SetDisconnectErrHandler(func(c *nats.Conn, err error) {
		l.changed(lostError(err))
		switch {
		case disconnected != nil:
			disconnected(c, err)
		case oldDisconnected != nil:
			oldDisconnected(c)
		}
	})
	reconnected := conn.ReconnectHandler()
	conn.SetReconnectHandler(func(c *nats.Conn) {
		l.changed(errReconnected)
		if reconnected != nil {
			reconnected(c)
		}
	})
	closed := conn.ClosedHandler()
	conn.SetClosedHandler(func(c *nats.Conn) {
		l.changed(errClosed)
		if closed != nil {
			closed(c)
		}
	})
	return l
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
