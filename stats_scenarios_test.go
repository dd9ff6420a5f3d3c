package cache_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/internal/fakereg"
)

// counted wraps a cache and counts the lookups made through it.
type counted struct {
	c     cache.Cache
	calls uint64
	prev  cache.Stats
}

func (k *counted) get(name string) error {
	k.calls++
	_, err := k.c.GetService(name)
	return err
}

func (k *counted) lookup(name string) error {
	k.calls++
	_, err := k.c.Lookup(name)
	return err
}

// check asserts that Stats counts every lookup once, that the sum identity
// holds, and that no counter went down.
func (k *counted) check(t *testing.T, phase string) cache.Stats {
	t.Helper()
	st := k.c.Stats()
	if k.calls != ^uint64(0) {
		assert.Equal(t, k.calls, st.Lookups, "%s: lookups made vs Stats.Lookups", phase)
	}
	assert.Equal(t, st.Lookups, st.FreshHits+st.EventServes+st.StaleServes+st.Throttled+st.Misses+st.Invalid, "%s: sum identity", phase)
	p := k.prev
	for _, c := range [][3]any{
		{"FreshHits", p.FreshHits, st.FreshHits}, {"EventServes", p.EventServes, st.EventServes},
		{"StaleServes", p.StaleServes, st.StaleServes}, {"Throttled", p.Throttled, st.Throttled},
		{"Misses", p.Misses, st.Misses}, {"Refreshes", p.Refreshes, st.Refreshes},
		{"RefreshErrors", p.RefreshErrors, st.RefreshErrors}, {"Outages", p.Outages, st.Outages},
	} {
		assert.GreaterOrEqual(t, c[2].(uint64), c[1].(uint64), "%s: %s went down", phase, c[0])
	}
	assert.GreaterOrEqual(t, st.DownTime, p.DownTime, "%s: DownTime went down", phase)
	assert.LessOrEqual(t, st.RefreshErrors, st.Refreshes, phase)
	k.prev = st
	return st
}

// Every lookup is counted exactly once, in one outcome, through an
// outage, a hang, one broken key, events racing refreshes, the empty name,
// and Stop; no counter goes down.
func TestEveryLookupCountedOnceThroughFaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 3, true, cache.WithLastKnownNodes())
		k := &counted{c: e.c, calls: uint64(len(e.names))}
		k.check(t, "filled")
		_ = k.get("")
		_ = k.lookup("")
		k.check(t, "empty name")

		// One broken key past its TTL.
		e.reg.SetFaultFor("svc-0", fakereg.Fault{Err: errors.New("key corrupt")})
		time.Sleep(cache.DefaultTTL + time.Second)
		for i := 0; i < 20; i++ {
			for _, n := range e.names {
				_ = k.lookup(n)
			}
			_ = k.get(fmt.Sprintf("cold-%d", i%3))
			time.Sleep(500 * time.Millisecond)
		}
		synctest.Wait()
		k.check(t, "one broken key")

		// Whole outage, then cold and warm lookups.
		e.down(false)
		for i := 0; i < 30; i++ {
			for _, n := range e.names {
				_ = k.get(n)
			}
			_ = k.get(fmt.Sprintf("cold-%d", i))
			time.Sleep(300 * time.Millisecond)
		}
		k.check(t, "outage")
		e.reg.ClearFaults()
		synctest.Wait()

		// A hang with concurrent lookups of one name, an event racing the
		// refresh.
		e.reg.SetFault(fakereg.Fault{Hang: true, IgnoreCtx: true})
		time.Sleep(cache.DefaultTTL + time.Second)
		done := make(chan struct{})
		const racers = 8
		for i := 0; i < racers; i++ {
			go func() { _, _ = e.c.Lookup("svc-1"); done <- struct{}{} }()
		}
		synctest.Wait()
		require.NoError(t, e.reg.Register(faultService("svc-1", "new")))
		synctest.Wait()
		e.reg.ReleaseHangs()
		e.reg.ClearFaults()
		for i := 0; i < racers; i++ {
			<-done
		}
		k.calls += racers
		synctest.Wait()
		k.check(t, "hang and racing event")

		e.c.Stop()
		for _, n := range append(e.names, "after-stop") {
			_ = k.get(n)
		}
		k.check(t, "after Stop")
	})
}

