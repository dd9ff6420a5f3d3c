package storm

import (
	"fmt"

	"go-micro.dev/v5/registry"
	gmcache "go-micro.dev/v5/registry/cache"
)

// This file is the v5 demo's own, written by hand: internal/gen5 skips
// demo/internal/storm/gmcaches.go, the v4 demo's, which also sets go-micro
// v5's cache beside v4's through an adapter.

// goMicroVersion is the version of go-micro v5 that go.mod requires, which
// GoMicro names.
const goMicroVersion = "v5.30.0"

// goMicroClients is go-micro v5's registry/cache, which throttles each
// service's retries (MinimumRetryInterval), with the demo's TTL and retry
// interval.
func goMicroClients() []Client {
	return []Client{{Name: GoMicro, Cold: true, Note: "go-micro.dev/v5/registry/cache", New: func(reg registry.Registry, cfg Config) (registry.Registry, func()) {
		c := gmcache.New(reg, gmcache.WithTTL(cfg.TTL()), gmcache.WithMinimumRetryInterval(cfg.RetryInterval()))
		return oneAtATime(c), c.Stop
	}, Describe: func(cfg Config) string {
		return fmt.Sprintf("go-micro.dev/v5/registry/cache: cache.New(reg, cache.WithTTL(%v), cache.WithMinimumRetryInterval(%v))", cfg.TTL(), cfg.RetryInterval())
	}}}
}
