//go:build race

package admin_test

// raceEnabled tells whether the race detector is on: it slows every
// goroutine, so the tests of large caches shrink or skip their
// measurements under it.
const raceEnabled = true
