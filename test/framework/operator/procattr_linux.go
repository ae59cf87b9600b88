package operator

import "syscall"

// sysProcAttr makes a child process die with the process that started it, so a
// test killed by a timeout or a signal leaves nothing running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
