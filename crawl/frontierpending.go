// Records of completed pages waiting for the sink, kept with the page's
// completion so that a crash loses none.

package crawl

import (
	"github.com/dgraph-io/badger/v4"
)

// pendingRecords calls fn with each stored pending record, oldest first,
// until fn returns false.
func (f *frontier) pendingRecords(fn func(key, rec []byte) bool) error {
	return f.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.Prefix = prefixPending
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Seek(prefixPending); it.ValidForPrefix(prefixPending); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			if !fn(it.Item().KeyCopy(nil), v) {
				return nil
			}
		}
		return nil
	})
}

// deletePending deletes the pending records of a delivered batch.
func (f *frontier) deletePending(keys [][]byte) error {
	if len(keys) == 0 {
		return nil
	}
	wb := f.db.NewWriteBatch()
	defer wb.Cancel()
	for _, k := range keys {
		if err := wb.Delete(k); err != nil {
			return err
		}
	}
	return wb.Flush()
}
