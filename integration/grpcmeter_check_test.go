package integration

import (
	"errors"
	"testing"
	"time"

	"go-micro.dev/v4/registry"
)

// TestGRPCMeter checks the meter that the cost tests count etcd requests
// with, against calls whose cost is known: each GetService and
// ListServices of the etcd plugin is one Range request; every Watch of one
// etcd client shares one gRPC stream, and opens one watch on it; an event
// reaches each watch that covers its key.
func TestGRPCMeter(t *testing.T) {
	const name = "it.meter"
	s := startEtcd(t)
	p, m := startMeteredProxy(t, s.Addr())
	writer := newEtcdRegistry(t, s, 2*time.Second)
	r := newEtcdRegistryAt(t, p.Addr(), 2*time.Second)

	mustRegister(t, writer, service(name, "n1"), registerTTL)
	before := m.Snapshot()
	for i := 0; i < 5; i++ {
		if _, err := r.GetService(name); err != nil {
			t.Fatalf("GetService: %v", err)
		}
	}
	if _, err := r.GetService("it.meter.missing"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("GetService of a missing service: %v", err)
	}
	if _, err := r.ListServices(); err != nil {
		t.Fatalf("ListServices: %v", err)
	}
	d := m.Snapshot().Sub(before)
	if d.Unary("KV/Range") != 7 || d.Requests() != 7 {
		t.Fatalf("6 GetService and 1 ListServices: %v; want 7 Range requests and nothing else", d)
	}

	// One unfiltered watch and three per-service watches: one stream.
	before = m.Snapshot()
	var ws []registry.Watcher
	w, err := r.Watch()
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	ws = append(ws, w)
	for _, svc := range []string{name, "it.meter.b", "it.meter.c"} {
		w, err := r.Watch(registry.WatchService(svc))
		if err != nil {
			t.Fatalf("Watch %s: %v", svc, err)
		}
		ws = append(ws, w)
	}
	t.Cleanup(func() {
		for _, w := range ws {
			w.Stop()
		}
	})
	got := make(chan string, 10)
	for _, w := range ws[:2] { // the unfiltered one and the one on name
		w := w
		go func() {
			for {
				res, err := w.Next()
				if err != nil {
					return
				}
				got <- res.Action + " " + res.Service.Name
			}
		}()
	}
	// A watch is established once etcd has answered its create request;
	// wait for all four, then change name once: both watches covering it
	// get the event.
	waitFor(t, 10*time.Second, "4 watches created", func() bool {
		d := m.Snapshot().Sub(before)
		return d.WatchCreates == 4 && d.WatchMessages >= 4
	})
	mustRegister(t, writer, service(name, "n2"), registerTTL)
	for i := 0; i < 2; i++ {
		select {
		case g := <-got:
			if g != "create "+name {
				t.Fatalf("event %q, want create %s", g, name)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of 2 watches got the event", i)
		}
	}
	waitFor(t, 10*time.Second, "2 events counted", func() bool { return m.Snapshot().Sub(before).WatchEvents == 2 })
	d = m.Snapshot().Sub(before)
	t.Logf("4 watches and one change: %v", d)
	if d.Calls["Watch/Watch"] != 1 || d.WatchCreates != 4 || d.WatchEvents != 2 {
		t.Fatalf("4 watches on one client, one change: %v; want 1 Watch stream, 4 creates, 2 events", d)
	}
	if errs := m.Snapshot().Errors; len(errs) > 0 {
		t.Fatalf("the meter could not read some frames: %v", errs)
	}
}
