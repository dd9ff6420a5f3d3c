package quote

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestNameCapsLongNames(t *testing.T) {
	assert.Equal(t, `"greeter"`, Name("greeter"))
	long := strings.Repeat("a", 1<<20)
	assert.Equal(t, `"`+strings.Repeat("a", MaxName)+`"... (1048576 bytes)`, Name(long))
	// Cut at a character boundary: é is two bytes.
	e := strings.Repeat("é", 100)
	assert.Equal(t, `"`+strings.Repeat("é", MaxName/2)+`"... (200 bytes)`, Name(e))
	odd := "a" + e
	assert.Equal(t, `"a`+strings.Repeat("é", MaxName/2-1)+`"... (201 bytes)`, Name(odd))
}
