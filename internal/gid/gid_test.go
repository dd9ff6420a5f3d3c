package gid

import "testing"

func TestCurrentTellsGoroutinesApart(t *testing.T) {
	here := Current()
	if here == 0 {
		t.Fatal("no id read")
	}
	if Current() != here {
		t.Error("the same goroutine read two ids")
	}
	other := make(chan uint64)
	go func() { other <- Current() }()
	if id := <-other; id == here || id == 0 {
		t.Errorf("another goroutine read %d, this one %d", id, here)
	}
}
