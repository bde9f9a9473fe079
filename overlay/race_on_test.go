//go:build race

package overlay

// raceEnabled is true under the race detector. The swarm tests run smaller
// swarms there (swarmSize, TestSimSwarm): the race runtime is slow, and a
// testing/synctest bubble with many goroutines has made it abort with
// "ThreadSanitizer: CHECK failed: tsan_rtl.cpp:282 ((!thr->slot_locked)) !=
// (0)" (go.dev/issue/78156, open on Go 1.26).
const raceEnabled = true
