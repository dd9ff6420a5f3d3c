package cache

import "context"

// The one watch stream carries every change in the registry, and the cache
// applies only those of the services it holds. Where a registry can tell
// an event's service before it decodes the event, it need not decode the
// others: the cache puts a filter in the context of its Watch call, and
// github.com/regcache/cache/etcd asks it about each event it receives.
// Registries that do not look for the filter deliver every event, as
// before, and the cache ignores those of services it does not hold.

// watchFilterKey is the context key of the watch filter.
type watchFilterKey struct{}

// ContextWithWatchFilter returns a copy of parent that carries filter, for
// registry.WatchContext. A nil filter is no filter.
func ContextWithWatchFilter(parent context.Context, filter func(service string) bool) context.Context {
	return context.WithValue(parent, watchFilterKey{}, filter)
}

// WatchFilter returns the filter that ctx carries, or nil if it carries
// none: the context of a Watch call, set with registry.WatchContext. A
// Cache sets it on its one watch stream, the default (not on the watches
// of WithWatchPerService).
//
// A registry's watcher may call the filter with the service name of each
// event it has received, and drop the event, undecoded, if it returns
// false: the cache does not hold that service, and would ignore the event.
// The name must be the one the decoded event would carry. The answer holds
// for the moment it is given, so the filter is asked about each event
// once it is received, never ahead of it: a service the cache starts to
// hold after the answer is then fetched by a registry call that starts
// after the answer, which sees the change. The filter is safe for
// concurrent use, takes no lock and makes no call.
func WatchFilter(ctx context.Context) func(service string) bool {
	if ctx == nil {
		return nil
	}
	f, _ := ctx.Value(watchFilterKey{}).(func(string) bool)
	return f
}

// holds is the cache's watch filter: whether it holds an entry for
// service, with data or without, which is what apply asks of every event.
// Each entry is stored before the registry call that fills it starts
// (slowLookup), so an event dropped for this answer loses nothing: its
// change was committed before the answer, and the first call for the
// service starts after it. An event the registry drops here is counted as
// apply counts the event of a service not held: ignored, and the registry
// heard from (doubtLocked).
func (c *cache) holds(service string) bool {
	if _, ok := c.entries.Load(service); ok {
		return true
	}
	c.heard.Add(1)
	c.stats.eventsIgnored.Add(1)
	return false
}
