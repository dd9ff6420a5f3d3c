package cache_test

import (
	"errors"
	"fmt"
	"time"

	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"

	// Code written for go-micro.dev/v4/registry/cache compiles unchanged
	// when only this import path changes.
	cache "github.com/regcache/cache"
)

// goMicroStyle is written exactly as against go-micro's registry/cache
// package: New, Cache, Options, Option, WithTTL, WithLogger, DefaultTTL.
func goMicroStyle(r registry.Registry) cache.Cache {
	opts := []cache.Option{
		cache.WithTTL(cache.DefaultTTL),
		cache.WithLogger(logger.DefaultLogger),
	}
	var o cache.Options
	for _, opt := range opts {
		opt(&o)
	}
	return cache.New(r, opts...)
}

// New with only go-micro's options behaves like go-micro's cache, plus
// stale data on failure, singleflight and the retry throttle.
func ExampleNew() {
	r := registry.NewMemoryRegistry()
	_ = r.Register(&registry.Service{
		Name:  "greeter",
		Nodes: []*registry.Node{{Id: "greeter-1", Address: "127.0.0.1:9000"}},
	})

	c := goMicroStyle(r)
	defer c.Stop()

	services, err := c.GetService("greeter")
	if err != nil {
		panic(err)
	}
	fmt.Println(services[0].Nodes[0].Address)
	// Output: 127.0.0.1:9000
}

// The options added by regcache, and the throttled error.
func ExampleWithMinimumRetryInterval() {
	r := registry.NewMemoryRegistry()
	c := cache.New(r,
		cache.WithTTL(2*time.Minute),
		cache.WithMinimumRetryInterval(10*time.Second),
	)
	defer c.Stop()

	_, err := c.GetService("missing") // asks the registry: not found
	fmt.Println(err)
	_, err = c.GetService("missing") // within 10 s: no registry call
	fmt.Println(errors.Is(err, cache.ErrThrottled), errors.Is(err, registry.ErrNotFound))
	// Output:
	// service not found
	// true true
}
