package integration5

import "syscall"

// setParentDeathSignal makes the kernel kill the child when the test
// process dies without its cleanups (a panic, go test's timeout). Linux
// sends the signal when the thread that started the child exits; the Go
// runtime ends a thread only when a goroutine locked to it exits, which
// nothing in these tests does.
func setParentDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
