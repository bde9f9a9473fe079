package p2ptest

import (
	"bytes"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// TestDBLargeValue: an in-memory database takes values as large as the
// overlay stores (a shard entry is at most 16 KiB); badger has no value
// log in memory and panics on a value above its threshold.
func TestDBLargeValue(t *testing.T) {
	db := DB(t)
	want := bytes.Repeat([]byte("v"), 64<<10)
	if err := db.Update(func(txn *badger.Txn) error { return txn.Set([]byte("k"), want) }); err != nil {
		t.Fatal(err)
	}
	err := db.View(func(txn *badger.Txn) error {
		it, err := txn.Get([]byte("k"))
		if err != nil {
			return err
		}
		got, err := it.ValueCopy(nil)
		if err == nil && !bytes.Equal(got, want) {
			t.Errorf("read %d bytes back, want %d", len(got), len(want))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
