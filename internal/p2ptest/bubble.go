package p2ptest

import (
	"runtime"
	"testing"
	"testing/synctest"
)

// Bubble runs f in a testing/synctest bubble, like synctest.Test. Every
// test of micra's that runs in virtual time goes through it.
//
// Under the race detector it runs the bubble with GOMAXPROCS 1 (restored
// afterwards). Go 1.26's runtime gives all timers of a bubble one race
// context, and a bubbled timer due at once (a zero timer, a Reset(0), an
// expired context deadline) runs on the goroutine that set it, while the
// bubble's timer loop may run others on another thread: two threads in one
// ThreadSanitizer context abort the test binary with "ThreadSanitizer:
// CHECK failed: tsan_rtl.cpp:282 ((!thr->slot_locked)) != (0)" or
// "tsan_rtl.cpp:346 ... kEpochLast". Sixty-four goroutines waiting on zero
// timers abort it within a second at GOMAXPROCS 2 and never at 1. One P
// runs one timer at a time; the race detector still sees every
// unsynchronised access, which does not depend on the accesses overlapping.
func Bubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	if raceEnabled {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	}
	synctest.Test(t, f)
}
