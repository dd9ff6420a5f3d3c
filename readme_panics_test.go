package cache

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The panic messages that the README quotes.
func TestReadmePanicMessages(t *testing.T) {
	f := newFakeRegistry()
	assert.PanicsWithValue(t, "regcache: WithTTL: TTL must be positive, got 0s", func() { New(f, WithTTL(0)) })
	assert.PanicsWithValue(t, "regcache: WithIdleEviction: duration must not be negative, got -1s",
		func() { New(f, WithIdleEviction(-time.Second)) })
	assert.PanicsWithValue(t, "regcache: New: registry must not be nil", func() { New(nil) })
	assert.PanicsWithValue(t, "regcache: New: nil Option", func() { New(f, nil) })
}
