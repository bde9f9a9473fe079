package overlay

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// TestReplicaSetCopies checks that a replica set can be changed without
// changing the closest list it came from: that list is the cached one
// every request and ownership check reads (maintenance once dropped failed
// replicas from it in place, which raced with those readers and left
// empty peer IDs in the cache).
func TestReplicaSetCopies(t *testing.T) {
	c := &coordinator{cfg: &config{replication: 3}}
	peers := []peer.ID{"a", "b", "c", "d", "e"}
	orig := slices.Clone(peers)
	set := c.replicaSet(peers)
	if !slices.Equal(set, peers[:3]) {
		t.Fatalf("replica set %v, want %v", set, peers[:3])
	}
	set = slices.DeleteFunc(set, func(p peer.ID) bool { return p == "b" })
	if !slices.Equal(peers, orig) {
		t.Fatalf("dropping a replica changed the closest list: %v, was %v", peers, orig)
	}
	if got := c.replicaSet(peers[:2]); len(got) != 2 {
		t.Fatalf("replica set of 2 peers has %d", len(got))
	}
}

// TestCoordinatorAddressesGone: a node whose cached coordinator it can no
// longer dial (not connected, its addresses expired from the peerstore, as
// 15 minutes after a connection closes) finds it through a reachable peer
// near the key, whose redirect carries the addresses, without a DHT
// lookup of the key.
func TestCoordinatorAddressesGone(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		const n = 8
		site := netip.MustParseAddr("127.2.9.9")
		tree := mustTree(t)
		nodes := r.swarm(n)
		ref := nodes[0].o.coord.rangeShard(tree.SmallestNonUnary(site))
		order := nearestFirst(nodes, ref.key(tree.ID()))
		coord, asker := order[0], order[n-1]
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if _, err := asker.o.Delegate(ctx, "http://"+site.String()+"/", site); err != nil {
			t.Fatal(err)
		}
		key := ref.key(tree.ID())
		asker.o.mu.Lock()
		cached := asker.o.coordFor[key]
		asker.o.mu.Unlock()
		if cached != coord.h.ID() {
			t.Fatalf("the asker's coordinator of the shard: %v, want %v", cached, coord.h.ID())
		}
		// Forget how to reach it.
		_ = asker.h.Network().ClosePeer(coord.h.ID())
		asker.h.Peerstore().ClearAddrs(coord.h.ID())
		asker.o.Invalidate(tree.Range(tree.SmallestNonUnary(site)))
		st := asker.o.Stats()
		d, ok, err := asker.o.Resolve(ctx, site)
		if err != nil || !ok || d.Node != asker.h.ID() {
			t.Fatalf("resolve: %+v, %v, %v", d, ok, err)
		}
		after := asker.o.Stats()
		if after.Lookups != st.Lookups {
			t.Errorf("%d DHT lookups to find the coordinator again, want 0", after.Lookups-st.Lookups)
		}
		// One redirect or two (none when the coordinator happened to
		// connect again meanwhile).
		if r := after.Redirects - st.Redirects; r > 2 {
			t.Errorf("%d redirects, want at most 2", r)
		}
	})
}
