// Package watchscope is how a registry cache tells a registry's watcher
// what it holds, so that the watcher need not send it the rest.
//
// A cache reads one watch stream of every service, and applies only the
// events of the services it holds. Where a registry can tell an event's
// service before it decodes the event, it need not decode the others: the
// cache puts a filter in the context of its Watch call (WithFilter), and a
// watcher that looks for it (Filter) drops what the cache would ignore.
// Where a registry's store can watch each service on its own, as etcd can,
// the one stream can be made of a watch per service held, as long as each
// watch starts early enough to cover the registry call that fetched its
// service: the cache puts a Scope in the context too (NewContext), which
// tells the watcher which services it holds and when that changes.
//
// github.com/regcache/cache sets both on its one watch stream, and
// github.com/regcache/cache/etcd reads them. A registry that does not look
// for them delivers every event, and loses nothing.
package watchscope

import "context"

// Scope tells a registry's watcher which services the cache that called
// Watch holds, and when that changes. Its methods are safe for concurrent
// use.
type Scope interface {
	// Seq returns the number of changes to the services held so far. It
	// is how a watcher tells how early a watch must start: whatever the
	// watcher learnt before Seq returned s (a revision of the registry,
	// say) it learnt before every change numbered above s, and so before
	// the registry call that fetches the service of such a change, which
	// starts after it.
	Seq() uint64

	// Follow starts following the services held. It returns the names
	// held now, the number (Seq) of the last change they include, and a
	// Follower that yields the changes after it, in order. Stop the
	// Follower when done. The names held now may have been fetched at any
	// time before: the cache re-validates the data it fetched before its
	// stream was established, so a watch of each that starts by the time
	// Watch returns covers them.
	Follow() (names []string, seq uint64, f Follower)

	// Revalidate has the cache fetch the service's data again, as data
	// fetched before a watch of it started: for a watcher that could not
	// start a watch early enough (the registry had forgotten the revision
	// it asked for) and started it late. It does nothing for a service the
	// cache does not hold.
	Revalidate(service string)
}

// Follower yields the changes to the services a cache holds. Its methods
// are safe for concurrent use.
type Follower interface {
	// Changed is ready, with a buffer of one, when Changes has something
	// to return.
	Changed() <-chan struct{}
	// Changes returns the changes since the last call (or since Follow),
	// in the order they were made, and forgets them.
	Changes() []Change
	// Stop ends the following: no change is kept for it any more.
	Stop()
}

// Change is a change to the services a cache holds: Service started (Held)
// or stopped being held. Seq is its number in the count that Scope.Seq
// reads.
type Change struct {
	Service string
	Held    bool
	Seq     uint64
}

type scopeKey struct{}

// NewContext returns a copy of parent that carries s, for
// registry.WatchContext.
func NewContext(parent context.Context, s Scope) context.Context {
	return context.WithValue(parent, scopeKey{}, s)
}

// FromContext returns the scope that ctx carries, or nil if it carries
// none: the context of a Watch call.
func FromContext(ctx context.Context) Scope {
	if ctx == nil {
		return nil
	}
	s, _ := ctx.Value(scopeKey{}).(Scope)
	return s
}

type filterKey struct{}

// WithFilter returns a copy of parent that carries keep, for
// registry.WatchContext. A nil filter is no filter.
func WithFilter(parent context.Context, keep func(service string) bool) context.Context {
	return context.WithValue(parent, filterKey{}, keep)
}

// Filter returns the filter that ctx carries, or nil if it carries none:
// the context of a Watch call.
//
// A registry's watcher may call the filter with the service name of each
// event it has received, and drop the event, undecoded, if it returns
// false: the cache does not hold that service, and would ignore the event.
// The name must be the one the decoded event would carry. The answer holds
// for the moment it is given, so the filter is asked about each event once
// it is received, never ahead of it: a service the cache starts to hold
// after the answer is then fetched by a registry call that starts after
// the answer, which sees the change. The filter is safe for concurrent
// use, takes no lock and makes no call.
func Filter(ctx context.Context) func(service string) bool {
	if ctx == nil {
		return nil
	}
	f, _ := ctx.Value(filterKey{}).(func(string) bool)
	return f
}
