//go:build !linux

package integration

import "syscall"

// setParentDeathSignal: only Linux ends a child when its parent dies.
func setParentDeathSignal(*syscall.SysProcAttr) {}
