//go:build race

package index

// raceEnabled says that the tests run under the race detector, which slows
// them several times: tests that repeat one goroutine's work do less there.
const raceEnabled = true
