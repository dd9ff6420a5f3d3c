package etcd

import "syscall"

// childAttr makes the kernel end a server the test started when the test
// process dies.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
