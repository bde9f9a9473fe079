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

	"github.com/micra-net/micra/subnet"
)

// setView makes n see peers as the peers closest to key, nearest first,
// until the view is cleared or maintenance looks again.
func setView(n *node, key [32]byte, peers []peer.ID) {
	c := n.o.coord
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closest[key] = closestEntry{peers: slices.Clone(peers), at: time.Now()}
}

// clearView drops n's cached view of key: its next lookup asks the DHT.
func clearView(n *node, key [32]byte) {
	c := n.o.coord
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.closest, key)
}

// holders returns the nodes whose Owned lists r.
func holders(nodes []*node, r subnet.Range) []peer.ID {
	var out []peer.ID
	for _, n := range nodes {
		for _, d := range n.o.Owned() {
			if d.Subnet == r {
				out = append(out, n.h.ID())
			}
		}
	}
	return out
}

// agreed checks that every node resolves a to one owner, want when it is
// not empty, and that exactly that node holds the subnet.
func agreed(ctx context.Context, nodes []*node, tree *subnet.Tree, a netip.Addr, want peer.ID) (peer.ID, error) {
	r := tree.Range(tree.SmallestNonUnary(a))
	owner := want
	for _, n := range nodes {
		n.o.Invalidate(r)
		d, ok, err := n.o.Resolve(ctx, a)
		if err != nil || !ok {
			return "", fmt.Errorf("%s resolves %s: ok=%v, %v", n.addr, r, ok, err)
		}
		if owner == "" {
			owner = d.Node
		}
		if d.Node != owner {
			return "", fmt.Errorf("%s resolves %s to %s, want %s", n.addr, r, d.Node, owner)
		}
	}
	if h := holders(nodes, r); len(h) != 1 || h[0] != owner {
		return "", fmt.Errorf("%s is held by %v, resolved to %s", r, h, owner)
	}
	return owner, nil
}

// TestSplitViewClaims forces the interleaving the DHT's lookups make rare:
// two peers whose views of the closest peers differ both find themselves
// closest to one shard, claim it at the same epoch with disjoint replica
// sets, each reaching a majority of its own, and each decides the same
// subnet for a different node (and one subnet of its own). When the views
// meet again, every node resolves every subnet to one owner, only that
// owner holds it, and neither side's other decision is lost, whichever
// side's claim and decisions ran first.
func TestSplitViewClaims(t *testing.T) {
	for _, order := range []string{"A first", "B first", "interleaved"} {
		t.Run(order, func(t *testing.T) {
			simulate(t, func(t *testing.T, r *rig) {
				splitViewClaims(t, r, order)
			})
		})
	}
}

func splitViewClaims(t *testing.T, r *rig, order string) {
	const n = 8
	// Maintenance only when the test runs it: the views it sets stay.
	nodes := r.swarm(n, Maintenance(time.Hour, time.Hour))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute) // virtual
	defer cancel()
	tree := mustTree(t)
	conflict := netip.MustParseAddr("127.1.200.9")
	onlyA, onlyB := netip.MustParseAddr("127.1.201.9"), netip.MustParseAddr("127.1.202.9")
	ref := nodes[0].o.coord.rangeShard(tree.SmallestNonUnary(conflict))
	key := ref.key(tree.ID())

	// Nodes by their true distance to the shard key. Side A: the truly
	// closest, the next two as its replicas, and a requester X; side B:
	// the farthest as its coordinator, two replicas and a requester Y.
	byID := map[peer.ID]*node{}
	ids := make([]peer.ID, n)
	for i, nd := range nodes {
		byID[nd.h.ID()] = nd
		ids[i] = nd.h.ID()
	}
	sorted := kb.SortClosestPeers(ids, kb.ConvertKey(string(key[:])))
	sideA := []peer.ID{sorted[0], sorted[1], sorted[2], sorted[3]}
	sideB := []peer.ID{sorted[7], sorted[4], sorted[5], sorted[6]}
	viewA := append(slices.Clone(sideA), sideB...)
	viewB := append(slices.Clone(sideB), sideA...)
	for _, p := range sideA {
		setView(byID[p], key, viewA)
	}
	for _, p := range sideB {
		setView(byID[p], key, viewB)
	}
	x, y := byID[sideA[3]], byID[sideB[3]]

	del := func(asker *node, a netip.Addr) Delegation {
		t.Helper()
		d, err := asker.o.Delegate(ctx, "http://"+a.String()+"/", a)
		if err != nil {
			t.Fatalf("%s delegating %s: %v", asker.addr, a, err)
		}
		return d
	}
	var dx, dy Delegation
	switch order {
	case "A first":
		dx = del(x, conflict)
		dy = del(y, conflict)
	case "B first":
		dy = del(y, conflict)
		dx = del(x, conflict)
	case "interleaved":
		done := make(chan Delegation)
		go func() { done <- del(y, conflict) }()
		dx = del(x, conflict)
		dy = <-done
	}
	if dx.Node != x.h.ID() || dy.Node != y.h.ID() || dx.Writer != sideA[0] || dy.Writer != sideB[0] || dx.Epoch != dy.Epoch {
		t.Fatalf("the split views did not split the decision: %s by %s (epoch %d), %s by %s (epoch %d)",
			dx.Node, dx.Writer, dx.Epoch, dy.Node, dy.Writer, dy.Epoch)
	}
	if da := del(x, onlyA); da.Node != x.h.ID() {
		t.Fatalf("side A's own subnet went to %s", da.Node)
	}
	if db := del(y, onlyB); db.Node != y.h.ID() {
		t.Fatalf("side B's own subnet went to %s", db.Node)
	}

	// The views meet: every node looks the shard up afresh and runs its
	// maintenance, as it would on its own timer.
	for _, nd := range nodes {
		clearView(nd, key)
	}
	var owner peer.ID
	var err error
	for round := 0; ; round++ { // a maintenance round a second, as with Maintenance(time.Second, …)
		for _, nd := range nodes {
			nd.o.coord.maintain(ctx)
		}
		time.Sleep(time.Second) // heartbeats reconcile what the nodes hold
		if owner, err = agreed(ctx, nodes, tree, conflict, ""); err == nil {
			if _, err = agreed(ctx, nodes, tree, onlyA, x.h.ID()); err == nil {
				if _, err = agreed(ctx, nodes, tree, onlyB, y.h.ID()); err == nil {
					break
				}
			}
		}
		if round%10 == 0 {
			t.Logf("round %d at %v: %v", round, time.Now().Format(time.TimeOnly), err)
		}
		if round == 60 {
			t.Fatalf("not agreed after %d maintenance rounds: %v", round, err)
		}
	}
	if owner != x.h.ID() && owner != y.h.ID() {
		t.Fatalf("the conflicting subnet went to %s, neither requester", owner)
	}
	t.Logf("%s: the conflicting subnet stays with %s's requester", order, map[bool]string{true: "A", false: "B"}[owner == x.h.ID()])
}
