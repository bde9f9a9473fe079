package overlay

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// TestReplicaConnectionsProtected: after a maintenance round, a shard's
// coordinator and replicas have the connection manager spare their
// connections to each other (a trimmed one costs a lookup per round), and
// a peer that left the replica set is spared no longer.
func TestReplicaConnectionsProtected(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		nodes := r.swarm(6, Maintenance(time.Hour, time.Hour))
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		a := netip.MustParseAddr("127.1.200.9")
		if _, err := nodes[5].o.Delegate(ctx, "http://"+a.String()+"/", a); err != nil {
			t.Fatal(err)
		}
		tree := mustTree(t)
		key := nodes[0].o.coord.rangeShard(tree.SmallestNonUnary(a)).key(tree.ID())
		var holders []*node
		for _, n := range nodes {
			n.o.coord.mu.Lock()
			_, held := n.o.coord.shards[key]
			n.o.coord.mu.Unlock()
			if held {
				holders = append(holders, n)
			}
		}
		if len(holders) < 2 {
			t.Fatalf("%d nodes hold the shard, want its replica set", len(holders))
		}
		for _, n := range holders {
			n.o.coord.maintain(ctx)
		}
		for _, n := range holders {
			set := n.o.coord.replicaSet(n.o.coord.view(key))
			if !slices.Contains(set, n.h.ID()) {
				continue
			}
			for _, p := range set {
				if p != n.h.ID() && !n.h.ConnManager().IsProtected(p, protectTag) {
					t.Errorf("%s: connection to replica-set peer %s not protected", n.addr, p)
				}
			}
		}
		// A peer no longer in any replica set of this node is released.
		n := holders[0]
		gone := nodes[5].h.ID()
		n.o.coord.protect(map[peer.ID]bool{gone: true})
		n.o.coord.protect(map[peer.ID]bool{})
		if n.h.ConnManager().IsProtected(gone, protectTag) {
			t.Errorf("%s still protected after leaving the replica sets", gone)
		}
	})
}
