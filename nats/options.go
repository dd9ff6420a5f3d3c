package nats

import (
	plugin "github.com/go-micro/plugins/v4/registry/nats"
	"go-micro.dev/v4/registry"
)

// The plugin's options, here so that code moving from the plugin to this
// package changes only its import path. Its DefaultQuorum, a variable, is
// not: set the plugin's, which its registry reads.

// Quorum is the plugin's Quorum: GetService returns as soon as a version
// of the service has n nodes, rather than when the registry's Timeout
// (100 ms by default) has passed. 0, the default, waits for the timeout.
func Quorum(n int) registry.Option { return plugin.Quorum(n) }

// QueryTopic is the plugin's QueryTopic: the subject on which registries
// ask each other for services.
func QueryTopic(s string) registry.Option { return plugin.QueryTopic(s) }

// WatchTopic is the plugin's WatchTopic: the subject on which registries
// announce the services they register and deregister, which Watch
// subscribes to.
func WatchTopic(s string) registry.Option { return plugin.WatchTopic(s) }
