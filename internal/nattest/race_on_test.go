//go:build race

package nattest

// raceEnabled is true under the race detector. The system under test is
// the micra binary, built without it; the test alone gains nothing from
// the detector and its timing would suffer, so it skips.
const raceEnabled = true
