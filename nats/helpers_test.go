package nats

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go-micro.dev/v4/registry"
)

// fastReconnect is nats.go's defaults with a reconnect every 20 ms, for
// ever, so that the tests need not wait nats.go's 2 s.
func fastReconnect() nats.Options {
	o := nats.GetDefaultOptions()
	o.ReconnectWait = 20 * time.Millisecond
	o.ReconnectJitter = 0
	o.MaxReconnect = -1
	return o
}

// newTestRegistry is this package's registry on addr, whose connection
// is closed when the test ends.
func newTestRegistry(t *testing.T, addr string, opts ...registry.Option) *natsRegistry {
	t.Helper()
	r := NewRegistry(append([]registry.Option{registry.Addrs(addr)}, opts...)...).(*natsRegistry)
	t.Cleanup(func() { closeConn(r) })
	return r
}

// newWriter is a registry that registers and deregisters, as another
// process does: the plugin's, on a connection of its own, closed when the
// test ends.
func newWriter(t *testing.T, addr string, opts ...registry.Option) registry.Registry {
	t.Helper()
	w := NewRegistry(append([]registry.Option{registry.Addrs(addr)}, opts...)...).(*natsRegistry)
	t.Cleanup(func() { closeConn(w) })
	return w.plugin
}

// closeConn closes the plugin's connection, which the plugin never does.
func closeConn(r *natsRegistry) {
	if c := r.link.connection(); c != nil {
		c.Close()
	}
}

func watch(t *testing.T, r registry.Registry, opts ...registry.WatchOption) registry.Watcher {
	t.Helper()
	w, err := r.Watch(opts...)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	t.Cleanup(w.Stop)
	return w
}

func service(name, version string, nodes ...string) *registry.Service {
	s := &registry.Service{Name: name, Version: version}
	for _, n := range nodes {
		s.Nodes = append(s.Nodes, &registry.Node{Id: n, Address: "127.0.0.1:1", Metadata: map[string]string{"node": n}})
	}
	return s
}

// outcome is what one Next returned.
type outcome struct {
	res *registry.Result
	err error
}

// next calls w.Next in the background, so that a test can wait for it
// with a deadline.
func next(w registry.Watcher) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		res, err := w.Next()
		ch <- outcome{res, err}
	}()
	return ch
}

// mustNext waits up to 5 s for an announcement of action about the
// service named name with the nodes ids.
func mustNext(t *testing.T, w registry.Watcher, action, name string, ids ...string) *registry.Result {
	t.Helper()
	select {
	case o := <-next(w):
		if o.err != nil {
			t.Fatalf("Next: %v; want %s %s%v", o.err, action, name, ids)
		}
		var got []string
		for _, n := range o.res.Service.Nodes {
			got = append(got, n.Id)
		}
		if o.res.Action != action || o.res.Service.Name != name || strings.Join(got, ",") != strings.Join(ids, ",") {
			t.Fatalf("Next: %s %s%v; want %s %s%v", o.res.Action, o.res.Service.Name, got, action, name, ids)
		}
		return o.res
	case <-time.After(5 * time.Second):
		t.Fatalf("Next: nothing in 5 s; want %s %s%v", action, name, ids)
	}
	return nil
}

// mustFail waits up to 5 s for Next to fail, and returns the error.
func mustFail(t *testing.T, w registry.Watcher) error {
	t.Helper()
	select {
	case o := <-next(w):
		if o.err == nil {
			t.Fatalf("Next: %s %s; want an error", o.res.Action, o.res.Service.Name)
		}
		return o.err
	case <-time.After(5 * time.Second):
		t.Fatalf("Next: nothing in 5 s; want an error")
	}
	return nil
}

// eventually polls cond every 5 ms until it holds, for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5 s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// isOneOf reports whether err is one of the targets.
func isOneOf(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

func nodeName(i int) string { return fmt.Sprintf("node-%02d", i) }
