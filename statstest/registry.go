package statstest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"go-micro.dev/v4/registry"
)

// scriptedRegistry is a registry whose watch streams the test drives, and
// whose GetService fails for one name. Everything else goes to the wrapped
// registry.
type scriptedRegistry struct {
	registry.Registry
	failing string
	streams chan *scriptedStream
}

func (r *scriptedRegistry) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	if name == r.failing {
		return nil, errors.New("scripted registry failure")
	}
	return r.Registry.GetService(name, opts...)
}

func (r *scriptedRegistry) Watch(...registry.WatchOption) (registry.Watcher, error) {
	s := &scriptedStream{
		events:  make(chan *registry.Result),
		errs:    make(chan error),
		stopped: make(chan struct{}),
	}
	select {
	case r.streams <- s:
	default:
		return nil, errors.New("scripted registry: too many watch streams")
	}
	return s, nil
}

// nextStream returns the next stream the cache opens.
func (r *scriptedRegistry) nextStream(t *testing.T) *scriptedStream {
	t.Helper()
	select {
	case s := <-r.streams:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("the cache opened no watch stream within 10 s")
		return nil
	}
}

// scriptedStream is a registry.Watcher fed by the test over unbuffered
// channels: a send returns when the cache's watcher has taken the event.
type scriptedStream struct {
	events  chan *registry.Result
	errs    chan error
	stopped chan struct{}
	once    sync.Once
}

func (s *scriptedStream) Next() (*registry.Result, error) {
	select {
	case r := <-s.events:
		return r, nil
	case err := <-s.errs:
		return nil, err
	case <-s.stopped:
		return nil, registry.ErrWatcherStopped
	}
}

func (s *scriptedStream) Stop() { s.once.Do(func() { close(s.stopped) }) }

func (s *scriptedStream) send(t *testing.T, r *registry.Result) {
	t.Helper()
	select {
	case s.events <- r:
	case <-time.After(10 * time.Second):
		t.Fatalf("the cache's watcher took no event within 10 s")
	}
}

func (s *scriptedStream) fail(t *testing.T, err error) {
	t.Helper()
	select {
	case s.errs <- err:
	case <-time.After(10 * time.Second):
		t.Fatalf("the cache's watcher did not call Next within 10 s")
	}
}