// Five outages of 10 s each (every call fails, the stream is cut and its
// redials fail), with 20 s of health between them: Outages counts each
// and DownTime adds up to about 10 s each.
// docs/admin.md: "The outage counts move when the registry's state does,
// also when no refresh was due (a lost stream and a failed redial are
// enough)."
//
// FAILS: only the first outage is reliably held down. In later ones the
// log shows "watch stream lost, reconnecting" and nothing else for 10 s:
// no failed redial, no "unreachable" line, RegistryDown false, Outages not
// moved; whether an outage is counted depends on whether a refresh
// happened to fail in it (the counts differ between runs of this test:
// outage 2 or 3 or both missed). Cause, from watcher.go: the redial
// backoff (full jitter, up to 30 s) is reset only by a stream that stayed
// up a minute or by a refresh answer that signals c.redial; after outage
// 1's ten or so redials, the stream reconnects and lives 20 s, so outage
// 2's first redial is drawn from [0, 30 s] and usually falls after the
// 10 s outage: no second piece of evidence, no outage. The jitter comes
// from math/rand, so the outcome varies between runs even in a bubble (it
// failed 9 of 10 runs, 5 of 5 under -race, with 3 outages; 5 outages
// make a pass very unlikely). For an operator: the page says
// "up" during a real registry outage, and Outages/DownTime under-count a
// flapping registry, the very thing they were added to show.
func TestOutagesAndDownTimeFollowFlaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 3, true)
		k := &counted{c: e.c, calls: uint64(len(e.names))}
		const outage = 10 * time.Second
		for i := 1; i <= 5; i++ {
			logged := e.log.count()
			defer func(i int) {
				if t.Failed() {
					t.Logf("log of outage %d:\n%s", i, strings.Join(e.log.since(logged), "\n"))
				}
			}(i)
			e.down(false)
			k.calls += 0
			for end := time.Now().Add(outage); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
				for _, n := range e.names {
					_ = k.get(n)
				}
			}
			st := k.check(t, fmt.Sprintf("outage %d", i))
			rows := e.c.Services("", "", 0)
			t.Logf("outage %d at %v: down %v outages %d stream %s since %v; refreshes %d errors %d; row0 %+v",
				i, time.Since(e.filled), st.RegistryDown, st.Outages, st.Stream, st.StreamSince.Sub(e.filled), st.Refreshes, st.RefreshErrors, rows[0])
			assert.True(t, st.RegistryDown, "outage %d: registry held down", i)
			assert.Equal(t, uint64(i), st.Outages, "outage %d: counted while it lasts", i)
			e.reg.ClearFaults()
			for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
				for _, n := range e.names {
					_ = k.get(n)
				}
			}
			synctest.Wait()
			st = k.check(t, fmt.Sprintf("after outage %d", i))
			assert.False(t, st.RegistryDown, "after outage %d", i)
			assert.Equal(t, uint64(i), st.Outages, "after outage %d", i)
			assert.GreaterOrEqual(t, st.DownTime, time.Duration(i)*outage, "after outage %d: DownTime", i)
			assert.LessOrEqual(t, st.DownTime, time.Duration(i)*(outage+cache.DefaultProbeInterval+time.Second), "after outage %d: DownTime", i)
			assert.Empty(t, st.RegistryError, "after outage %d", i)
		}
		// One key broken for five minutes: no outage.
		before := k.check(t, "before broken key")
		e.reg.SetFaultFor("svc-2", fakereg.Fault{Err: errors.New("key corrupt")})
		for end := time.Now().Add(5 * time.Minute); time.Now().Before(end); time.Sleep(time.Second) {
			for _, n := range e.names {
				_ = k.get(n)
			}
		}
		st := k.check(t, "broken key")
		assert.Equal(t, before.Outages, st.Outages, "one broken key made outages")
		assert.Equal(t, before.DownTime, st.DownTime, "one broken key added down time")
	})
}

