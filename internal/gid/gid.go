// Package gid tells which goroutine is running.
package gid

import (
	"bytes"
	"runtime"
)

// Current returns the calling goroutine's id, read from the header of its
// stack trace.
func Current() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	var id uint64
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			break
		}
		id = id*10 + uint64(ch-'0')
	}
	return id
}
