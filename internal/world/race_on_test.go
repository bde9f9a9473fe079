//go:build race

package world

// raceEnabled is true under the race detector, where reading the real
// geolocation file runs many times slower and finds nothing the normal
// run does not; those tests skip.
const raceEnabled = true