// A registry whose calls hang (and a stream that hangs through it, as
// etcd's does): the cache eventually holds it down, and the outage shows
// in Outages and DownTime once it ends.
func TestHangingRegistryCountsAsOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 3, true)
		time.Sleep(time.Until(e.filled.Add(cache.DefaultTTL - time.Second)))
		e.reg.SetFault(fakereg.Fault{Hang: true})
		e.reg.SetWatchFault(fakereg.WatchFault{NextHang: true})
		for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
			for _, n := range e.names {
				_, _ = e.c.Lookup(n)
			}
		}
		st := e.c.Stats()
		assert.True(t, st.RegistryDown, "a registry hanging for 2 minutes is held down")
		assert.Equal(t, uint64(1), st.Outages)
		e.reg.ClearFaults()
		e.reg.ReleaseHangs()
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
			for _, n := range e.names {
				_, _ = e.c.Lookup(n)
			}
		}
		synctest.Wait()
		st = e.c.Stats()
		assert.False(t, st.RegistryDown)
		assert.Equal(t, uint64(1), st.Outages)
		assert.Greater(t, st.DownTime, time.Minute, "DownTime of a 2-minute hang")
	})
}

// deployCase is one way a deploy shows in the registry.
type deployCase struct {
	name string
	do   func(t *testing.T, r *fakereg.Registry)
}

var deploys = []deployCase{
	{"delete then create", func(t *testing.T, r *fakereg.Registry) {
		require.NoError(t, r.Deregister(faultService("svc-0", "old")))
		require.NoError(t, r.Register(faultService("svc-0", "new")))
	}},
	{"create then delete", func(t *testing.T, r *fakereg.Registry) {
		require.NoError(t, r.Register(faultService("svc-0", "new")))
		require.NoError(t, r.Deregister(faultService("svc-0", "old")))
	}},
	{"metadata only", func(t *testing.T, r *fakereg.Registry) {
		s := faultService("svc-0", "old")
		s.Nodes[0].Metadata["build"] = "2"
		require.NoError(t, r.Register(s))
	}},
	{"new address", func(t *testing.T, r *fakereg.Registry) {
		s := faultService("svc-0", "old")
		s.Nodes[0].Address = "10.9.9.9:8080"
		require.NoError(t, r.Register(s))
	}},
}

// A deploy while the registry's GetService is slow (its answers take 30 s,
// the stream is fine): lookups of the deployed service in the meantime are
// served from the events and counted as EventServes, never as stale, even
// once the refreshed data's TTL runs out.
func TestDeployCountsAsEventServeNotStale(t *testing.T) {
	for _, d := range deploys {
		t.Run(d.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newConvEnv(t, 1, true)
				// The deploy lands a second before the data expires; the
				// registry then answers slowly.
				time.Sleep(time.Until(e.filled.Add(cache.DefaultTTL - 2*time.Second)))
				e.reg.SetFault(fakereg.Fault{Latency: 30 * time.Second})
				time.Sleep(time.Second)
				before := e.c.Stats()
				d.do(t, e.reg)
				synctest.Wait()
				for i := 0; i < 20; i++ {
					_, _ = e.c.Lookup("svc-0")
					time.Sleep(500 * time.Millisecond)
				}
				st := e.c.Stats()
				assert.Equal(t, before.StaleServes, st.StaleServes, "a deploy counted as stale")
				assert.Greater(t, st.EventServes, before.EventServes, "a deploy served from events")
				rows := e.c.Services("svc-0", "", 0)
				require.Len(t, rows, 1)
				t.Logf("%s: row %+v", d.name, rows[0])
			})
		})
	}
}

// Real staleness still shows: the registry down past the TTL, no events:
// StaleServes grows and the row is stale, not unconfirmed.
func TestRealStalenessShowsAsStale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 1, true)
		require.NoError(t, e.reg.Register(faultService("svc-0", "new"))) // an event just before
		synctest.Wait()
		e.down(false)
		time.Sleep(cache.DefaultTTL + 5*time.Second)
		before := e.c.Stats()
		for i := 0; i < 10; i++ {
			_, err := e.c.Lookup("svc-0")
			require.NoError(t, err)
		}
		st := e.c.Stats()
		assert.Equal(t, before.StaleServes+10, st.StaleServes)
		rows := e.c.Services("svc-0", "", 0)
		require.Len(t, rows, 1)
		assert.False(t, rows[0].Fresh)
		assert.False(t, rows[0].Unconfirmed)
	})
}

