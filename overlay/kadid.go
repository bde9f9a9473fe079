package overlay

import (
	"bytes"
	"crypto/sha256"
	"slices"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"
)

// kadIDs caches peers' Kademlia IDs (SHA-256 of the peer ID, kad-dht's
// keyspace) and orders peers by XOR distance to a key without allocating
// per peer. A coordinator's maintenance orders the peers it knows near
// the key of every shard it holds every round (nearest); go-libp2p-kbucket's
// SortClosestPeers hashes every peer and allocates a distance per peer on
// each call, and with the routing table's NearestPeers it was a tenth of
// the 1,000-node simulation's allocations (docs/scale.md). Safe for
// concurrent use; bounded by maxKadIDs (emptied when full).
type kadIDs struct {
	mu sync.Mutex
	m  map[peer.ID][32]byte
}

// maxKadIDs bounds the cache: a routing table, the peers of the cached
// closest lists and of a round's lookups fit many times over.
const maxKadIDs = 8192

// kadKey is a shard key's place in the DHT's keyspace (kbucket.ConvertKey).
func kadKey(key [32]byte) [32]byte { return sha256.Sum256(key[:]) }

// of returns p's Kademlia ID (kbucket.ConvertPeerID).
func (k *kadIDs) of(p peer.ID) [32]byte {
	k.mu.Lock()
	id, ok := k.m[p]
	k.mu.Unlock()
	if ok {
		return id
	}
	id = sha256.Sum256([]byte(p))
	k.mu.Lock()
	if k.m == nil || len(k.m) >= maxKadIDs {
		k.m = make(map[peer.ID][32]byte, 256)
	}
	k.m[p] = id
	k.mu.Unlock()
	return id
}

type kadPeer struct {
	d [32]byte // XOR distance to the target
	p peer.ID
}

func xorDist(a, b [32]byte) (d [32]byte) {
	for i := range d {
		d[i] = a[i] ^ b[i]
	}
	return d
}

// nearest returns the n peers of ps nearest target, nearest first, each
// once. ps is not changed.
func (k *kadIDs) nearest(ps []peer.ID, target [32]byte, n int) []peer.ID {
	if n <= 0 {
		return nil
	}
	best := make([]kadPeer, 0, min(n, len(ps))+1)
	for _, p := range ps {
		e := kadPeer{d: xorDist(k.of(p), target), p: p}
		if len(best) == n && bytes.Compare(e.d[:], best[n-1].d[:]) >= 0 {
			continue
		}
		i, found := slices.BinarySearchFunc(best, e, func(a, b kadPeer) int { return bytes.Compare(a.d[:], b.d[:]) })
		if found {
			continue // the same peer again
		}
		best = slices.Insert(best, i, e)
		if len(best) > n {
			best = best[:n]
		}
	}
	out := make([]peer.ID, len(best))
	for i, e := range best {
		out[i] = e.p
	}
	return out
}
