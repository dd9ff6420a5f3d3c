package nats

import (
	"context"
	"errors"
	"sync"

	"github.com/nats-io/nats.go"
	"go-micro.dev/v4/registry"
)

// The plugin's option keys. The plugin makes one connection to NATS and
// does not export it; this package learns of it, and of its changes,
// through handlers of its own in the nats.Options it gives the plugin (the
// caller's, with its handlers added: see link.hook). It reads no
// unexported field of the plugin.
//
// The plugin keeps its nats.Options and its subject in the options'
// context, under keys of its own unexported types. This package learns
// those keys once, from the plugin itself: it makes a plugin whose
// options' context records every key the plugin asks it for as it reads
// its options, and tells them apart by asking them of contexts set by the
// plugin's own option functions. On a plugin that no longer reads its
// options so, every Watch fails (errPluginOptions), and a test holds the
// plugin version this module requires to it.

// errPluginOptions ends every Watch when the plugin's option keys are not
// found: the module could not follow the plugin's connection.
var errPluginOptions = errors.New("nats: the registry plugin does not read its nats.Options and WatchTopic from its options' context as the version this module was written for (go-micro's NATS plugin v1.1.0, go-micro v5's registry/nats) does: Watch cannot follow its connection")

// optionKeys are the plugin's context keys of its nats.Options and of the
// subject of its announcements.
type optionKeys struct{ nats, watchTopic any }

var (
	keysOnce sync.Once
	keys     optionKeys
	keysErr  error
)

// pluginKeys returns the plugin's option keys, learnt on first use.
func pluginKeys() (optionKeys, error) {
	keysOnce.Do(func() { keys, keysErr = learnKeys(newPlugin) })
	return keys, keysErr
}

// learnKeys learns the option keys from a plugin that newReg makes. The
// plugin connects on its first call, not when it is made: the one made
// here is left unused.
func learnKeys(newReg func(...registry.Option) registry.Registry) (optionKeys, error) {
	rec := &keyRecorder{Context: context.Background()}
	newReg(func(o *registry.Options) { o.Context = rec })
	withNats := contextOf(natsOptions(nats.Options{Name: "regcache-probe"}))
	withTopic := contextOf(WatchTopic("regcache-probe"))
	var k optionKeys
	for _, key := range rec.asked() {
		if withNats.Value(key) != nil {
			k.nats = key
		}
		if withTopic.Value(key) != nil {
			k.watchTopic = key
		}
	}
	if k.nats == nil || k.watchTopic == nil {
		return optionKeys{}, errPluginOptions
	}
	return k, nil
}

// contextOf is the context that opt sets on empty options.
func contextOf(opt registry.Option) context.Context {
	o := registry.Options{Context: context.Background()}
	opt(&o)
	return o.Context
}

// keyRecorder is a context that records the keys it is asked for.
type keyRecorder struct {
	context.Context
	mu   sync.Mutex
	keys []any
}

func (c *keyRecorder) Value(key any) any {
	c.mu.Lock()
	c.keys = append(c.keys, key)
	c.mu.Unlock()
	return c.Context.Value(key)
}

func (c *keyRecorder) asked() []any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]any(nil), c.keys...)
}
