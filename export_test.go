package cache

// GoroutinesWith, GoroutinesLeft and CacheCode let the external tests (package
// cache_test) count the cache's goroutines with the same code as the
// internal ones.
var (
	GoroutinesWith = goroutinesWith
	GoroutinesLeft = goroutinesLeft
)

const CacheCode = cacheCode
