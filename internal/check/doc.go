// Package check holds the bounds checks that options of micra's packages
// run on the values they are given: each returns nil for a value in bounds
// and otherwise an error that names the option, its bounds and the value
// given ("workers must be 1 to 64, got 0"), and Set stores a checked value.
//
// check is a leaf: it imports nothing of micra's (nor libp2p), so that every
// package, bootstrap included, may use it.
package check
