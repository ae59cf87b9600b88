//go:build !linux

package operator

import "syscall"

// sysProcAttr is nil where the child cannot be tied to the parent.
func sysProcAttr() *syscall.SysProcAttr { return nil }
