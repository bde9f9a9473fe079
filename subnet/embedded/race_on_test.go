//go:build race

package embedded

// raceEnabled is true under the race detector, where the single-threaded
// real-data builds run 20 times slower and find nothing the normal run
// does not; those tests skip.
const raceEnabled = true
