package crawl

import (
	"bytes"
	"errors"
	"reflect"
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
	tests := []struct {
		name string
		b    []byte
		err  error
	}{
		{"empty", nil, ErrBatchCorrupt},
		{"version", append([]byte{2}, good[1:]...), ErrBatchVersion},
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
