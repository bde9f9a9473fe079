package pgserver

import "syscall"

// procAttr runs a child as cred (nil: as the caller) and kills it with
// SIGKILL when the thread that started it dies, so that a test process
// killed before its Stop leaves no server behind. The kernel keeps the
// signal across the exec of postgres because os/exec sets it after
// switching to cred.
func procAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
}
