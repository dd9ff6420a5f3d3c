package cache

// GoroutinesWith, GoroutinesLeft and CacheCode let the external tests (package
// cache_test) count the cache's goroutines with the same code as the
// internal ones.
var (
	GoroutinesWith = goroutinesWith
	GoroutinesLeft = goroutinesLeft
)

const CacheCode = cacheCode

// RaceScale is n, or a fifth of it under the race detector
// (racescale_on_test.go).
func RaceScale(n int) int { return raceScale(n) }

// raceScale is n, or a fifth of it under the race detector.
func raceScale(n int) int {
	if raceEnabled {
		return n / 5
	}
	return n
}
