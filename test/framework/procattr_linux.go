package framework

import "syscall"

// SysProcAttr makes a child process die with the process that started it, so a
// test killed by a timeout or a signal leaves nothing running, and puts it in a
// process group of its own: a Ctrl-C in the terminal reaches the test or the
// demo, which stops its children in order, and not each child at once (make
// demo's Ctrl-C killed the node's containerd before the teardown could list
// its pod sandboxes, and the teardown failed).
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
