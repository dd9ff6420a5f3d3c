// Package cache is a registry cache for go-micro v4, and a drop-in
// replacement for go-micro.dev/v4/registry/cache.
//
// It serves fresh data from memory, serves stale data whenever the registry
// fails, makes one registry call per service however many callers arrive at
// once, throttles every refresh attempt per service, treats a registry that
// fails as a whole as one state with one probe a second, and keeps entries
// fresh from a single background watch stream. See the README for the
// semantics in plain words, and docs/semantics.md for the details.
//
//	c := cache.New(registry.NewMemoryRegistry())
//	defer c.Stop()
//	services, err := c.GetService("greeter")
//
// NewSelector is a go-micro selector that reads a Cache directly, with
// passive health: it keeps the client away from nodes that it could not
// reach, such as dead nodes in stale data during a registry outage. The
// gomicro subpackage wires both into a go-micro service in one line,
// gomicro.Registry(r) in place of micro.Registry(r).
//
// A Cache is safe for concurrent use. GetService returns a copy that the
// caller owns, but for the Metadata maps and endpoint Values, which are
// shared and read-only, as in go-micro's cache; Lookup returns the cached
// data itself, read-only.
package cache
