package cache

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/regcache/cache/internal/core"
)

// A cold lookup throttled while the watch stream is connected says that an
// event may answer before the next attempt, and its durations are rounded,
// so that the messages of one episode read alike.
func TestThrottledErrorText(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "a")
		c, _ := newTestCache(t, f)
		defer c.Stop()
		warm(t, c, "svc") // the stream is connected
		f.Fail(errDown)
		_, err := c.Lookup("missing")
		require.ErrorIs(t, err, errDown)
		time.Sleep(1220*time.Millisecond + 631022)
		_, err = c.Lookup("missing")
		require.ErrorIs(t, err, ErrThrottled)
		assert.Equal(t, `regcache: service "missing": registry lookup throttled, nothing cached; `+
			`next attempt allowed in 3.77s, waiting for the registry or its events`, err.Error())

		// Without a stream, only the registry can answer.
		te := &core.ThrottledError{Service: "x", RetryIn: 3780631022}
		assert.Equal(t, `regcache: service "x": registry lookup throttled, nothing cached; next attempt allowed in 3.78s`, te.Error())
		te = &core.ThrottledError{Service: "x", RetryIn: 999999999, RegistryDown: true}
		assert.Equal(t, `regcache: service "x": registry lookup throttled, nothing cached: the registry is unreachable; next probe in 990ms`, te.Error())
		assert.True(t, errors.Is(te, ErrThrottled))
	})
}
