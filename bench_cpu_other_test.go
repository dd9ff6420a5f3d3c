//go:build !linux

package cache_test

import "time"

// Elsewhere than on Linux the CPU time is not measured, and the benchmarks
// leave out the metrics built on it.

func processCPU() time.Duration { return 0 }
func threadCPU() time.Duration  { return 0 }

const cpuMeasured = false
