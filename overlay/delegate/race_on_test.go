//go:build race

package delegate_test

// raceEnabled is true under the race detector, whose slowdown turns timed
// probes into noise.
const raceEnabled = true
