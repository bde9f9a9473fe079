package overlay

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/micra-net/micra/internal/p2ptest"
	"github.com/micra-net/micra/overlay/pb"
)

func TestKeys(t *testing.T) {
	var k [32]byte
	k[0], k[31] = 0xff, '/'
	keys := map[string][]byte{
		"schema": schemaKey(),
		"meta":   shardMetaKey(k),
		"entry":  shardEntryKey(k, int32(pb.Entry_DELEGATION), []byte("a/b")),
		"mine":   mineKey(k),
		"owned":  ownedKey([]byte("a/b")),
	}
	for name, key := range keys {
		if !bytes.HasPrefix(key, []byte(Prefix)) {
			t.Errorf("%s key %q outside %s", name, key, Prefix)
		}
	}
	// Binary parts never add separators.
	if n := strings.Count(string(keys["entry"]), "/"); n != 6 {
		t.Errorf("entry key %q has %d separators, want 6", keys["entry"], n)
	}
	if !bytes.HasPrefix(keys["entry"], shardKindPrefix(k, int32(pb.Entry_DELEGATION))) ||
		!bytes.HasPrefix(shardKindPrefix(k, 1), shardEntriesPrefix(k)) ||
		bytes.HasPrefix(shardMetaKey(k), shardEntriesPrefix(k)) {
		t.Error("entry prefixes do not nest")
	}
}

