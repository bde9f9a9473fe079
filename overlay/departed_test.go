package overlay

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
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
		ids := make([]peer.ID, len(nodes))
		for i, n := range nodes {
			ids[i] = n.h.ID()
		}
		holder := nodes[0]
		// A site whose shard's coordinator and first replica are neither
		// the holder nor the node that will ask.
		var site netip.Addr
		var set []peer.ID
		for x := 1; x < 250 && !site.IsValid(); x++ {
			a := netip.AddrFrom4([4]byte{127, byte(x % 4), byte(x), 7})
			key := holder.o.coord.rangeShard(tree.SmallestNonUnary(a)).key(tree.ID())
			s := kb.SortClosestPeers(slices.Clone(ids), kb.ConvertKey(string(key[:])))[:3]
			if !slices.Contains(s[:2], holder.h.ID()) && !slices.Contains(s[:2], nodes[1].h.ID()) {
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
		for _, n := range nodes {
			if n.h.ID() == set[0] || n.h.ID() == set[1] {
				r.net.Cut(n.addr)
				n.stop()
			}
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
