package framework

import "syscall"

// SysProcAttr makes a child process die with the process that started it, so a
// test killed by a timeout or a signal leaves nothing running.
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
