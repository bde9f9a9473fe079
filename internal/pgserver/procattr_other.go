//go:build unix && !linux

package pgserver

import "syscall"

// procAttr runs a child as cred (nil: as the caller). Off Linux there is
// no parent-death signal: only Stop ends the server.
func procAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred}
}