func TestStoreEntries(t *testing.T) {
	st := newStore(memDB(t))
	if err := st.checkSchema(); err != nil {
		t.Fatal(err)
	}
	if err := st.checkSchema(); err != nil {
		t.Fatalf("second schema check: %v", err)
	}
	var key, other [32]byte
	other[0] = 1
	e := func(k string, epoch, seq uint64, v string) *pb.Entry {
		return &pb.Entry{Kind: pb.Entry_LOAD, Key: []byte(k), Value: []byte(v), Epoch: epoch, Seq: seq}
	}
	tests := []struct {
		name  string
		in    *pb.Entry
		want  string
		wrote int
	}{
		{"first", e("a", 1, 1, "v1"), "v1", 1},
		{"older seq ignored", e("a", 1, 0, "old"), "v1", 0},
		{"same version ignored", e("a", 1, 1, "same"), "v1", 0},
		{"newer seq", e("a", 1, 2, "v2"), "v2", 1},
		{"higher epoch wins over seq", e("a", 2, 1, "v3"), "v3", 1},
		{"lower epoch ignored", e("a", 1, 99, "v4"), "v3", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := st.putEntries(key, []*pb.Entry{tt.in})
			if err != nil || n != tt.wrote {
				t.Fatalf("putEntries = %d, %v; want %d", n, err, tt.wrote)
			}
			got, err := st.getEntry(key, pb.Entry_LOAD, []byte("a"))
			if err != nil || string(got.GetValue()) != tt.want {
				t.Fatalf("stored %q, %v; want %q", got.GetValue(), err, tt.want)
			}
		})
	}
	if _, err := st.putEntries(other, []*pb.Entry{e("b", 1, 1, "x"), {Kind: pb.Entry_PROBE, Key: []byte("c"), Epoch: 1, Seq: 2}}); err != nil {
		t.Fatal(err)
	}
	count := func(k [32]byte, kind pb.Entry_Kind) int {
		n := 0
		if err := st.scan(k, kind, func(*pb.Entry) bool { n++; return true }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if count(key, pb.Entry_UNKNOWN) != 1 || count(other, pb.Entry_UNKNOWN) != 2 || count(other, pb.Entry_PROBE) != 1 {
		t.Fatal("scans cross shards or kinds")
	}
	if err := st.saveMeta(key, &pb.ShardMeta{Epoch: 3}); err != nil {
		t.Fatal(err)
	}
	metas, err := st.allMetas()
	if err != nil || len(metas) != 1 || metas[key].GetEpoch() != 3 {
		t.Fatalf("allMetas = %v, %v", metas, err)
	}
	if m, err := st.loadMeta(other); err != nil || m != nil {
		t.Fatalf("loadMeta of a shard without header = %v, %v", m, err)
	}
	// Dropping a shard deletes its header and entries, and only its.
	if err := st.dropShard(key); err != nil {
		t.Fatal(err)
	}
	if m, err := st.loadMeta(key); err != nil || m != nil || count(key, pb.Entry_UNKNOWN) != 0 || count(other, pb.Entry_UNKNOWN) != 2 {
		t.Fatalf("after dropShard: header %v (%v), %d entries, %d of the other shard", m, err, count(key, pb.Entry_UNKNOWN), count(other, pb.Entry_UNKNOWN))
	}
}

// TestStoreEntriesLargerThanATransaction: a sync's chunk of a shard's
// state larger than one badger transaction holds (small memtables, as a
// simulated node's or a frugal volunteer's) is stored whole, in parts.
// With one transaction per list the takeover of a large shard failed with
// "Txn is too big" at every replica, and the shard was lost.
func TestStoreEntriesLargerThanATransaction(t *testing.T) {
	st := newStore(p2ptest.SimDB(t)) // 1 MB memtables: about 150 kB a transaction
	var key [32]byte
	var entries []*pb.Entry
	for i := range 2000 {
		entries = append(entries, &pb.Entry{Kind: pb.Entry_LOAD, Key: fmt.Appendf(nil, "k%04d", i), Value: bytes.Repeat([]byte{'v'}, 200), Epoch: 1, Seq: uint64(i + 1)})
	}
	// Half of them stored already: those are not counted again.
	if n, err := st.putEntries(key, entries[:1000]); err != nil || n != 1000 {
		t.Fatalf("first half: stored %d, %v; want 1000", n, err)
	}
	n, err := st.putEntries(key, entries)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1000 {
		t.Errorf("stored %d, want the 1000 new ones", n)
	}
	got := 0
	if err := st.scan(key, pb.Entry_LOAD, func(*pb.Entry) bool { got++; return true }); err != nil {
		t.Fatal(err)
	}
	if got != len(entries) {
		t.Errorf("%d entries stored, want %d", got, len(entries))
	}
}

// TestStoreScanPrefix: a prefix scan yields every entry whose key starts
// with the prefix, whatever the prefix's length in bits, and never fewer
// than a full scan filtered by it.
func TestStoreScanPrefix(t *testing.T) {
	st := newStore(memDB(t))
	var key [32]byte
	rng := rand.New(rand.NewPCG(1, 2))
	var entries []*pb.Entry
	for i := range 300 {
		k := make([]byte, 40)
		for j := range k {
			k[j] = []byte{0x00, 0x01, 0x80, 0xff}[rng.IntN(4)] // few values, high and low bits: long shared prefixes
		}
		entries = append(entries, &pb.Entry{Kind: pb.Entry_PROBE, Key: k, Value: []byte{byte(i)}, Epoch: 1, Seq: 1})
	}
	entries = append(entries, &pb.Entry{Kind: pb.Entry_LOAD, Key: entries[0].Key, Epoch: 1, Seq: 1})
	if _, err := st.putEntries(key, entries); err != nil {
		t.Fatal(err)
	}
	for n := range 41 {
		p := entries[rng.IntN(300)].Key[:n]
		want, got := 0, 0
		_ = st.scan(key, pb.Entry_PROBE, func(e *pb.Entry) bool {
			if bytes.HasPrefix(e.GetKey(), p) {
				want++
			}
			return true
		})
		_ = st.scanPrefix(key, pb.Entry_PROBE, p, func(e *pb.Entry) bool {
			if e.GetKind() != pb.Entry_PROBE {
				t.Fatalf("prefix %d bytes: an entry of kind %v", n, e.GetKind())
			}
			if bytes.HasPrefix(e.GetKey(), p) {
				got++
			}
			return true
		})
		if got != want || want == 0 {
			t.Errorf("prefix of %d bytes: %d entries, want %d (> 0)", n, got, want)
		}
	}
}
