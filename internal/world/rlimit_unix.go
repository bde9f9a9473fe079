//go:build unix

package world

import (
	"fmt"
	"syscall"
)

// ensureFiles raises the soft open-file limit to the hard limit when it is
// below need (Go already does so at start-up on Linux; this covers a
// process that lowered it). It fails when even the hard limit is too low.
func ensureFiles(need uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return nil // unknown: the binds will tell
	}
	cur, hard := uint64(lim.Cur), uint64(lim.Max)
	if cur >= need {
		return nil
	}
	if hard < need {
		return fmt.Errorf("%w: need about %d open files, the hard limit is %d (raise it with ulimit -Hn, or serve fewer sites)", ErrTooManyFiles, need, hard)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("%w: raising the open-file limit to %d: %v", ErrTooManyFiles, hard, err)
	}
	return nil
}
