package cache_test

import (
	"syscall"
	"time"
)

// processCPU is the user and system CPU time the process has used.
func processCPU() time.Duration { return rusageCPU(syscall.RUSAGE_SELF) }

// threadCPU is the CPU time the calling thread has used: with
// runtime.LockOSThread, the calling goroutine's.
func threadCPU() time.Duration { return rusageCPU(syscall.RUSAGE_THREAD) }

// cpuMeasured reports whether processCPU and threadCPU measure anything.
const cpuMeasured = true

func rusageCPU(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
