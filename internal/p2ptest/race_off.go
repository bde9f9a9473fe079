//go:build !race

package p2ptest

const raceEnabled = false
