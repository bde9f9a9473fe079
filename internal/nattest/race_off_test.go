//go:build !race

package nattest

const raceEnabled = false
