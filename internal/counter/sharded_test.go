package counter

import (
	"sync"
	"testing"
)

// Every Add is counted, from many goroutines at once.
func TestShardedCountsEveryAdd(t *testing.T) {
	var c Sharded
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				c.Add()
			}
		}()
	}
	wg.Wait()
	if got := c.Load(); got != 16000 {
		t.Fatalf("Load = %d, want 16000", got)
	}
}
