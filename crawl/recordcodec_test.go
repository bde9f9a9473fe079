package crawl

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"testing"
)

func TestRecordCodec(t *testing.T) {
	for i, r := range sampleRecords() {
		b := AppendRecord([]byte("prefix"), &r)
		if !bytes.HasPrefix(b, []byte("prefix")) {
			t.Fatalf("record %d: prefix lost", i)
		}
		got, err := DecodeRecord(b[len("prefix"):])
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !got.Time.Equal(r.Time) {
			t.Fatalf("record %d: time %v != %v", i, got.Time, r.Time)
		}
		got.Time = r.Time
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("record %d:\n got %+v\nwant %+v", i, got, r)
		}
	}
	good := AppendRecord(nil, &sampleRecords()[0])
	withStmts := AppendRecord(nil, &sampleRecords()[2])
	if good[0] != 1 || withStmts[0] != 2 {
		t.Fatalf("versions %d and %d, want 1 without statements and 2 with", good[0], withStmts[0])
	}
	// A version 2 record whose statements section is cut: the section
	// runs on past the record.
	cut := slices.Clone(withStmts[:len(withStmts)-3])
	tests := []struct {
		name string
		b    []byte
		err  error
	}{
		{"empty", nil, ErrBatchCorrupt},
		{"version", append([]byte{3}, good[1:]...), ErrBatchVersion},
		{"section truncated", cut, ErrBatchCorrupt},
		{"sections out of order", append(bytes.Clone(withStmts), 1, 0), ErrBatchCorrupt},
		{"bad statements", append(append([]byte{2}, good[1:]...), 1, 3, 0, 1, 0), ErrBatchCorrupt},
		{"bad string ref", append(append([]byte{2}, good[1:]...), 1, 7, 1, 1, 'x', 1, 1, 5, 0), ErrBatchCorrupt},
		{"literal subject", append(append([]byte{2}, good[1:]...), 1, 8, 1, 1, 'x', 1, 3, 0, 0, 1, 0), ErrBatchCorrupt},
		{"truncated", good[:len(good)-1], ErrBatchCorrupt},
		{"trailing", append(bytes.Clone(good), 0), ErrBatchCorrupt},
		{"oversized", make([]byte, MaxRecordBytes+1), ErrBatchCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := DecodeRecord(tt.b); !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
		})
	}
}

func FuzzDecodeRecord(f *testing.F) {
	for _, r := range sampleRecords() {
		f.Add(AppendRecord(nil, &r))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRecord(b)
		if err != nil {
			return
		}
		// The encoding is canonical after one round trip.
		once := AppendRecord(nil, &r)
		r2, err := DecodeRecord(once)
		if err != nil {
			t.Fatalf("re-decoding: %v", err)
		}
		if twice := AppendRecord(nil, &r2); !bytes.Equal(once, twice) {
			t.Fatalf("encoding not canonical:\n%x\n%x", once, twice)
		}
	})
}

// TestRecordSections: a version 2 record with a section of a later version
// decodes, the section skipped; version 1 and 2 records without statements
// decode alike.
func TestRecordSections(t *testing.T) {
	r := sampleRecords()[2]
	b := AppendRecord(nil, &r)
	later := append(bytes.Clone(b), 9, 3, 'n', 'e', 'w')
	got, err := DecodeRecord(later)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Statements, r.Statements) {
		t.Fatalf("statements %v, want %v", got.Statements, r.Statements)
	}
	v1 := AppendRecord(nil, &sampleRecords()[0])
	v2 := append([]byte{2}, v1[1:]...)
	a, err1 := DecodeRecord(v1)
	c, err2 := DecodeRecord(v2)
	if err1 != nil || err2 != nil || !reflect.DeepEqual(a, c) {
		t.Fatalf("v1 %v %v, v2 %v %v", a, err1, c, err2)
	}
}
