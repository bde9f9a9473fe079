package subnet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"
)

func snapshotBytes(t testing.TB, tr *Tree) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := tr.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestSnapshotRoundTrip(t *testing.T) {
	tr, _ := build(t, figure72, "2|apnic|1|1|19700101|20130812|+1000\napnic|AU|ipv6|2405:db00::|32|20121130|allocated|A91\n")
	data := snapshotBytes(t, tr)
	back, err := DecodeSnapshot(data)
	if err != nil {
		t.Fatal(err)
	}
	if back.ID() != tr.ID() {
		t.Fatalf("id %s, want %s", back.ID(), tr.ID())
	}
	for id := range tr.All() {
		if tr.Node(id) != back.Node(id) || tr.Parent(id) != back.Parent(id) {
			t.Fatalf("node %d: %+v vs %+v", id, tr.Node(id), back.Node(id))
		}
	}
	m := back.Meta()
	if m.Built.IsZero() || m.BuildTime <= 0 || len(m.Sources) != 2 {
		t.Errorf("meta not kept: %+v", m)
	}
	// The id covers the content only: the same content built again has the
	// same id even though its metadata differs.
	again, _ := build(t, figure72, "2|apnic|1|1|19700101|20130812|+1000\napnic|AU|ipv6|2405:db00::|32|20121130|allocated|A91\n")
	if again.ID() != tr.ID() {
		t.Error("same content, different id")
	}
	other, _ := build(t, figure72)
	if other.ID() == tr.ID() {
		t.Error("different content, same id")
	}
}

func TestSnapshotRejectsCorruption(t *testing.T) {
	tr, _ := build(t, figure72)
	good := snapshotBytes(t, tr)
	tests := []struct {
		name string
		mut  func([]byte) []byte
	}{
		{"empty", func(b []byte) []byte { return nil }},
		{"bad magic", func(b []byte) []byte { b[0] ^= 0xff; return b }},
		{"future version", func(b []byte) []byte { b[8] = 99; return b }},
		{"truncated header", func(b []byte) []byte { return b[:20] }},
		{"truncated body", func(b []byte) []byte { return b[:len(b)-5] }},
		{"wrong id", func(b []byte) []byte {
			// The id follows magic, version and the length-prefixed meta.
			ml, n := binary.Uvarint(b[9:])
			b[9+n+int(ml)] ^= 1
			return b
		}},
		{"trailing garbage", func(b []byte) []byte { return append(b, 1, 2, 3) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeSnapshot(tc.mut(bytes.Clone(good)))
			if !errors.Is(err, ErrCorruptSnapshot) {
				t.Errorf("err = %v, want ErrCorruptSnapshot", err)
			}
		})
	}
	// Random single-byte corruption never panics and never yields a tree
	// with a different id than the file claims.
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 500; i++ {
		b := bytes.Clone(good)
		b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
		if back, err := DecodeSnapshot(b); err == nil && back.ID() != back.contentHash() {
			t.Fatalf("corruption %d decoded to an inconsistent tree", i)
		}
	}
}

// TestDecodeBodyValidates feeds hand-crafted bodies with valid hashes, so
// that the structural checks (not the hash) must catch them.
func TestDecodeBodyValidates(t *testing.T) {
	tr, _ := build(t, figure72)
	body := tr.encodeBody()
	if _, err := decodeBody(body); err != nil {
		t.Fatalf("valid body: %v", err)
	}
	// Swap two IPv4 start deltas so ranges are out of order or overlap.
	bad := [][]byte{
		append(bytes.Clone(body), 0),
		body[:len(body)-1],
	}
	for i, b := range bad {
		if _, err := decodeBody(b); !errors.Is(err, ErrCorruptSnapshot) {
			t.Errorf("bad body %d: err = %v", i, err)
		}
	}
}
