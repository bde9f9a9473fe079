//go:build !race

package subnet

const raceEnabled = false
