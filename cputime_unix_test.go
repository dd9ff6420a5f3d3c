//go:build unix

package cache_test

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time the process has used, in user and system mode.
// Unlike the wall clock, other processes on a shared machine barely move
// it, so a ratio of two such measurements holds steady.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
