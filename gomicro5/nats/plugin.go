package nats

import (
	"github.com/nats-io/nats.go"
	"go-micro.dev/v5/registry"
	plugin "go-micro.dev/v5/registry/nats"
)

// This file holds what differs between go-micro v5's in-tree registry/nats
// and go-micro v4's NATS plugin, which are otherwise the same code: the
// constructor's name (NewNatsRegistry here, NewRegistry in v4), the name
// of the option that carries nats.Options (NatsOptions here, Options in
// v4), and v5's RegisterAction. It is written by hand, as is
// nats/plugin.go; every other file here is generated from nats/ by
// internal/gen5.

// defaultWatchTopic is go-micro v5's subject of announcements when
// WatchTopic is not given (v4's plugin has another).
const defaultWatchTopic = "micro.nats.watch"

// natsOptions is go-micro v5's option that carries nats.Options.
func natsOptions(nopts nats.Options) registry.Option { return plugin.NatsOptions(nopts) }

// newPlugin makes go-micro v5's NATS registry, which everything but Watch
// passes through to.
func newPlugin(opts ...registry.Option) registry.Registry {
	return plugin.NewNatsRegistry(opts...)
}

// NatsOptions is go-micro v5's NatsOptions: the nats.Options of the
// connection the registry makes, its servers, credentials and reconnect
// policy among them. The watchers' connection is made with the same
// options, less the handlers of the connection's life, which stay the
// plugin connection's (see Watch).
func NatsOptions(nopts nats.Options) registry.Option {
	return plugin.NatsOptions(nopts)
}

// RegisterAction is go-micro v5's RegisterAction: the action that Register
// announces ("create", the default, "update" or "put").
func RegisterAction(s string) registry.Option {
	return plugin.RegisterAction(s)
}
