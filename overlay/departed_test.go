package overlay

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestShardOutlivesCoordinatorAndReplica: when a shard's coordinator and
// one of its replicas leave together without a word, the remaining
// replica's state is taken over and the shard's subnets still resolve to
// their node. (At network size such shards were lost when their state
// outgrew one badger transaction, which TestStoreEntriesLargerThanATransaction
// covers; this swarm's shard is small, so the test guards the path.)
func TestShardOutlivesCoordinatorAndReplica(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		// A volunteer's closest-list lifetime: views are not refreshed
		// by lookups every few seconds, as swarmOpts' would be.
		nodes := r.swarm(10, Maintenance(time.Second, 5*time.Minute))
		tree := mustTree(t)
		holder := nodes[0]
		// A site whose shard's coordinator and first replica are neither
		// the holder nor the node that will ask.
		var site netip.Addr
		var set []*node
		for x := 1; x < 250 && !site.IsValid(); x++ {
			a := netip.AddrFrom4([4]byte{127, byte(x % 4), byte(x), 7})
			s := nearestFirst(nodes, holder.o.coord.rangeShard(tree.SmallestNonUnary(a)).key(tree.ID()))[:3]
			if !slices.Contains(s[:2], holder) && !slices.Contains(s[:2], nodes[1]) {
				site, set = a, s
			}
		}
		if !site.IsValid() {
			t.Fatal("no site with a suitable replica set")
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		if _, err := holder.o.Delegate(ctx, "http://"+site.String()+"/", site); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second) // replicated
		for _, n := range set[:2] {
			r.net.Cut(n.addr)
			n.stop()
		}
		eventually(t, 5*time.Minute, func() error {
			d, ok, err := nodes[1].o.Resolve(ctx, site)
			if err != nil || !ok || d.Node != holder.h.ID() {
				return fmt.Errorf("%s resolves to %v (found %v), %v; want the holder %s", site, d.Node, ok, err, holder.h.ID())
			}
			return nil
		})
	})
}

// TestShardTakenOverByNewNearest: when a shard's coordinator leaves, with
// the only crawler of the shard, and a node that holds no replica is now
// nearest its key (it joined since), the replicas hand it the state and it
// takes the shard over by itself: no crawler's heartbeat or request
// reaches it, and without the takeover the departed crawler would keep its
// subnet until one did. The new coordinator then orphans the subnet and
// delegates it to a live node.
func TestShardTakenOverByNewNearest(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		nodes := r.swarm(8, Maintenance(time.Second, 5*time.Minute))
		tree := mustTree(t)
		// A shard of 127/8 whose coordinator is not too near its key
		// (the newcomer below must be nearer: a random key is nearer
		// than one sharing the key's first b bits about once in 2^b
		// tries); its holder and the node that asks at the end are
		// outside its replica set.
		var site netip.Addr
		var key [32]byte
		shared := 257
		for k := range 32 {
			a := netip.AddrFrom4([4]byte{127, byte(k), 9, 7})
			kk := nodes[0].o.coord.rangeShard(tree.SmallestNonUnary(a)).key(tree.ID())
			c := nearestFirst(nodes, kk)[0]
			if b := kb.CommonPrefixLen(kb.ConvertPeerID(c.h.ID()), kb.ConvertKey(string(kk[:]))); b < shared {
				site, key, shared = a, kk, b
			}
		}
		if shared > 7 {
			t.Fatalf("every shard's coordinator shares %d or more bits with its key", shared)
		}
		order := nearestFirst(nodes, key)
		coord, holder, asker := order[0], order[3], order[4]
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		if _, err := holder.o.Delegate(ctx, "http://"+site.String()+"/", site); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second) // replicated
		// A newcomer nearer the key than every node, the coordinator too.
		var sk crypto.PrivKey
		for range 1000 {
			k, pub, err := crypto.GenerateEd25519Key(nil)
			if err != nil {
				t.Fatal(err)
			}
			id, err := peer.IDFromPublicKey(pub)
			if err != nil {
				t.Fatal(err)
			}
			if closer(id, coord.h.ID(), key) {
				sk = k
				break
			}
		}
		if sk == nil {
			t.Fatal("no key nearer the shard than its coordinator")
		}
		for _, n := range []*node{coord, holder} {
			r.net.Cut(n.addr)
			n.stop()
		}
		newcomer := r.nodeWith(nodeAddr(len(nodes)), sk, nil, Maintenance(time.Second, 5*time.Minute))
		joinSwarm(t, []*node{asker, newcomer})
		// No request: the newcomer must take the shard over by itself.
		eventually(t, 3*time.Minute, func() error {
			newcomer.o.coord.mu.Lock()
			sh, ok := newcomer.o.coord.shards[key]
			newcomer.o.coord.mu.Unlock()
			if !ok {
				return fmt.Errorf("the newcomer holds nothing of the shard")
			}
			sh.mu.Lock()
			defer sh.mu.Unlock()
			if !sh.owned {
				return fmt.Errorf("the newcomer holds the shard's state (epoch %d) but has not claimed it", sh.meta.GetEpoch())
			}
			return nil
		})
		eventually(t, time.Minute, func() error {
			asker.o.Invalidate(tree.Range(tree.SmallestNonUnary(site))) // what the shard says, not the asker's cache
			d, ok, err := asker.o.Resolve(ctx, site)
			if err != nil || !ok || d.Node == holder.h.ID() || d.Node == coord.h.ID() {
				return fmt.Errorf("%s resolves to %+v (found %v), %v; want a live node", site, d, ok, err)
			}
			return nil
		})
	})
}
