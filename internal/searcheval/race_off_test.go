//go:build !race

package searcheval

const raceEnabled = false
