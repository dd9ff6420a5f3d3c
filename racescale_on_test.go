//go:build race

package cache

// raceEnabled is set when the tests run under the race detector, which
// slows every goroutine ten times or more: the few tests that measure a
// cache of many services run smaller then, and at full size in the run
// without it.
const raceEnabled = true
