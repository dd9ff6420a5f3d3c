//go:build !linux

package nats

import "syscall"

// childAttr: only Linux ends a child when its parent dies.
func childAttr() *syscall.SysProcAttr { return nil }
