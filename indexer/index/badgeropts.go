package index

import "github.com/dgraph-io/badger/v4"

// BadgerOptions returns the options of an indexer's database in dir:
// badger's defaults (its block cache, compression and table sizes suit a
// store that is read far more than the crawler's frontier), with memtables
// of 32 MiB, which allow the 2.4 MiB transactions a record with its
// postings is written in, and one version of each key. The caller may
// change the logger and what does not hold memory.
func BadgerOptions(dir string) badger.Options {
	return badger.DefaultOptions(dir).WithLogger(nil).
		WithMemTableSize(32 << 20).WithNumMemtables(3).WithNumVersionsToKeep(1)
}
