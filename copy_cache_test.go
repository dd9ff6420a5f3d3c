package cache

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

// cyclicService is a one-node service whose one endpoint's Request is a
// Value that lists itself.
func cyclicService() *registry.Service {
	self := &registry.Value{Name: "self"}
	self.Values = []*registry.Value{self}
	s := svc("svc", "1", "n1")
	s.Endpoints = []*registry.Endpoint{{Name: "Svc.Call", Request: self, Response: &registry.Value{Name: "Rsp"}}}
	return s
}

// A registry answer with a cyclic Value tree fails the refresh like a
// registry error that names the service, instead of killing the process.
func TestAnAnswerTooLargeToCopyFailsTheRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFakeRegistry()
		// The registry hands out its answer itself, uncopied, as a
		// registry plugin may: a copy of a cyclic tree would never end.
		r.SetShared(true)
		r.Set("svc", cyclicService())
		c, l := newTestCache(t, r, WithTTL(time.Minute))
		defer c.Stop()

		_, err := c.GetService("svc")
		require.Error(t, err)
		assert.True(t, errors.Is(err, ErrAnswerTooLarge), "%v", err)
		assert.Contains(t, err.Error(), `service "svc"`)
		assert.Contains(t, strings.Join(l.all(), "\n"), "Values form a cycle", "logged as a failing refresh")
		assert.Nil(t, c.snapshotOf("svc"))

		// With data cached, the stale data is kept and served.
		r.SetNodes("svc", "a")
		time.Sleep(c.opts.MinimumRetryInterval)
		got, err := c.GetService("svc")
		require.NoError(t, err)
		assert.Equal(t, []string{"a"}, nodeIDs(got))

		r.Set("svc", cyclicService())
		time.Sleep(time.Minute) // stale
		got, err = c.GetService("svc")
		require.NoError(t, err)
		assert.Equal(t, []string{"a"}, nodeIDs(got))
		synctest.Wait()
		got, err = c.GetService("svc")
		require.NoError(t, err)
		assert.Equal(t, []string{"a"}, nodeIDs(got), "the refused answer did not replace the data")
	})
}

// A watch event with a cyclic Value tree cannot be applied: the entry is
// invalidated, and the next reader refreshes it.
func TestAnEventTooLargeToCopyInvalidatesTheEntry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "a")
		c, _ := newTestCache(t, f, WithTTL(time.Hour))
		defer c.Stop()
		warm(t, c, "svc")
		base := f.TotalCalls()

		deliver(f.Stream(), "create", cyclicService())
		s := c.snapshotOf("svc")
		require.NotNil(t, s)
		assert.False(t, time.Now().Before(s.Expires), "stale now")
		assert.Equal(t, []string{"a"}, nodeIDs(s.Services), "the event was not applied")

		f.SetNodes("svc", "a", "b")
		time.Sleep(c.opts.MinimumRetryInterval) // the throttle still applies
		_, err := c.GetService("svc")
		require.NoError(t, err)
		synctest.Wait()
		got, _ := c.GetService("svc")
		assert.Equal(t, []string{"a", "b"}, nodeIDs(got))
		assert.Equal(t, base+1, f.TotalCalls())

		// A delete is applied whatever its Values: only node Ids are read.
		del := cyclicService()
		del.Nodes[0].Id = "b"
		deliver(f.Stream(), "delete", del)
		got, _ = c.GetService("svc")
		assert.Equal(t, []string{"a"}, nodeIDs(got))
	})
}
