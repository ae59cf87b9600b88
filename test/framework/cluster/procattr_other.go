//go:build !linux

package cluster

import "syscall"

// SysProcAttr is nil where the child cannot be tied to the parent.
func SysProcAttr() *syscall.SysProcAttr { return nil }
