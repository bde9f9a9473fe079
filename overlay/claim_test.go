package overlay

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestClaimConfirmedByReplicas: a node whose view misses the peer truly
// closest to a shard key (one that joined a moment ago, say) claims the
// shard without a DHT lookup, and the replicas it asks, which know that
// peer, refuse before promising and name it: the claimant gives the shard
// up to it, and a request that reaches the claimant is decided by the
// closest peer, whose own claim its replicas confirm.
func TestClaimConfirmedByReplicas(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		// Maintenance only when the test runs it: the view it sets stays.
		nodes := r.swarm(8, Maintenance(time.Hour, time.Hour))
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		tree := mustTree(t)
		a := netip.MustParseAddr("127.1.200.9")
		ref := nodes[0].o.coord.rangeShard(tree.SmallestNonUnary(a))
		key := ref.key(tree.ID())

		byID := map[peer.ID]*node{}
		ids := make([]peer.ID, len(nodes))
		for i, nd := range nodes {
			byID[nd.h.ID()] = nd
			ids[i] = nd.h.ID()
		}
		sorted := kb.SortClosestPeers(ids, kb.ConvertKey(string(key[:])))
		closest, claimant := byID[sorted[0]], byID[sorted[1]]
		replicas := []*node{byID[sorted[2]], byID[sorted[3]]} // the claimant's set, after itself
		for _, rp := range replicas {
			if err := rp.h.Connect(ctx, peer.AddrInfo{ID: closest.h.ID(), Addrs: closest.h.Addrs()}); err != nil {
				t.Fatal(err)
			}
		}
		setView(claimant, key, sorted[1:])
		at := func(n *node) time.Time {
			n.o.coord.mu.Lock()
			defer n.o.coord.mu.Unlock()
			return n.o.coord.closest[key].at
		}
		before := at(claimant)

		_, err := claimant.o.coord.ensureOwner(ctx, ref)
		var nc *notCoordinatorError
		if !errors.As(err, &nc) || nc.closer.ID != closest.h.ID() {
			t.Fatalf("claim with a view missing the closest peer: %v, want a refusal naming %s", err, closest.h.ID())
		}
		if !at(claimant).Equal(before) {
			t.Fatal("the claimant looked the key up")
		}
		for _, rp := range replicas {
			rp.o.coord.mu.Lock()
			sh := rp.o.coord.shards[key]
			rp.o.coord.mu.Unlock()
			if sh != nil && sh.meta.GetPromised() > 0 {
				t.Fatalf("replica %s promised epoch %d to a claimant it refused", rp.addr, sh.meta.GetPromised())
			}
		}

		// A requester whose view leads to the claimant is redirected to the
		// closest peer, which claims and decides.
		asker := byID[sorted[len(sorted)-1]]
		setView(asker, key, sorted[1:])
		setView(claimant, key, sorted[1:])
		d, err := asker.o.Delegate(ctx, "http://"+a.String()+"/", a)
		if err != nil {
			t.Fatal(err)
		}
		if d.Writer != closest.h.ID() {
			t.Fatalf("decided by %s, want the closest peer %s", d.Writer, closest.h.ID())
		}
		closest.o.coord.mu.Lock()
		sh := closest.o.coord.shards[key]
		closest.o.coord.mu.Unlock()
		sh.mu.Lock()
		owned, epoch := sh.owned, sh.meta.GetEpoch()
		sh.mu.Unlock()
		if !owned || epoch == 0 {
			t.Fatalf("the closest peer holds the shard: owned %v, epoch %d", owned, epoch)
		}
	})
}
