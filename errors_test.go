package cache

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/regcache/cache/internal/core"
)

// TestErrorsCapLongNames: an error about a service quotes its name capped
// (quote.Name), so that a 1 MiB name from a caller does not make a 1 MiB
// error.
func TestErrorsCapLongNames(t *testing.T) {
	long := strings.Repeat("a", 1<<20)
	assert.Equal(t, `"greeter"`, quoteName("greeter"))
	assert.Equal(t, `"`+strings.Repeat("a", 128)+`"... (1048576 bytes)`, quoteName(long))
	err := (&core.ThrottledError{Service: long, RetryIn: time.Second}).Error()
	assert.Less(t, len(err), 300)
	err = (&core.TooStaleError{Service: long, Cause: errors.New("down")}).Error()
	assert.Less(t, len(err), 300)
}
