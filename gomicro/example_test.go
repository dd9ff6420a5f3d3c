package gomicro_test

import (
	"fmt"
	"time"

	"go-micro.dev/v4"
	"go-micro.dev/v4/broker"
	"go-micro.dev/v4/client"
	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/server"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/gomicro"
)

// gomicro.Registry in place of micro.Registry: the client reads a regcache
// cache of the registry through regcache's selector, and keeps it through
// service.Init and its flags.
func ExampleRegistry() {
	reg := registry.NewMemoryRegistry() // etcd, consul, ...
	_ = reg.Register(&registry.Service{
		Name:  "greeter",
		Nodes: []*registry.Node{{Id: "greeter-1", Address: "127.0.0.1:9000"}},
	})

	quiet := logger.NewLogger(logger.WithLevel(logger.FatalLevel)) // no log line
	service := micro.NewService(
		// A service usually leaves out the next four lines; this example
		// has them, before micro.Name, so that it sets up a client, a
		// server and a broker of its own rather than go-micro's default
		// ones, and prints no log line.
		micro.Client(client.NewClient()),
		micro.Server(server.NewServer(server.Address("127.0.0.1:0"))),
		micro.Broker(broker.NewMemoryBroker()),
		micro.Logger(quiet),
		micro.Name("example"),
		gomicro.Registry(reg, cache.WithLogger(quiet)),
	)
	// service.Init() goes here in a real service.

	sel := service.Client().Options().Selector
	defer sel.Close() // the service does it when it stops
	fmt.Println(sel.String())

	next, _ := sel.Select("greeter")
	node, _ := next()
	fmt.Println(node.Address)

	stats := sel.(cache.Selector).Stats()
	fmt.Println(stats.Cache.Lookups, "lookup,", len(stats.Ejected), "nodes ejected")
	// Output:
	// regcache
	// 127.0.0.1:9000
	// 1 lookup, 0 nodes ejected
}

// The README's wiring of a go-micro service. Compiled, not run: a real
// service's Init parses the command line and may start go-micro's defaults.
func Example_service() {
	reg := registry.NewMemoryRegistry() // or etcd, consul, ...
	service := micro.NewService(
		micro.Name("greeter"),
		gomicro.Registry(reg), // in place of micro.Registry(reg)
	)
	service.Init()

	sel := service.Client().Options().Selector
	fmt.Println(sel.String()) // regcache
	stats := sel.(cache.Selector).Stats()
	fmt.Println(stats.Cache.Lookups, stats.Ejected)
}

// Options of the cache, and of the selector through
// cache.WithSelectorOptions, in the one-line wiring.
func Example_options() {
	reg := registry.NewMemoryRegistry()
	service := micro.NewService(micro.Name("greeter"), gomicro.Registry(reg,
		cache.WithTTL(time.Minute),
		cache.WithSelectorOptions(cache.WithEjectAfter(5)),
	))
	_ = service
}
