package cache_test

import (
	"context"
	"fmt"
	"time"

	"github.com/regcache/cache/internal/fakereg"
	"go-micro.dev/v4/registry"
)

// newReg returns the fake registry (internal/fakereg) holding svcs, each a
// version of its service, set silently.
func newReg(svcs ...*registry.Service) *fakereg.Registry {
	r := fakereg.New()
	for _, s := range svcs {
		putVersion(r, s)
	}
	return r
}

// putVersion stores s in r silently: a new version of its service, or in
// place of the version of the same name.
func putVersion(r *fakereg.Registry, s *registry.Service) {
	cur := r.Held(s.Name)
	for i, old := range cur {
		if old.Version == s.Version {
			cur[i] = s
			r.Set(s.Name, cur...)
			return
		}
	}
	r.Set(s.Name, append(cur, s)...)
}

// sendEvent hands the cache watching r an event on r's newest stream, once
// r has one, and returns when the cache's watcher has taken it.
func sendEvent(r *fakereg.Registry, action string, s *registry.Service) {
	for r.Stream() == nil {
		time.Sleep(time.Millisecond)
	}
	r.Stream().Send(action, s)
}

// barrier returns once the cache watching r has applied every event sent
// before it: it sends an event for a service that nobody caches, which the
// watcher takes only after it has applied the previous one.
func barrier(r *fakereg.Registry) {
	sendEvent(r, "update", &registry.Service{Name: "regcache.barrier"})
}

// timesOut is the fault of a registry that answers nothing for d, then
// fails as a client whose own timeout passed; a caller whose context is
// done first gets the context's error.
func timesOut(d time.Duration) fakereg.Fault {
	return fakereg.Fault{Latency: d, Err: fmt.Errorf("fake registry: %w", context.DeadlineExceeded)}
}
