package integration

import (
	"os"
	"testing"

	"go-micro.dev/v4/broker"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
)

// TestMain makes sure that nothing in these tests falls back to go-micro's
// defaults, which use mdns: the default registry multicasts on every
// interface, and the default http broker registers itself through it. Every
// server, client and broker here gets the etcd registry (or a memory broker)
// explicitly, and the defaults are replaced by guards that panic if used.
//
// With childEnv set, the binary is a child client process (see child_test.go)
// and runs no test.
func TestMain(m *testing.M) {
	// The etcd plugin reads these and would override the address and
	// credentials the tests pass.
	for _, v := range []string{"MICRO_REGISTRY_ADDRESS", "ETCD_USERNAME", "ETCD_PASSWORD"} {
		os.Unsetenv(v)
	}
	registry.DefaultRegistry = forbiddenRegistry{}
	broker.DefaultBroker = forbiddenBroker{}
	selector.DefaultSelector = forbiddenSelector{}
	if cfg := os.Getenv(childEnv); cfg != "" {
		os.Exit(runChild(cfg))
	}
	os.Exit(m.Run())
}

const forbidden = "integration: a go-micro default (mdns registry, http broker or default selector) was used; pass the etcd registry explicitly"

type forbiddenRegistry struct{}

func (forbiddenRegistry) Init(...registry.Option) error { panic(forbidden) }
func (forbiddenRegistry) Options() registry.Options     { return registry.Options{} }
func (forbiddenRegistry) String() string                { return "forbidden" }
func (forbiddenRegistry) Watch(...registry.WatchOption) (registry.Watcher, error) {
	panic(forbidden)
}
func (forbiddenRegistry) Register(*registry.Service, ...registry.RegisterOption) error {
	panic(forbidden)
}
func (forbiddenRegistry) Deregister(*registry.Service, ...registry.DeregisterOption) error {
	panic(forbidden)
}
func (forbiddenRegistry) GetService(string, ...registry.GetOption) ([]*registry.Service, error) {
	panic(forbidden)
}
func (forbiddenRegistry) ListServices(...registry.ListOption) ([]*registry.Service, error) {
	panic(forbidden)
}

type forbiddenBroker struct{}

func (forbiddenBroker) Init(...broker.Option) error { panic(forbidden) }
func (forbiddenBroker) Options() broker.Options     { return broker.Options{} }
func (forbiddenBroker) Address() string             { return "" }
func (forbiddenBroker) Connect() error              { panic(forbidden) }
func (forbiddenBroker) Disconnect() error           { panic(forbidden) }
func (forbiddenBroker) String() string              { return "forbidden" }
func (forbiddenBroker) Publish(string, *broker.Message, ...broker.PublishOption) error {
	panic(forbidden)
}
func (forbiddenBroker) Subscribe(string, broker.Handler, ...broker.SubscribeOption) (broker.Subscriber, error) {
	panic(forbidden)
}

type forbiddenSelector struct{}

func (forbiddenSelector) Init(...selector.Option) error { panic(forbidden) }
func (forbiddenSelector) Options() selector.Options     { return selector.Options{} }
func (forbiddenSelector) Select(string, ...selector.SelectOption) (selector.Next, error) {
	panic(forbidden)
}
func (forbiddenSelector) Mark(string, *registry.Node, error) { panic(forbidden) }
func (forbiddenSelector) Reset(string)                       { panic(forbidden) }
func (forbiddenSelector) Close() error                       { return nil }
func (forbiddenSelector) String() string                     { return "forbidden" }
