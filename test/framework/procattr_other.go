//go:build !linux

package framework

import "syscall"

// SysProcAttr is nil where the child cannot be tied to the parent.
func SysProcAttr() *syscall.SysProcAttr { return nil }
