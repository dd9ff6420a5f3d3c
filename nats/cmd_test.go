package nats

import (
	"reflect"
	"testing"

	"go-micro.dev/v4/broker"
	"go-micro.dev/v4/client"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
	"go-micro.dev/v4/server"
	"go-micro.dev/v4/transport"
	"go-micro.dev/v4/util/cmd"
)

// TestCommandLine: importing the package is enough for MICRO_REGISTRY=nats
// to choose it, through go-micro's command line as service.Init runs it,
// with the address of MICRO_REGISTRY_ADDRESS.
func TestCommandLine(t *testing.T) {
	s := startNATS(t)
	restoreFlags(t)
	t.Setenv("MICRO_REGISTRY", "nats")
	t.Setenv("MICRO_REGISTRY_ADDRESS", s.Addr())

	// Everything the command could touch is the test's own, and in
	// memory: nothing falls back to go-micro's mdns defaults.
	mem := registry.NewMemoryRegistry()
	var (
		reg = mem
		brk = broker.NewMemoryBroker()
		tr  = transport.NewMemoryTransport()
		sel = selector.NewSelector(selector.Registry(mem))
		cli = client.NewClient(client.Registry(mem), client.Broker(brk), client.Transport(tr), client.Selector(sel))
		srv = server.NewServer(server.Registry(mem), server.Broker(brk), server.Transport(tr))
	)
	c := cmd.NewCmd(cmd.Registry(&reg), cmd.Broker(&brk), cmd.Transport(&tr), cmd.Selector(&sel), cmd.Client(&cli), cmd.Server(&srv))
	if err := c.App().Run([]string{"nats.test"}); err != nil {
		t.Fatalf("the command: %v", err)
	}
	r, ok := reg.(*natsRegistry)
	if !ok {
		t.Fatalf("MICRO_REGISTRY=nats gave a %T; want this package's", reg)
	}
	t.Cleanup(func() { closeConn(r) })
	if got, want := r.Options().Addrs, []string{"nats://" + s.Addr()}; !reflect.DeepEqual(got, want) {
		t.Errorf("addresses %q; want %q", got, want)
	}

	w := watch(t, r)
	other := newWriter(t, s.Addr())
	if err := other.Register(service("svc", "1", "n1")); err != nil {
		t.Fatalf("Register: %v", err)
	}
	mustNext(t, w, "create", "svc", "n1")
}

// restoreFlags restores go-micro's command line flags when the test ends:
// the command line library keeps in a flag the value it read from the
// environment, which a later test would see.
func restoreFlags(t *testing.T) {
	type saved struct {
		value, set reflect.Value
		was        [2]reflect.Value
	}
	var flags []saved
	for _, f := range cmd.DefaultFlags {
		v := reflect.ValueOf(f)
		if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
			continue
		}
		value, set := v.Elem().FieldByName("Value"), v.Elem().FieldByName("HasBeenSet")
		if !value.CanSet() || !set.CanSet() {
			continue
		}
		was := [2]reflect.Value{reflect.New(value.Type()).Elem(), reflect.New(set.Type()).Elem()}
		was[0].Set(value)
		was[1].Set(set)
		flags = append(flags, saved{value, set, was})
	}
	t.Cleanup(func() {
		for _, f := range flags {
			f.value.Set(f.was[0])
			f.set.Set(f.was[1])
		}
	})
}
