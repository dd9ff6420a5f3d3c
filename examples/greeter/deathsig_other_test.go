//go:build !linux

package main

import "syscall"

// setParentDeathSignal does nothing: Linux alone signals a child when its
// parent dies.
func setParentDeathSignal(*syscall.SysProcAttr) {}
