//go:build race

package main

// raceEnabled is true under the race detector, where the demo's dozen
// nodes in one process run many times slower; the demo's test skips.
const raceEnabled = true
