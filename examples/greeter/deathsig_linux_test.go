package main

import "syscall"

// setParentDeathSignal has the kernel kill a program the tests started if
// the test process dies without running its cleanups (go test's timeout, a
// panic). Linux signals the child when the thread that started it ends,
// and the Go runtime ends a thread only when a goroutine locked to it
// returns, which no test here does.
func setParentDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
