// Package cache is a registry cache for go-micro v4, and a drop-in
// replacement for go-micro.dev/v4/registry/cache.
//
// It serves fresh data from memory, serves stale data whenever the registry
// fails, makes one registry call per service however many callers arrive at
// once, throttles every refresh attempt per service, treats a registry that
// fails as a whole as one state with one probe a second, and keeps entries
// fresh from a single background watch stream. See the README for the
// semantics in plain words.
//
// NewSelector is a go-micro selector that reads a Cache directly, with
// passive health: it keeps the client away from nodes that it could not
// reach, such as dead nodes in stale data during a registry outage. The
// gomicro subpackage wires both into a go-micro service in one line,
// gomicro.Registry(r) in place of micro.Registry(r).
//
// # The lock
//
// One mutex, cache.mu, guards the state that the cache shares between its
// callers and its goroutines: the map of entries (written under it, read
// without it), every field of an entry but its data pointer and the
// flags that lookups read lock-free, the registry's health, the queues of
// background work, the watch stream and the counters of what it holds. It
// is never held across a registry call, a log call, an observer's callback
// or a blocking channel operation; code that needs one of those computes
// under the lock, leaves it, acts, and takes it again to re-check.
//
// The hot path takes no lock: an entry's data is an immutable snapshot
// behind an atomic pointer, and its mode (set under the lock, with a timer
// that ends it) says whether the snapshot may be served without looking at
// the clock.
//
// Code that needs no field of the cache lives in packages that cannot
// take the lock: internal/policy (the decisions, as functions of now),
// internal/timeq (the timed queue), internal/svcdata (snapshots, copies,
// merges, prints), internal/snapfile (the snapshot file's format),
// internal/eject (the selector's passive health), internal/guard (the
// registry calls, a panic made an error), internal/counter (the sharded
// hit counters), internal/quote (names in messages), internal/gid (which
// goroutine runs, for Stop called by the observer), internal/watchset (the
// per-service watches of WithWatchPerService, which reach the cache
// through the narrow watchset.Host that watchset.go implements).
//
// # Lock order
//
// cache.mu, then watchset.Set.mu (the per-service watches of
// WithWatchPerService): the cache tells the set of services cached or
// dropped (Changed) and of a registry back up (RedialNow), and asks
// whether a watch fails (Failing), with its own lock held. The set calls
// the host's methods that take cache.mu (Health, Opened, Proven, Failed,
// Redialed) only with its own lock released; with it held, it calls only
// Now and Cached, which take no lock.
//
// Every other mutex (a Watch call's dialCall.mu, the shared maps' table,
// the selector's) is a leaf: nothing else is taken while it is held.
package cache
