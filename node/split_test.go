package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/internal/world/worldtest"
	"github.com/micra-net/micra/node"
)

// TestFarFetchesConfirmedByProbe: a node whose first fetches of a server
// read far from the probe it won the server's range with probes the
// server before it has the part holding it searched apart, and answers
// the search with that probe. The fetches of TestNodeJoinCrawlRestart's
// flake are replayed: a server in the same place as the one the range was
// decided for, fetched in 2.6 times the won probe (a GET's first byte,
// timed in the crawl's first burst on a loaded machine). Its probe reads
// near, so the range stays whole with its node. Answering with the
// fetches, the node lost the part to the other node, farther from the
// server, after it had fetched its pages. A server that did get farther
// (the node's access link slowed) still has its part searched apart, and
// the other node wins it.
func TestFarFetchesConfirmedByProbe(t *testing.T) {
	// A slower clock than TestNodeJoinCrawlRestart's: a millisecond of the
	// machine's delays is 5 ms of the world's, not 20, so that a probe
	// reads near for a near server on a loaded machine too.
	run := worldtest.Start(t, worldtest.Params(21, 12, 3), world.TimeScale(0.2))
	w := run.World()
	tree, err := w.Tree(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Two servers of one range, in one place, at different addresses.
	var near, far world.Site
	nodes := w.Nodes()
	sites := w.Sites()
pair:
	for i, s := range sites {
		for _, u := range sites[i+1:] {
			if s.Hostile != world.NotHostile || u.Hostile != world.NotHostile || s.Flaky || u.Flaky || s.Addrs[0] == u.Addrs[0] ||
				tree.SmallestNonUnary(s.Addrs[0]) != tree.SmallestNonUnary(u.Addrs[0]) ||
				w.RTT(nodes[0].Addr, s) != w.RTT(nodes[0].Addr, u) || w.RTT(nodes[1].Addr, s) != w.RTT(nodes[1].Addr, u) {
				continue
			}
			near, far = s, u
			break pair
		}
	}
	if near.Name == "" {
		t.Fatal("the world has no two servers of one range in one place")
	}

	a := testNode(t, run, 0, t.TempDir(), nil)
	defer a.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := a.Join(ctx); err != nil {
		t.Fatal(err)
	}
	b := testNode(t, run, 1, t.TempDir(), a.Addrs())
	defer b.Close()
	if err := b.Join(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*node.Node{a, b} {
		waitUntil(t, "own subnet claimed", func() error {
			for _, d := range n.Overlay().Owned() {
				if d.Own {
					return nil
				}
			}
			return fmt.Errorf("%s holds no own subnet", n.ID())
		})
	}

	// The range is decided for near.
	d, err := a.Overlay().Delegate(ctx, run.URL(near), near.Addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	holder, other, at := a, b, nodes[0].Addr
	if d.Node == b.ID() {
		holder, other, at = b, a, nodes[1].Addr
	}
	var won time.Duration
	waitUntil(t, "the holder knows what it won the range with", func() error {
		h, ok := holder.Overlay().Cached(far.Addrs[0])
		if !ok || h.Node != holder.ID() {
			return fmt.Errorf("holder's view of %v: %+v (%v)", far.Addrs[0], h, ok)
		}
		var known bool
		if won, known = holder.Overlay().WonRTT(d.Subnet); !known {
			return fmt.Errorf("%s won with an unknown RTT", d.Subnet)
		}
		return nil
	})
	ref := time.Duration(float64(won) * run.TimeScale()) // as the crawl times fetches
	t.Logf("%s decided for %s (%v) to %s, won with %v; %s at %v: %v from node 0, %v from node 1", d.Subnet, near.Name, near.Addrs[0], d.Node, won,
		far.Name, far.Addrs[0], w.RTT(nodes[0].Addr, far), w.RTT(nodes[1].Addr, far))

	signal := crawl.Slow{Page: run.URL(far), Addr: far.Addrs[0], RTT: ref * 26 / 10, Baseline: ref, Count: 2, Far: true}
	if got, split, err := holder.SplitFar(ctx, signal); err != nil || split {
		t.Fatalf("fetches read far, the server is not: split %v, part %s to %s, error %v", split, got.Subnet, got.Node, err)
	}
	for _, n := range []*node.Node{holder, other} {
		if got, ok, err := n.Overlay().Resolve(ctx, far.Addrs[0]); err != nil || !ok || got.Node != holder.ID() || got.Subnet != d.Subnet {
			t.Errorf("%s resolves %v to %s at %s (%v, %v), want %s at %s", n.ID(), far.Addrs[0], got.Node, got.Subnet, ok, err, holder.ID(), d.Subnet)
		}
	}

	// The holder's access link slows: the server is far now, and the
	// probe says so.
	run.SetExtraRTT(at, 10*won)
	defer run.SetExtraRTT(at, 0)
	got, split, err := holder.SplitFar(ctx, signal)
	if err != nil || !split {
		t.Fatalf("the server got far: split %v, error %v", split, err)
	}
	if got.Node != other.ID() || got.Subnet == d.Subnet || !d.Subnet.ContainsRange(got.Subnet) || !got.Subnet.Contains(far.Addrs[0]) || got.Subnet.Contains(near.Addrs[0]) {
		t.Errorf("far server's part: %s to %s, want a part of %s holding %v and not %v, to %s", got.Subnet, got.Node, d.Subnet, far.Addrs[0], near.Addrs[0], other.ID())
	}
}
