package etcd_test

import (
	"fmt"
	"time"

	"github.com/regcache/cache/etcd"
	"go-micro.dev/v4/registry"
)

// A watch of one service: every change, and an error whenever the stream
// may have missed one, after which the reader lists the service again.
func ExampleNewRegistry() {
	reg := etcd.NewRegistry(registry.Addrs("127.0.0.1:2379"), registry.Timeout(5*time.Second))
	w, err := reg.Watch(registry.WatchService("greeter"))
	if err != nil {
		fmt.Println("etcd did not answer:", err)
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
