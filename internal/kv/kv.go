// Package kv holds what micra's badger stores share: the base32 of key
// parts, the schema key's check, and the read of one value (get a key,
// treat an absent key as "not found" rather than an error, and decode the
// value while badger guarantees it).
//
// kv is a leaf: it imports badger and protobuf, nothing of micra's.
package kv

import (
	"bytes"
	"encoding/base32"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
	"google.golang.org/protobuf/proto"
)

// B32 encodes binary key parts (ids, hashes, peer ids): RFC 4648 base32,
// lowercase, unpadded, so that no part holds a '/'.
var B32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Schema writes want at key when the key is absent (a new namespace) and
// otherwise checks that the value stored there is want. A different value
// is an error wrapping mismatch that names the key and both values.
func Schema(txn *badger.Txn, key, want []byte, mismatch error) error {
	got, found, err := Copy(txn, key)
	switch {
	case err != nil:
		return err
	case !found:
		return txn.Set(key, want)
	case !bytes.Equal(got, want):
		return fmt.Errorf("%w: %s holds %x, this build reads %x", mismatch, key, got, want)
	}
	return nil
}

// Keys returns copies of the first keys under prefix, at most n: a batch of
// what a delete by prefix removes in one transaction.
func Keys(db *badger.DB, prefix []byte, n int) ([][]byte, error) {
	var keys [][]byte
	err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix) && len(keys) < n; it.Next() {
			keys = append(keys, it.Item().KeyCopy(nil))
		}
		return nil
	})
	return keys, err
}

// Get reads key in txn and hands its value to read, which must not keep
// the slice past the call. An absent key is not an error: found is false
// and read is not called. An error from read is returned as it is.
func Get(txn *badger.Txn, key []byte, read func(v []byte) error) (found bool, err error) {
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, item.Value(read)
}

// Decode reads key in txn and decodes its value with dec. An absent key
// gives the zero value and found false.
func Decode[T any](txn *badger.Txn, key []byte, dec func([]byte) (T, error)) (v T, found bool, err error) {
	found, err = Get(txn, key, func(b []byte) error {
		var err error
		v, err = dec(b)
		return err
	})
	return v, found, err
}

// Copy returns a copy of key's value in txn. An absent key gives found
// false and no error.
func Copy(txn *badger.Txn, key []byte) (v []byte, found bool, err error) {
	return Decode(txn, key, func(b []byte) ([]byte, error) { return bytes.Clone(b), nil })
}

// Load is Copy in a read-only transaction of its own.
func Load(db *badger.DB, key []byte) (v []byte, found bool, err error) {
	err = db.View(func(txn *badger.Txn) error {
		v, found, err = Copy(txn, key)
		return err
	})
	return v, found, err
}

// Value decodes item's value with dec.
func Value[T any](item *badger.Item, dec func([]byte) (T, error)) (v T, err error) {
	err = item.Value(func(b []byte) error {
		var err error
		v, err = dec(b)
		return err
	})
	return v, err
}

// Proto reads key in txn into m. An absent key leaves m as it is and
// gives found false.
func Proto(txn *badger.Txn, key []byte, m proto.Message) (found bool, err error) {
	return Get(txn, key, func(v []byte) error { return proto.Unmarshal(v, m) })
}
