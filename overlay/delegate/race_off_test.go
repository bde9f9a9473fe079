//go:build !race

package delegate_test

const raceEnabled = false
