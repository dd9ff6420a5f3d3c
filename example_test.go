package cache_test

import (
	"errors"
	"fmt"
	"time"

	"go-micro.dev/v4/client"
	merrors "go-micro.dev/v4/errors"
	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"

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
	_, err = c.GetService("missing") // within 10 s: the same answer, no registry call
	fmt.Println(err == registry.ErrNotFound)
	// Output:
	// service not found
	// true
}

// NewSelector in a go-micro client. client.Selector goes before
// client.Registry: client.Registry hands the registry to the selector the
// client holds at that moment, which would otherwise be go-micro's global
// one. A go-micro service uses the gomicro subpackage instead.
func ExampleNewSelector() {
	reg := registry.NewMemoryRegistry()
	_ = reg.Register(&registry.Service{
		Name:  "greeter",
		Nodes: []*registry.Node{{Id: "greeter-1", Address: "127.0.0.1:9000"}},
	})
	c := cache.New(reg)
	defer c.Stop()

	cl := client.NewClient(
		client.Selector(cache.NewSelector(c)),
		client.Registry(reg),
	)
	sel := cl.Options().Selector
	fmt.Println(sel.String())

	next, _ := sel.Select("greeter")
	node, _ := next()
	fmt.Println(node.Address)

	_, err := sel.Select("missing")
	fmt.Println(errors.Is(err, selector.ErrNotFound), err)
	// Output:
	// regcache
	// 127.0.0.1:9000
	// true not found: the registry has no node of this service
}

// Passive health: go-micro's client reports every attempt to Mark, and a
// node it cannot reach is ejected after a few failures in a row. Here the
// client's report is written out by hand.
func ExampleWithEjectAfter() {
	reg := registry.NewMemoryRegistry()
	_ = reg.Register(&registry.Service{
		Name: "greeter",
		Nodes: []*registry.Node{
			{Id: "greeter-1", Address: "127.0.0.1:9001"},
			{Id: "greeter-2", Address: "127.0.0.1:9002"},
		},
	})
	// The ejection is logged as a warning; this example prints errors only.
	quiet := logger.NewLogger(logger.WithLevel(logger.ErrorLevel))
	c := cache.New(reg, cache.WithLogger(quiet))
	defer c.Stop()
	sel := cache.NewSelector(c,
		cache.WithEjectAfter(2),                            // 2 failures in a row
		cache.WithEjectionTime(time.Minute, 5*time.Minute), // 1 min, then 2, 3, ... up to 5
	)

	// What go-micro's client passes to Mark when it cannot connect.
	refused := merrors.InternalServerError("go.micro.client",
		"connection error: dial tcp 127.0.0.1:9002: connect: connection refused")
	dead := &registry.Node{Id: "greeter-2", Address: "127.0.0.1:9002"}
	for i := 0; i < 2; i++ {
		_, _ = sel.Select("greeter")
		sel.Mark("greeter", dead, refused)
	}

	stats := sel.(cache.Selector).Stats()
	for _, e := range stats.Ejected {
		fmt.Println("ejected:", e.Id, e.Address, "for", e.Remaining.Round(time.Second))
	}
	next, _ := sel.Select("greeter")
	for i := 0; i < 3; i++ {
		node, _ := next()
		fmt.Println("picked:", node.Id)
	}
	// Output:
	// ejected: greeter-2 127.0.0.1:9002 for 1m0s
	// picked: greeter-1
	// picked: greeter-1
	// picked: greeter-1
}

// A status page or a metrics exporter reaches the passive health figures
// of the selector that a client was given by asserting cache.Selector.
func ExampleSelector() {
	reg := registry.NewMemoryRegistry()
	_ = reg.Register(&registry.Service{
		Name:  "greeter",
		Nodes: []*registry.Node{{Id: "greeter-1", Address: "127.0.0.1:9001"}},
	})
	c := cache.New(reg)
	defer c.Stop()
	cli := client.NewClient(client.Selector(cache.NewSelector(c)), client.Registry(reg))

	sel, ok := cli.Options().Selector.(cache.Selector)
	if !ok {
		return // another selector: no passive health figures
	}
	_, _ = sel.Select("greeter")
	st := sel.Stats()
	fmt.Println(sel.String(), "lookups:", st.Cache.Lookups, "ejected:", len(st.Ejected))
	// Output:
	// regcache lookups: 1 ejected: 0
}

// The README's use of the cache on its own, and in a bare go-micro client.
// Compiled, not run.
func Example_withoutAService() {
	reg := registry.NewMemoryRegistry() // or etcd, consul, ...

	c := cache.New(reg,
		cache.WithTTL(time.Minute),                    // how long data stays fresh
		cache.WithMinimumRetryInterval(5*time.Second), // at most one refresh per service per 5 s
	)
	defer c.Stop()

	services, err := c.GetService("greeter") // a copy, yours to change
	view, err := c.Lookup("greeter")         // no copy, read-only

	cli := client.NewClient(
		client.Selector(cache.NewSelector(c)), // before client.Registry
		client.Registry(reg),
	)
	fmt.Println(services, view, err, cli)
}
