package kv

import (
	"bytes"
	"errors"
	"strconv"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestReads(t *testing.T) {
	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	msg, _ := proto.Marshal(wrapperspb.String("hello"))
	err = db.Update(func(txn *badger.Txn) error {
		return errors.Join(txn.Set([]byte("n"), []byte("42")), txn.Set([]byte("bad"), []byte("x")), txn.Set([]byte("m"), msg))
	})
	if err != nil {
		t.Fatal(err)
	}
	atoi := func(b []byte) (int, error) { return strconv.Atoi(string(b)) }
	err = db.View(func(txn *badger.Txn) error {
		if v, found, err := Decode(txn, []byte("n"), atoi); v != 42 || !found || err != nil {
			t.Errorf("present: %d, %v, %v; want 42, true, nil", v, found, err)
		}
		if v, found, err := Decode(txn, []byte("none"), atoi); v != 0 || found || err != nil {
			t.Errorf("absent: %d, %v, %v; want 0, false, nil", v, found, err)
		}
		if _, found, err := Decode(txn, []byte("bad"), atoi); !found || err == nil {
			t.Errorf("undecodable: found %v, error %v; want true and the decoder's error", found, err)
		}
		item, err := txn.Get([]byte("n"))
		if err != nil {
			return err
		}
		if v, err := Value(item, atoi); v != 42 || err != nil {
			t.Errorf("Value: %d, %v; want 42, nil", v, err)
		}
		var s wrapperspb.StringValue
		if found, err := Proto(txn, []byte("m"), &s); !found || err != nil || s.GetValue() != "hello" {
			t.Errorf("Proto: found %v, error %v, %q; want true, nil, hello", found, err, s.GetValue())
		}
		s.Value = "kept"
		if found, err := Proto(txn, []byte("none"), &s); found || err != nil || s.GetValue() != "kept" {
			t.Errorf("Proto absent: found %v, error %v, %q; want false, nil, the message untouched", found, err, s.GetValue())
		}
		if v, found, err := Copy(txn, []byte("n")); string(v) != "42" || !found || err != nil {
			t.Errorf("Copy: %q, %v, %v; want 42, true, nil", v, found, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if v, found, err := Load(db, []byte("none")); v != nil || found || err != nil {
		t.Errorf("Load absent: %q, %v, %v; want nil, false, nil", v, found, err)
	}
	v, _, _ := Load(db, []byte("n"))
	if err := db.Update(func(txn *badger.Txn) error { return txn.Set([]byte("n"), []byte("7")) }); err != nil {
		t.Fatal(err)
	}
	if string(v) != "42" {
		t.Errorf("Load's value changed to %q when the key was written again: not a copy", v)
	}
}

func TestKeys(t *testing.T) {
	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	err = db.Update(func(txn *badger.Txn) error {
		return errors.Join(txn.Set([]byte("/a/1"), nil), txn.Set([]byte("/a/2"), nil), txn.Set([]byte("/a/3"), nil), txn.Set([]byte("/b/1"), nil))
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		prefix string
		n      int
		want   string
	}{{"/a/", 2, "/a/1 /a/2"}, {"/a/", 10, "/a/1 /a/2 /a/3"}, {"/c/", 10, ""}} {
		keys, err := Keys(db, []byte(tc.prefix), tc.n)
		got := string(bytes.Join(keys, []byte(" ")))
		if err != nil || got != tc.want {
			t.Errorf("Keys(%s, %d) = %q, %v; want %q", tc.prefix, tc.n, got, err, tc.want)
		}
	}
}

func TestSchema(t *testing.T) {
	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	errOld := errors.New("old layout")
	check := func(want byte) error {
		return db.Update(func(txn *badger.Txn) error { return Schema(txn, []byte("/x/meta/schema"), []byte{want}, errOld) })
	}
	if err := check(2); err != nil {
		t.Fatalf("new namespace: %v", err)
	}
	if err := check(2); err != nil {
		t.Fatalf("same version again: %v", err)
	}
	if err := check(3); !errors.Is(err, errOld) {
		t.Fatalf("another version: %v, want %v", err, errOld)
	}
}
