package nats_test

import (
	"fmt"

	"github.com/nats-io/nats.go"
	natsreg "github.com/regcache/cache/nats"
	"go-micro.dev/v4/registry"
)

// A watch of one service: every announcement, and an error whenever the
// stream may have missed one (the connection to NATS lost or
// re-established), after which the reader asks for the service again.
// nats.go gives up reconnecting after 60 attempts by default, and the
// plugin never dials again: MaxReconnect -1 keeps it trying.
func ExampleNewRegistry() {
	opts := nats.GetDefaultOptions()
	opts.MaxReconnect = -1
	reg := natsreg.NewRegistry(registry.Addrs("127.0.0.1:4222"), natsreg.Options(opts))
	w, err := reg.Watch(registry.WatchService("greeter"))
	if err != nil {
		fmt.Println("NATS did not answer:", err)
		return
	}
	defer w.Stop()
	for {
		res, err := w.Next()
		if err != nil {
			fmt.Println("resync:", err)
			return
		}
		fmt.Println(res.Action, res.Service.Name, len(res.Service.Nodes))
	}
}
