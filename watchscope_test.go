package cache

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/regcache/cache/internal/fakereg"
	"github.com/regcache/cache/watchscope"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

// watchScope is the watch scope of the newest Watch call's context.
func watchScope(t *testing.T, r *fakereg.Registry) watchscope.Scope {
	t.Helper()
	calls := r.WatchCalls()
	require.NotEmpty(t, calls, "no Watch call")
	s := watchscope.FromContext(calls[len(calls)-1].Options.Context)
	require.NotNil(t, s, "the one stream's Watch carries a scope")
	return s
}

// The scope tells a watcher the services held when it starts following,
// then every change after, in order and numbered, each numbered above
// whatever Seq returned before it; a follower stopped is told nothing.
func TestWatchScopeFollowsTheServicesHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFakeRegistry()
		r.SetNodes("a", "1")
		r.SetNodes("b", "1")
		c, _ := newTestCache(t, r, WithTTL(time.Hour), WithIdleEviction(time.Minute))
		defer c.Stop()
		warm(t, c, "a")
		s := watchScope(t, r)

		names, seq, f := s.Follow()
		assert.Equal(t, []string{"a"}, names)
		assert.Equal(t, seq, s.Seq())
		select {
		case <-f.Changed():
			t.Fatal("a change before any")
		default:
		}

		before := s.Seq()
		_, err := c.GetService("b")
		require.NoError(t, err)
		_, err = c.GetService("none")
		require.ErrorIs(t, err, registry.ErrNotFound)
		<-f.Changed()
		got := f.Changes()
		require.Len(t, got, 2)
		assert.Equal(t, watchscope.Change{Service: "b", Held: true, Seq: before + 1}, got[0])
		assert.Equal(t, watchscope.Change{Service: "none", Held: true, Seq: before + 2}, got[1])
		assert.Empty(t, f.Changes(), "taken")

		// Idle entries are evicted: each a change, held false.
		time.Sleep(3 * time.Minute)
		synctest.Wait()
		got = f.Changes()
		dropped := map[string]bool{}
		for _, ch := range got {
			assert.False(t, ch.Held)
			assert.Greater(t, ch.Seq, before+2)
			dropped[ch.Service] = true
		}
		assert.Equal(t, map[string]bool{"a": true, "b": true, "none": true}, dropped)
		assert.Equal(t, s.Seq(), got[len(got)-1].Seq)

		// Stopped: nothing more is kept for it.
		f.Stop()
		_, err = c.GetService("a")
		require.NoError(t, err)
		assert.Empty(t, f.Changes())
		c.mu.Lock()
		assert.Empty(t, c.followers)
		c.mu.Unlock()
	})
}

// Revalidate has a service's data fetched again once its retry window
// allows, and does nothing for a service not held.
func TestWatchScopeRevalidate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFakeRegistry()
		r.SetNodes("a", "1")
		c, _ := newTestCache(t, r, WithTTL(time.Hour))
		defer c.Stop()
		warm(t, c, "a")
		s := watchScope(t, r)
		calls := r.Calls("a")

		r.SetNodes("a", "2") // a change whose event was lost
		s.Revalidate("a")
		s.Revalidate("never held")
		time.Sleep(c.opts.MinimumRetryInterval + time.Second)
		synctest.Wait()
		assert.Equal(t, calls+1, r.Calls("a"))
		assert.Equal(t, 0, r.Calls("never held"))
		got, err := c.Lookup("a")
		require.NoError(t, err)
		assert.Equal(t, []string{"2"}, nodeIDs(got))

		// A service not found is fetched at its next lookup, inside its
		// retry window.
		_, err = c.GetService("none")
		require.ErrorIs(t, err, registry.ErrNotFound)
		r.SetNodes("none", "n1") // registered; its event lost
		_, err = c.GetService("none")
		require.Error(t, err, "throttled")
		assert.Equal(t, 1, r.Calls("none"))
		s.Revalidate("none")
		got, err = c.GetService("none")
		require.NoError(t, err)
		assert.Equal(t, []string{"n1"}, nodeIDs(got))
		assert.Equal(t, 2, r.Calls("none"))

		// The same while its first call is out, and answers not found
		// after the change.
		r.Hold()
		done := make(chan error)
		go func() {
			_, err := c.GetService("racing")
			done <- err
		}()
		synctest.Wait()
		s.Revalidate("racing")
		r.Release()
		require.ErrorIs(t, <-done, registry.ErrNotFound)
		r.SetNodes("racing", "r1")
		got, err = c.GetService("racing")
		require.NoError(t, err, "asked again inside its retry window")
		assert.Equal(t, []string{"r1"}, nodeIDs(got))
	})
}

// A per-service watch (WithWatchPerService) that opens after a lookup
// found nothing re-validates the same way as the stream's scope: a service
// registered between the not-found and the watch, whose event the watch
// never saw, is asked for at the next lookup, inside its retry window.
func TestWatchOpenedLateRevalidatesAServiceNotFound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		c, _ := newTestCache(t, f, WithTTL(time.Hour))
		defer c.Stop()
		_, err := c.GetService("late")
		require.ErrorIs(t, err, registry.ErrNotFound)
		f.SetNodes("late", "l1") // registered before the watch opened
		_, err = c.GetService("late")
		require.Error(t, err, "throttled")
		assert.Equal(t, 1, f.Calls("late"))

		c.watchOpened("late")
		got, err := c.GetService("late")
		require.NoError(t, err)
		assert.Equal(t, []string{"l1"}, nodeIDs(got))
		assert.Equal(t, 2, f.Calls("late"))

		// Failures keep their window: only a not-found is doubted.
		f.Fail(errors.New("down"))
		_, err = c.GetService("failing")
		require.Error(t, err)
		calls := f.Calls("failing")
		c.watchOpened("failing")
		_, _ = c.GetService("failing")
		assert.Equal(t, calls, f.Calls("failing"), "a failure's retry window holds")
	})
}

// watchOpened tells the core that a watch of name opened, as a per-service
// watch that was never lost does.
func (c *cache) watchOpened(name string) {
	c.mu.Lock()
	c.core.WatchOpened(name, false, false, nil, c.now())
	c.unlock()
}

// A follower that stops taking its changes keeps at most one per service:
// a service held and dropped again while its change waits cancels out. So
// a watcher stuck sending (etcd's flow control) while ever-new names come
// and go holds memory for the services held, not for every name seen.
// (Held off a suspicion: the changes queued for a follower grew without
// bound while it did not take them.)
func TestAFollowerThatDoesNotTakeItsChangesIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFakeRegistry()
		r.SetNodes("anchor", "1")
		c, _ := newTestCache(t, r, WithMinimumRetryInterval(time.Second))
		defer c.Stop()
		warm(t, c, "anchor")
		s := watchScope(t, r)
		_, _, f := s.Follow()
		defer f.Stop()
		peak := 0
		for i := 0; i < 5000; i++ {
			_, err := c.GetService(fmt.Sprint("typo-", i))
			require.ErrorIs(t, err, registry.ErrNotFound)
			time.Sleep(10 * time.Millisecond)
			if i%100 == 0 {
				c.mu.Lock()
				fl := f.(*follower)
				peak = max(peak, len(fl.pending)-fl.holes)
				c.mu.Unlock()
			}
		}
		t.Logf("at most %d changes queued for 5000 names", peak)
		assert.LessOrEqual(t, peak, 2*c.Stats().Entries+200, "one per service held, about")
		held := map[string]bool{}
		for _, ch := range f.Changes() {
			assert.False(t, held[ch.Service], "one change per service")
			held[ch.Service] = true
		}
	})
}
