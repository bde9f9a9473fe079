// Package reliability holds micra's process-level reliability tests
// (RELIABILITY.md): volunteer nodes run as separate "micra node" processes
// against an emulated Internet served by the test, with an indexer in the
// test process, and are killed with SIGKILL, restarted from their data
// directories, joined by new ones, or left without an indexer; the tests
// then check that nothing was lost. RELIABILITY.md at the repository root
// lists the scenarios, what each asserts and the figures of the last run.
//
// The package has no code outside its tests. It may import anything of
// micra's; nothing imports it.
package reliability
