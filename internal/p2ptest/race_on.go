//go:build race

package p2ptest

// raceEnabled is true under the race detector (see Bubble).
const raceEnabled = true
