//go:build race

package reliability

// raceEnabled is true under the race detector. The system under test is
// the micra binary, built without it; the harness alone gains nothing from
// the detector and the scenarios' timing would suffer, so they skip.
const raceEnabled = true
