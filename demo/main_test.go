package main

import (
	"testing"
	"time"
)

// The demo's claim, checked on a short run: through the outage regcache
// fails no lookup and asks the registry at most once per service, while no
// cache fails every lookup.
func TestDemoOutage(t *testing.T) {
	const services = 5
	for _, client := range []string{"no cache", "regcache"} {
		res := run(client, services, 8, 200*time.Millisecond, time.Millisecond)
		down := res[1]
		if down.phase != "registry down" || down.lookups == 0 {
			t.Fatalf("%s: unexpected phase %+v", client, down.phase)
		}
		switch client {
		case "no cache":
			if down.failed != down.lookups {
				t.Errorf("no cache: %d of %d lookups failed, want all", down.failed, down.lookups)
			}
		case "regcache":
			if down.failed != 0 {
				t.Errorf("regcache: %d lookups failed in the outage", down.failed)
			}
			if down.calls > services {
				t.Errorf("regcache: %d registry calls in the outage, want at most %d", down.calls, services)
			}
		}
	}
}
