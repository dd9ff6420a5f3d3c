package cache

// GoroutinesWith and GoroutinesLeft let the external tests (package
// cache_test) count the cache's goroutines with the same code as the
// internal ones.
var (
	GoroutinesWith = goroutinesWith
	GoroutinesLeft = goroutinesLeft
)
