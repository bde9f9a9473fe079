package overlay

import (
	"context"
	"testing"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/subnet"
)

// TestHoodCovers: a neighbourhood covers a key whose replica set's
// farthest peer shares a longer prefix with the key than the
// neighbourhood's edge, and one that found fewer than hoodSize peers
// covers every key.
func TestHoodCovers(t *testing.T) {
	var key [32]byte
	key[0] = 0x42
	k := kb.ConvertKey(string(key[:]))
	for i := range 64 {
		p := peer.ID(string(rune('a'+i%26)) + string(rune('A'+i/26)))
		cpl := kb.CommonPrefixLen(kb.ConvertPeerID(p), k)
		if !hoodCovers(cpl-1, p, key) || hoodCovers(cpl, p, key) || !hoodCovers(-1, p, key) {
			t.Errorf("peer with prefix length %d: covered at edge %d %v, at %d %v, at -1 %v",
				cpl, cpl-1, hoodCovers(cpl-1, p, key), cpl, hoodCovers(cpl, p, key), hoodCovers(-1, p, key))
		}
	}
}

// TestHoodSettlesHeldShards: in an idle swarm holding many shards, with a
// volunteer's upkeep rates, a coordinator re-checks the shards it holds
// with one lookup of its own neighbourhood per closest-list lifetime
// rather than one lookup per shard, and every shard keeps one coordinator,
// the live peer nearest its key. The hierarchy is a generated world's, so
// that the subnets fall in many shards.
func TestHoodSettlesHeldShards(t *testing.T) {
	size, subnets, idle := 20, 80, 30*time.Minute
	if raceEnabled || testing.Short() {
		size, subnets, idle = 10, 40, 15*time.Minute
	}
	const ttl = 5 * time.Minute
	p := world.DefaultParams()
	p.Seed, p.Nodes, p.Sites, p.Port = 3, size, 2*subnets, 0
	w, err := world.Generate(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := w.Tree(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	simulate(t, func(t *testing.T, r *rig) {
		r.tree = tree
		upkeep := []Option{Maintenance(15*time.Second, ttl), Liveness(30*time.Second, 5*time.Minute)}
		addrs := w.NodeAddrs()
		nodes := make([]*node, size)
		for i := range size {
			nodes[i] = r.nodeWith(addrs[i], nil, nil, append(upkeep, OwnAddress(addrs[i]))...)
		}
		joinSwarm(t, nodes)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Hour) // virtual
		defer cancel()
		seen := map[subnet.ID]bool{}
		for i, s := range w.Sites() {
			a := s.Addrs[0]
			if id := tree.SmallestNonUnary(a); seen[id] || len(seen) == subnets {
				continue
			} else {
				seen[id] = true
			}
			if _, err := nodes[i%size].o.Delegate(ctx, "http://"+a.String()+"/", a); err != nil {
				t.Fatalf("delegate %s: %v", a, err)
			}
		}
		// Past every list's lifetime, then half an hour of idle upkeep.
		time.Sleep(ttl + time.Minute)
		lookups := func() (n int64) {
			for _, nd := range nodes {
				n += nd.o.Stats().Lookups
			}
			return n
		}
		before := lookups()
		time.Sleep(idle)
		spent := lookups() - before

		ids := make([]peer.ID, size)
		for i, n := range nodes {
			ids[i] = n.h.ID()
		}
		owners := map[[32]byte][]peer.ID{}
		for _, n := range nodes {
			for _, sh := range n.o.coord.heldShards() {
				sh.mu.Lock()
				if sh.owned {
					owners[sh.key] = append(owners[sh.key], n.h.ID())
				}
				sh.mu.Unlock()
			}
		}
		coordinating := map[peer.ID]bool{}
		for key, os := range owners {
			want := kb.SortClosestPeers(ids, kb.ConvertKey(string(key[:])))[0]
			if len(os) != 1 || os[0] != want {
				t.Errorf("shard %x: coordinators %v, want only %s", key[:4], os, want)
			}
			coordinating[os[0]] = true
		}
		// A shard's own lookup per lifetime, against one of each
		// coordinator's neighbourhood.
		rounds := int64(idle / ttl)
		perShard, hoods := rounds*int64(len(owners)), rounds*int64(len(coordinating))
		t.Logf("%d nodes, %d subnets in %d shards coordinated by %d nodes: %d lookups in %v idle (a lookup per shard and lifetime: %d; a neighbourhood lookup per coordinator and lifetime: %d)",
			size, len(seen), len(owners), len(coordinating), spent, idle, perShard, hoods)
		if len(owners) < 2*len(coordinating) {
			t.Fatalf("%d shards coordinated by %d nodes: too few for the test to tell the lookups apart", len(owners), len(coordinating))
		}
		// The neighbourhood lookups and a quarter of the shards' own.
		if bound := hoods + perShard/4; spent > bound {
			t.Errorf("%d lookups in %v idle, want at most %d", spent, idle, bound)
		}
	})
}
