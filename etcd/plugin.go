package etcd

import (
	plugin "github.com/go-micro/plugins/v4/registry/etcd"
	"go-micro.dev/v4/registry"
)

// newPlugin makes go-micro's etcd registry, which everything but Watch
// passes through to. It is the one line that differs from the go-micro v5
// flavour (gomicro5/etcd/plugin.go, written by hand, as this file is):
// there the constructor is named NewEtcdRegistry.
func newPlugin(opts ...registry.Option) registry.Registry {
	return plugin.NewRegistry(opts...)
}