// GetService fails for one service's key (a corrupt key, an ACL, a
// registry shard that cannot answer for it) while the stream works, and
// the service keeps producing events: an instance in a crash loop that
// deregisters and registers every 20 s, or (with registries that send an
// event per registration) a service re-registering itself unchanged on its
// RegisterInterval. Each such event resets the data's age and keeps the
// source "event", so data that no refresh has confirmed for five minutes
// (failures 48 in a row) is counted as EventServes forever and never as
// stale: StaleServes +0, StaleServedAge 0, the row "unconfirmed" with
// an age under 20 s. stats.go/entry.go promise "Past a TTL it counts as
// stale again, so that an event the registry never confirms does not hide
// a failure for long". An operator alerting on StaleServes or
// StaleServedAge (docs/metrics.md) is never told; the page shows
// "unconfirmed", i.e. "a deploy, normal", for a service whose refreshes
// have failed for minutes.
func TestRepeatedEventsHideAnUnconfirmedServiceForever(t *testing.T) {
	for _, tc := range []struct {
		name string
		beat func(t *testing.T, r *fakereg.Registry)
	}{
		{"crash-looping instance", func(t *testing.T, r *fakereg.Registry) {
			require.NoError(t, r.Deregister(faultService("svc-0", "loop")))
			require.NoError(t, r.Register(faultService("svc-0", "loop")))
		}},
		{"identical re-registration", func(t *testing.T, r *fakereg.Registry) {
			require.NoError(t, r.Register(faultService("svc-0", "new")))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newConvEnv(t, 1, true)
				e.reg.SetFaultFor("svc-0", fakereg.Fault{Err: errors.New("key corrupt")})
				require.NoError(t, e.reg.Register(faultService("svc-0", "new"))) // a deploy, never confirmed
				synctest.Wait()
				before := e.c.Stats()
				for end := time.Now().Add(5 * time.Minute); time.Now().Before(end); {
					for i := 0; i < 20; i++ {
						_, _ = e.c.Lookup("svc-0")
						time.Sleep(time.Second)
					}
					tc.beat(t, e.reg)
					synctest.Wait()
				}
				st := e.c.Stats()
				rows := e.c.Services("svc-0", "", 0)
				require.Len(t, rows, 1)
				t.Logf("after 5 min of failed refreshes: row %+v; StaleServes +%d, EventServes +%d, StaleServedAge %v",
					rows[0], st.StaleServes-before.StaleServes, st.EventServes-before.EventServes, st.StaleServedAge)
				assert.Greater(t, st.StaleServes, before.StaleServes, "5 minutes of unconfirmed data never counted as stale")
				assert.False(t, rows[0].Unconfirmed, "data unconfirmed for 5 minutes (> TTL) still shown as unconfirmed")
			})
		})
	}
}

// The throttled error of two identical situations reads the same, and its
// hint about events follows the stream's state.
func TestThrottledErrorTextFollowsTheStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 1, true)
		require.Equal(t, cache.StreamConnected, e.c.Stats().Stream)
		e.reg.SetFaultFor("cold-a", fakereg.Fault{Err: errors.New("key corrupt")})
		e.reg.SetFaultFor("cold-b", fakereg.Fault{Err: errors.New("key corrupt")})
		texts := func() (string, string) {
			_, _ = e.c.Lookup("cold-a")
			time.Sleep(1234567 * time.Nanosecond)
			_, errA := e.c.Lookup("cold-a")
			_, _ = e.c.Lookup("cold-b")
			time.Sleep(1234567 * time.Nanosecond)
			_, errB := e.c.Lookup("cold-b")
			require.ErrorIs(t, errA, cache.ErrThrottled)
			require.ErrorIs(t, errB, cache.ErrThrottled)
			return errA.Error(), strings.Replace(errB.Error(), "cold-b", "cold-a", 1)
		}
		a, b := texts()
		assert.Equal(t, a, b, "two identical situations")
		assert.Contains(t, a, "waiting for the registry or its events", "stream connected")
		t.Logf("connected: %s", a)

		e.reg.SetWatchFault(fakereg.WatchFault{WatchErr: errOutage, BreakErr: errOutage})
		e.reg.Cut()
		synctest.Wait()
		require.NotEqual(t, cache.StreamConnected, e.c.Stats().Stream)
		time.Sleep(10 * time.Second)
		_, _ = e.c.Lookup("cold-c")
		_, err := e.c.Lookup("cold-c")
		if err != nil {
			t.Logf("stream down: %s", err)
			assert.NotContains(t, err.Error(), "or its events", "stream down: no events can answer")
		}
	})
}

