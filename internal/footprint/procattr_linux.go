package footprint

import "syscall"

// childAttr makes a child process that bench footprint starts die with
// it: should the bench be killed without its deferred stop, the measured
// node does not run on, joined to a network that is gone.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
