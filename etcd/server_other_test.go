//go:build !linux

package etcd

import "syscall"

// childAttr: only Linux ends a child when its parent dies.
func childAttr() *syscall.SysProcAttr { return nil }
