//go:build race

package overlay

// raceEnabled is true under the race detector. The swarm tests run smaller
// swarms there (swarmSize, TestSimSwarm): the race runtime is slow. Their
// bubbles run through p2ptest.Bubble, which works around the race
// runtime's abort on bubbled timers.
const raceEnabled = true
