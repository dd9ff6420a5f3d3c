package nats

import (
	plugin "github.com/go-micro/plugins/v4/registry/nats"
	"github.com/nats-io/nats.go"
	"go-micro.dev/v4/registry"
)

// This file holds what differs between go-micro v4's NATS plugin and go-micro
// v5's in-tree registry/nats, which are otherwise the same code: the
// constructor's name and the name of the option that carries nats.Options.
// It is written by hand, as is gomicro5/nats/plugin.go; every other file of
// gomicro5/nats is generated from this folder by internal/gen5.

// newPlugin makes go-micro's NATS registry, which everything but Watch
// passes through to.
func newPlugin(opts ...registry.Option) registry.Registry {
	return plugin.NewRegistry(opts...)
}

// Options is the plugin's Options: the nats.Options of the connection the
// registry makes, its servers, credentials and reconnect policy among them.
// Its connection handlers are the caller's: this package adds its own next
// to them, and calls them as nats.go would (see Watch).
func Options(nopts nats.Options) registry.Option {
	return plugin.Options(nopts)
}
