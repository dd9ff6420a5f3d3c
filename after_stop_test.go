package cache

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/fakereg"
)

// After Stop, a cold lookup makes its call itself, with its own context.
// A caller whose deadline ends that call fails alone: the callers that
// joined the call ask again, and the registry, which did not fail, is not
// held to have failed. (Held off a bug: the first caller's deadline was
// every joiner's error, "context deadline exceeded" for a caller without
// a deadline, and the service's failure, throttling the next lookup for
// the retry interval.)
func TestAfterStopACallersDeadlineIsItsOwn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "n1")
		c, _ := newTestCache(t, f)
		c.Stop()
		f.SetFault(fakereg.Fault{Latency: 100 * time.Millisecond}) // honours the context
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		first := make(chan error, 1)
		go func() {
			_, err := c.GetService("svc", registry.GetContext(ctx))
			first <- err
		}()
		synctest.Wait()
		joined := make(chan error, 1)
		go func() {
			_, err := c.GetService("svc") // no deadline: joins the call out
			joined <- err
		}()
		require.ErrorIs(t, <-first, context.DeadlineExceeded, "the first caller's own deadline")
		require.NoError(t, <-joined, "a caller that joined asks again, and waits for its own call")
		got, err := c.Lookup("svc")
		require.NoError(t, err, "the registry did not fail: nothing is throttled")
		assert.Equal(t, []string{"n1"}, nodeIDs(got))
		assert.Zero(t, c.Stats().RefreshErrors, "no failure recorded")
	})
}

// Stop waits for an observer's callback for at most stopWait, as for a
// registry call: a callback that never returns must not hang the
// shutdown. A callback that calls Stop itself does not wait for itself.
func TestStopBoundsItsWaitForTheObserver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		block := make(chan struct{})
		l := &testLogger{}
		c := New(f, WithLogger(l), WithObserver(func(Event) { <-block })).(*cache)
		f.Fail(errors.New("down"))
		_, _ = c.Lookup("a")
		time.Sleep(10 * time.Second) // its second failure is told
		_, _ = c.Lookup("a")
		synctest.Wait()
		start := time.Now()
		c.Stop()
		assert.Equal(t, stopWait, time.Since(start))
		assert.Contains(t, strings.Join(l.all(), "\n"), "Stop gave up")
		close(block)
		synctest.Wait()
		assert.Zero(t, cacheGoroutines())

		var self *cache
		stopped := make(chan struct{})
		self = New(f, WithObserver(func(Event) { self.Stop(); close(stopped) })).(*cache)
		_, _ = self.Lookup("b")
		time.Sleep(10 * time.Second)
		_, _ = self.Lookup("b")
		<-stopped
		synctest.Wait()
		assert.Zero(t, cacheGoroutines())
	})
}

// A cold lookup whose call Stop cancels asks again, and counts once.
// (Held off a bug, older than the redesign: it counted as two lookups,
// two misses.)
func TestALookupCancelledByStopCountsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "n1")
		c, _ := newTestCache(t, f)
		f.SetFault(fakereg.Fault{Latency: time.Minute}) // honours the context
		done := make(chan error, 1)
		go func() {
			_, err := c.GetService("svc")
			done <- err
		}()
		synctest.Wait()
		c.Stop()
		require.NoError(t, <-done)
		st := c.Stats()
		assert.Equal(t, uint64(1), st.Lookups)
		assert.Equal(t, uint64(1), st.Misses)
	})
}
