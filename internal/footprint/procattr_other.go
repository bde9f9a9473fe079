//go:build !linux

package footprint

import "syscall"

// childAttr is nil off Linux, which has no parent-death signal (bench
// footprint runs on Linux only).
func childAttr() *syscall.SysProcAttr { return nil }