// SnapshotError: New checks the folder of WithSnapshot. Held for a missing
// folder and a file in place of the folder. The read-only folder case is
// only asserted when not running as root (root writes anyway).
func TestSnapshotErrorChecks(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	ro := filepath.Join(dir, "ro")
	require.NoError(t, os.Mkdir(ro, 0o555))
	for _, tc := range []struct {
		name, path string
		wantErr    bool
	}{
		{"missing folder", filepath.Join(dir, "nope", "snap.json"), true},
		{"file in place of the folder", filepath.Join(file, "snap.json"), true},
		{"read-only folder", filepath.Join(ro, "snap.json"), os.Geteuid() != 0},
		{"fine", filepath.Join(dir, "snap.json"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := fakereg.New()
			require.NoError(t, reg.Register(faultService("svc", "n1")))
			c := cache.New(reg, cache.WithSnapshot(tc.path), cache.WithLogger(&lineLogger{}))
			_, err := c.Lookup("svc") // something for Stop to write
			require.NoError(t, err)
			st := c.Stats()
			c.Stop()
			t.Logf("%s: SnapshotError %q; after Stop %q", tc.name, st.SnapshotError, c.Stats().SnapshotError)
			if tc.wantErr {
				assert.NotEmpty(t, st.SnapshotError)
				assert.NotEmpty(t, c.Stats().SnapshotError, "after Stop's write")
			} else {
				assert.Empty(t, st.SnapshotError)
				assert.Empty(t, c.Stats().SnapshotError)
			}
		})
	}
}

// After Stop, "lookups keep working, from the cache" (cache.go), and
// Services still lists every service with its nodes, but Stats says the
// cache holds no service: Entries is 0 and Services is empty. The admin
// page of a stopped cache (a service shutting down, an operator looking at
// why) then reads "0 services held" above a table of services.
func TestStatsAndServicesAgreeAfterStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 3, true)
		e.c.Stop()
		_, err := e.c.Lookup("svc-0")
		require.NoError(t, err, "served after Stop")
		st := e.c.Stats()
		rows := e.c.Services("", "", 0)
		assert.Equal(t, cache.StreamStopped, st.Stream)
		assert.Equal(t, len(rows), st.Entries, "Stats.Entries vs Services rows after Stop")
	})
}

// Services paging edge cases.
func TestServicesPaging(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := fakereg.New()
		names := []string{"a", "a\x00", "a b", "aa", "b", "é", "日本", "日本語", "\U0001F600"}
		for _, n := range names {
			require.NoError(t, reg.Register(faultService(n, "n1")))
		}
		c := cache.New(reg, cache.WithLogger(&lineLogger{}))
		defer c.Stop()
		for _, n := range names {
			_, err := c.Lookup(n)
			require.NoError(t, err)
		}
		_, _ = c.Lookup("unknown") // a row with no data
		all := append([]string{"unknown"}, names...)
		got := func(rows []cache.ServiceStats) []string {
			var out []string
			for _, r := range rows {
				out = append(out, r.Name)
			}
			return out
		}
		assert.Len(t, c.Services("", "", 0), len(all))
		assert.Len(t, c.Services("", "", -5), len(all))
		assert.Len(t, c.Services("", "", int(^uint(0)>>1)), len(all))
		assert.Equal(t, []string{"a", "a\x00", "a b", "aa"}, got(c.Services("a", "", 0)))
		assert.Equal(t, []string{"a\x00", "a b", "aa"}, got(c.Services("a", "a", 0)))
		assert.Equal(t, []string{"日本", "日本語"}, got(c.Services("日本", "", 0)))
		assert.Equal(t, []string{"日本語"}, got(c.Services("日本", "日本", 0)))
		assert.Empty(t, c.Services("zzz", "", 0))
		assert.Empty(t, c.Services("", "\U0010FFFF\U0010FFFF", 0))

		// Page by one while services come and go between pages: every name
		// that exists throughout is seen exactly once.
		seen := map[string]int{}
		after := ""
		for i := 0; i < 100; i++ {
			rows := c.Services("", after, 1)
			if len(rows) == 0 {
				break
			}
			seen[rows[0].Name]++
			after = rows[0].Name
			// churn: new names before and after the cursor
			n := fmt.Sprintf("%c-churn-%d", 'a'+rune(i%26), i)
			require.NoError(t, reg.Register(faultService(n, "x")))
			_, _ = c.Lookup(n)
		}
		for _, n := range all {
			assert.Equal(t, 1, seen[n], "%q", n)
		}
	})
}

