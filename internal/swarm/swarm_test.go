package swarm

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/internal/world/worldtest"
)

// TestDecide starts a swarm of four nodes on a small world and has it
// delegate every site: each goes to one of the swarm's nodes, a site in a
// node's own subnet to that node, the searches probed, and a second
// delegation of a site finds the first.
func TestDecide(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four nodes")
	}
	run := worldtest.Start(t, worldtest.Params(2, 40, 4), world.TimeScale(0.05))
	w := run.World()
	tree, err := w.Tree(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	s, err := Start(ctx, run, tree, Config{Dir: t.TempDir(), Scale: 0.05, Threshold: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	if len(s.Nodes) != len(w.Nodes()) {
		t.Fatalf("%d nodes, the world has %d", len(s.Nodes), len(w.Nodes()))
	}
	var sites []world.Site
	for _, st := range w.Sites() {
		if st.Hostile == world.NotHostile && st.Kind != world.CDNSite {
			sites = append(sites, st)
		}
	}
	a, err := s.Delegate(ctx, run, sites)
	if err != nil {
		t.Fatal(err)
	}
	own := map[string]Node{}
	addrs := w.NodeAddrs()
	for _, n := range s.Nodes {
		own[tree.Range(tree.SmallestNonUnary(n.Addr)).String()] = *n
	}
	optimal := 0
	for _, st := range sites {
		got, ok := a.Node[st.ID]
		if !ok || !slices.Contains(addrs, got) {
			t.Fatalf("site %s went to %v, not a node", st.Name, got)
		}
		if n, mine := own[tree.Range(tree.SmallestNonUnary(st.Addrs[0])).String()]; mine && got != n.Addr {
			t.Errorf("site %s in %s's own subnet went to %s", st.Name, n.Addr, got)
		}
		if _, best, _ := w.Optimal(st, addrs); w.RTT(got, st) <= best+10*time.Microsecond {
			optimal++
		}
	}
	if a.Probes <= 0 {
		t.Errorf("%d probes for %d sites", a.Probes, len(sites))
	}
	t.Logf("%d sites, %d optimal, %d probes", len(sites), optimal, a.Probes)
	again, err := s.Delegate(ctx, run, sites[:5])
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sites[:5] {
		if again.Node[st.ID] != a.Node[st.ID] {
			t.Errorf("site %s went to %s, then to %s", st.Name, a.Node[st.ID], again.Node[st.ID])
		}
	}
	if again.Probes != 0 {
		t.Errorf("delegating held subnets again probed %d times", again.Probes)
	}
}
