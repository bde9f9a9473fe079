//go:build race

package swarm

// raceEnabled is true under the race detector: TestRollover skips there.
const raceEnabled = true
