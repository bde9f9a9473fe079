//go:build race

package scale

const raceEnabled = true
