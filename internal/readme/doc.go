// Package readme reads the repository's README.md for the tests that hold
// it to the code: the protocol table's IDs and frame limits. It imports
// nothing of micra's.
package readme
