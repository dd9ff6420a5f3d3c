package cache_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cache "github.com/regcache/cache"
)

// Every test in this package that starts a cache checks that it leaves no
// goroutine behind. Tests in a testing/synctest bubble (faults_test.go) get
// that from the bubble, which fails when a goroutine outlives it; the others
// call checkNoLeak before they create their cache.

// cacheFrame marks a stack frame of the cache's methods.
const cacheFrame = cache.CacheCode

// cacheCreated marks a goroutine that the cache started.
const cacheCreated = "created by github.com/regcache/cache."

// leakGrace is how long checkNoLeak waits for goroutines to finish exiting
// (see GoroutinesLeft); the test of the check shortens it.
var leakGrace = 2 * time.Second

// goroutinesWith is the internal tests' helper: the stacks of the
// goroutines containing marker, in the caller's synctest bubble or in none.
var goroutinesWith = cache.GoroutinesWith

// regcacheGoroutines counts the goroutines running code of a cache.
func regcacheGoroutines() int { return len(goroutinesWith(cacheFrame)) }

// cacheOwnedGoroutines counts the goroutines that a cache started and that
// have not returned.
func cacheOwnedGoroutines() int { return len(goroutinesWith(cacheCreated)) }

// checkNoLeak counts the goroutines running cache code now and, when t
// ends, fails it if more remain. Call it before creating the cache: cleanups
// run last-in first-out, so the check runs after a t.Cleanup(c.Stop)
// registered later, and after every deferred Stop.
func checkNoLeak(t testing.TB) {
	t.Helper()
	before := regcacheGoroutines()
	t.Cleanup(func() {
		if left := cache.GoroutinesLeft(cacheFrame, before, leakGrace); len(left) > before {
			t.Errorf("%d goroutine(s) running cache code outlived the test (%d before it):\n\n%s",
				len(left)-before, before, strings.Join(left, "\n\n"))
		}
	})
}

// leakProbe is a testing.TB that records what checkNoLeak does with it.
type leakProbe struct {
	testing.TB
	cleanups []func()
	failure  string
}

func (p *leakProbe) Helper()                        {}
func (p *leakProbe) Cleanup(f func())               { p.cleanups = append(p.cleanups, f) }
func (p *leakProbe) Errorf(format string, a ...any) { p.failure = fmt.Sprintf(format, a...) }

func (p *leakProbe) end() {
	for i := len(p.cleanups) - 1; i >= 0; i-- {
		p.cleanups[i]()
	}
}

// The check sees a cache that was not stopped, and passes once it is.
func TestCheckNoLeakSeesACacheLeftRunning(t *testing.T) {
	checkNoLeak(t)
	before := regcacheGoroutines()
	early, late := &leakProbe{TB: t}, &leakProbe{TB: t}
	checkNoLeak(early)
	checkNoLeak(late)
	c := cache.New(newReg(benchService("svc", 1)), cache.WithLogger(benchLogger))
	_, err := c.Lookup("svc") // starts the watcher and the maintainer
	require.NoError(t, err)
	assert.GreaterOrEqual(t, regcacheGoroutines(), before+2)
	assert.GreaterOrEqual(t, cacheOwnedGoroutines(), 2)

	defer func(g time.Duration) { leakGrace = g }(leakGrace)
	leakGrace = 20 * time.Millisecond
	early.end()
	assert.Contains(t, early.failure, "outlived the test")
	assert.Contains(t, early.failure, cacheFrame)

	leakGrace = 2 * time.Second
	c.Stop()
	late.end()
	assert.Empty(t, late.failure)
}