// An event that races a refresh: the refresh read the registry before a
// new node registered and answers after its create event arrived. The row
// must not call the node confirmed by the registry (Source "refresh",
// Fresh) when the only answer the registry gave predates it.
func TestEventRacingRefreshIsNotShownAsConfirmed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 1, true)
		time.Sleep(time.Until(e.filled.Add(cache.DefaultTTL + time.Second)))
		e.reg.SetFault(fakereg.Fault{Late: 5 * time.Second})
		before := e.c.Stats()
		_, err := e.c.Lookup("svc-0") // expired: starts the late refresh
		require.NoError(t, err)
		synctest.Wait()
		time.Sleep(time.Second)
		require.NoError(t, e.reg.Register(faultService("svc-0", "new")))
		synctest.Wait()
		time.Sleep(5 * time.Second) // the late answer, without "new", lands
		synctest.Wait()
		e.reg.ClearFaults()
		rows := e.c.Services("svc-0", "", 0)
		require.Len(t, rows, 1)
		r := rows[0]
		t.Logf("row after the racing refresh: %+v", r)
		gets, _ := e.reg.StartsSince(e.filled.Add(-time.Hour))
		t.Logf("DBG calls %v filled %v", gets, e.filled)
		ids := map[string]bool{}
		for _, n := range r.NodeList {
			ids[n.Id] = true
		}
		assert.True(t, ids["new"], "the event's node is kept")
		if r.Source == cache.SourceRefresh && r.Fresh {
			t.Errorf("the node 'new' shown as confirmed by a refresh whose answer predates it")
		}
		st := e.c.Stats()
		assert.Equal(t, st.Lookups, st.FreshHits+st.EventServes+st.StaleServes+st.Throttled+st.Misses+st.Invalid)
		assert.GreaterOrEqual(t, st.Lookups, before.Lookups)
	})
}

// WithLastKnownNodes: a delete of every node keeps them; the row says
// "last known nodes", not unconfirmed, and lookups of them past the TTL
// count as stale, not as event serves.
func TestLastKnownNodesCountAsStale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 1, true, cache.WithLastKnownNodes())
		require.NoError(t, e.reg.Register(faultService("svc-0", "new")))
		synctest.Wait()
		require.NoError(t, e.reg.Deregister(faultService("svc-0", "old", "new")))
		synctest.Wait()
		e.down(false)
		time.Sleep(cache.DefaultTTL + time.Second)
		before := e.c.Stats()
		for i := 0; i < 5; i++ {
			_, err := e.c.Lookup("svc-0")
			require.NoError(t, err)
		}
		st := e.c.Stats()
		rows := e.c.Services("svc-0", "", 0)
		require.Len(t, rows, 1)
		t.Logf("row: %+v", rows[0])
		assert.Equal(t, cache.SourceLastKnownNodes, rows[0].Source)
		assert.False(t, rows[0].Unconfirmed)
		assert.Equal(t, before.EventServes, st.EventServes)
		assert.Equal(t, before.StaleServes+5, st.StaleServes)
	})
}

// Stats with every option set, a down registry and a name with markup and
// invalid UTF-8: encodes to valid JSON and decodes back.
func TestStatsJSONWithEverything(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		name := "x<script>\"\xff\x01"
		e := newConvEnv(t, 2, true, cache.WithLastKnownNodes(), cache.WithIdleEviction(time.Hour),
			cache.WithSnapshot(filepath.Join(t.TempDir(), "nope", "s.json")), cache.WithProbeInterval(2*time.Second))
		require.NoError(t, e.reg.Register(faultService(name, "n")))
		_, err := e.c.Lookup(name)
		require.NoError(t, err)
		e.down(false)
		time.Sleep(cache.DefaultTTL + time.Second)
		_, _ = e.c.Lookup("svc-0")
		_, _ = e.c.Lookup("svc-1")
		_, _ = e.c.Lookup("cold")
		st := e.c.Stats()
		require.True(t, st.RegistryDown)
		b, err := json.Marshal(st)
		require.NoError(t, err)
		require.True(t, json.Valid(b))
		var back cache.Stats
		require.NoError(t, json.Unmarshal(b, &back))
		assert.Equal(t, st.Lookups, back.Lookups)
		assert.Equal(t, st.DownTime, back.DownTime)
		assert.Equal(t, st.RegistryError, back.RegistryError)
		assert.Equal(t, st.SnapshotError, back.SnapshotError)
		assert.True(t, st.RegistryDownSince.Equal(back.RegistryDownSince))
	})
}

