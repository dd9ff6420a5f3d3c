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

// defaultWatchTopic is the plugin's subject of announcements when
// WatchTopic is not given.
const defaultWatchTopic = "micro.registry.nats.watch"

// natsOptions is the plugin's option that carries nats.Options.
func natsOptions(nopts nats.Options) registry.Option { return plugin.Options(nopts) }

// newPlugin makes go-micro's NATS registry, which everything but Watch
// passes through to.
func newPlugin(opts ...registry.Option) registry.Registry {
	return plugin.NewRegistry(opts...)
}

// Options is the plugin's Options: the nats.Options of the connection the
// registry makes, its servers, credentials and reconnect policy among them.
// The watchers' connection is made with the same options, less the
// handlers of the connection's life, which stay the plugin connection's
// (see Watch).
func Options(nopts nats.Options) registry.Option {
	return plugin.Options(nopts)
}
