// Package internal holds micra's shared test rigs and helpers that are not
// part of any public API, such as the emulated Internet used by integration
// tests, benchmarks and the demo.
package internal