// WithSnapshot given a path that is an existing folder (an operator who
// passes the state directory, /var/lib/svc, instead of a file in it): New's
// check creates and removes a probe file next to the path, in its parent,
// and passes, so Stats.SnapshotError is empty and the page shows no
// snapshot problem; every write then fails ("rename …tmp-… /var/lib/svc:
// file exists"), first seen at the first write (in this test, at Stop). The
// check added to New to catch a wrong path at once misses this one.
func TestSnapshotPathThatIsAFolderIsReportedAtNew(t *testing.T) {
	dir := t.TempDir()
	reg := fakereg.New()
	require.NoError(t, reg.Register(faultService("svc", "n1")))
	c := cache.New(reg, cache.WithSnapshot(dir), cache.WithLogger(&lineLogger{}))
	_, err := c.Lookup("svc")
	require.NoError(t, err)
	atNew := c.Stats().SnapshotError
	c.Stop()
	t.Logf("SnapshotError at New %q; after Stop's write %q", atNew, c.Stats().SnapshotError)
	assert.NotEmpty(t, atNew, "New's check of a snapshot path that is a folder")
}

// Many goroutines look up at once while the registry flaps, hangs briefly,
// a key fails, events race refreshes and the cache is stopped midway: once
// they are all done, Stats.Lookups equals the lookups made (each counted in
// exactly one outcome), and no counter went down between Stats calls made
// meanwhile.
func TestConcurrentLookupsAllCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 8, true, cache.WithTTL(2*time.Second), cache.WithMinimumRetryInterval(100*time.Millisecond))
		k := &counted{c: e.c, calls: uint64(len(e.names))}
		const workers, each = 8, 400
		done := make(chan struct{})
		for w := 0; w < workers; w++ {
			go func() {
				defer func() { done <- struct{}{} }()
				for i := 0; i < each; i++ {
					n := e.names[(w+i)%len(e.names)]
					if i%7 == 0 {
						n = fmt.Sprintf("cold-%d", i%5)
					}
					if i%2 == 0 {
						_, _ = e.c.Lookup(n)
					} else {
						_, _ = e.c.GetService(n)
					}
					time.Sleep(time.Duration(10+w) * time.Millisecond)
				}
			}()
		}
		e.reg.SetFaultFor("svc-3", fakereg.Fault{Err: errors.New("key corrupt")})
		for round := 0; round < 6; round++ {
			time.Sleep(300 * time.Millisecond)
			switch round % 3 {
			case 0:
				e.down(false)
			case 1:
				e.reg.ClearFaults()
				e.reg.SetFault(fakereg.Fault{Latency: 700 * time.Millisecond})
				require.NoError(t, e.reg.Register(faultService("svc-1", fmt.Sprint("n", round))))
			case 2:
				e.reg.ClearFaults()
				require.NoError(t, e.reg.Deregister(faultService("svc-1", fmt.Sprint("n", round-1))))
			}
			k.calls = ^uint64(0) // monotonic only: lookups are still out
			k.check(t, fmt.Sprint("round ", round))
		}
		e.c.Stop()
		for w := 0; w < workers; w++ {
			<-done
		}
		e.reg.ClearFaults()
		k.calls = uint64(len(e.names)) + workers*each
		k.check(t, "all done")
	})
}

// A cache stopped while it holds the registry down: nothing probes any
// more, yet Stats goes on saying the registry is down and DownTime keeps
// growing with the clock (here by an hour after Stop), and the registry
// coming back can never end it. A process that keeps a stopped cache's
// Stats around (a shutdown that hangs, a test harness, the admin page left
// mounted) reports an outage of ever-growing length that it is not
// observing.
func TestDownTimeStopsGrowingAtStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 3, true)
		e.down(false)
		time.Sleep(10 * time.Second)
		for _, n := range e.names {
			_, _ = e.c.Lookup(n)
		}
		require.True(t, e.c.Stats().RegistryDown)
		e.c.Stop()
		atStop := e.c.Stats()
		e.reg.ClearFaults()
		time.Sleep(time.Hour)
		later := e.c.Stats()
		t.Logf("at Stop: down %v DownTime %v; an hour later: down %v DownTime %v", atStop.RegistryDown, atStop.DownTime, later.RegistryDown, later.DownTime)
		assert.Equal(t, atStop.DownTime, later.DownTime, "DownTime of a stopped cache")
	})
}
