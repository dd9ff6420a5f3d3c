package etcd

import (
	"go-micro.dev/v5/registry"
	plugin "go-micro.dev/v5/registry/etcd"
)

// newPlugin makes go-micro v5's etcd registry, which everything but Watch
// passes through to. It is the one line that differs from the go-micro v4
// flavour (etcd/plugin.go, written by hand, as this file is): there the
// constructor is named NewRegistry. Every other file here is generated
// from etcd/ by internal/gen5.
func newPlugin(opts ...registry.Option) registry.Registry {
	return plugin.NewEtcdRegistry(opts...)
}
