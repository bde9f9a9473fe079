package overlay

import (
	"crypto/sha256"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/peer"
	pstore "github.com/libp2p/go-libp2p/p2p/host/peerstore"
)

// randomPeers returns n distinct peer IDs, fixed by seed.
func randomPeers(t testing.TB, n int, seed uint64) []peer.ID {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]peer.ID, n)
	for i := range out {
		var b [32]byte
		for j := range b {
			b[j] = byte(rng.UintN(256))
		}
		id, err := peer.IDFromBytes(append([]byte{0x00, 0x24, 0x08, 0x01, 0x12, 0x20}, b[:]...)) // identity multihash of an ed25519 key
		if err != nil {
			t.Fatal(err)
		}
		out[i] = id
	}
	return out
}

// TestKadIDsNearest: kadIDs.nearest orders as kbucket does (SHA-256 of
// the peer ID against SHA-256 of the key), drops repeats, and keeps n.
func TestKadIDsNearest(t *testing.T) {
	var ids kadIDs
	for seed := range uint64(20) {
		ps := randomPeers(t, 1+int(seed)*13, seed)
		ps = append(ps, ps[:len(ps)/3]...) // repeats
		var key [32]byte
		key[0], key[31] = byte(seed), byte(seed*7)
		want := kb.SortClosestPeers(dedupe(slices.Clone(ps)), kb.ConvertKey(string(key[:])))
		for _, n := range []int{1, 6, 20, 1000} {
			got := ids.nearest(ps, kadKey(key), n)
			w := want[:min(n, len(want))]
			if !slices.Equal(got, w) {
				t.Fatalf("seed %d, n %d: got %v, want %v", seed, n, got, w)
			}
		}
	}
	if got := ids.nearest(randomPeers(t, 3, 99), [32]byte{}, 0); len(got) != 0 {
		t.Errorf("n 0: got %v", got)
	}
	if id := ids.of("x"); id != sha256.Sum256([]byte("x")) {
		t.Errorf("of: not SHA-256 of the peer ID")
	}
}

// BenchmarkNearest compares the view's nearest-peer step as it was (the
// routing table's NearestPeers, then go-libp2p-kbucket's SortClosestPeers of
// the union with a cached list) with the union ordered by kadIDs, on a
// routing table filled from 1,000 peers (what its buckets of 20 take) and
// a cached list of 20:
// go test ./overlay -run '^$' -bench Nearest -benchmem
func BenchmarkNearest(b *testing.B) {
	ps := randomPeers(b, 1020, 7)
	self := ps[0]
	rt, err := kb.NewRoutingTable(20, kb.ConvertPeerID(self), time.Hour, pstore.NewMetrics(), time.Hour, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range ps[1:1001] {
		_, _ = rt.TryAddPeer(p, true, false) // refused when its bucket is full
	}
	b.Logf("routing table: %d peers", rt.Size())
	found := ps[1000:]
	keys := make([][32]byte, 64)
	for i := range keys {
		keys[i] = sha256.Sum256([]byte{byte(i)})
	}
	b.Run("kbucket", func(b *testing.B) {
		i := 0
		for b.Loop() {
			key := keys[i%len(keys)]
			i++
			peers := append(slices.Clone(found), rt.NearestPeers(kb.ConvertKey(string(key[:])), 6)...)
			peers = kb.SortClosestPeers(dedupe(append(peers, self)), kb.ConvertKey(string(key[:])))
			_ = peers[:min(20, len(peers))]
		}
	})
	b.Run("kadIDs", func(b *testing.B) {
		var ids kadIDs
		i := 0
		for b.Loop() {
			key := keys[i%len(keys)]
			i++
			peers := append(slices.Clone(found), rt.NearestPeers(kb.ConvertKey(string(key[:])), 6)...)
			_ = ids.nearest(append(peers, self), kadKey(key), 20)
		}
	})
}
