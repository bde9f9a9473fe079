package evaluate

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/subnet"
)

// decideInOverlay has cfg.Decide assign sites (ipmicra+ decided in a
// running overlay) and returns the assignment with one outcome per site,
// judged by the world's true RTTs; the probes are spread evenly over the
// sites (a running network counts them per node, not per decision).
func decideInOverlay(ctx context.Context, w *world.World, _ *subnet.Tree, nodes []netip.Addr, _ string, cfg CrawlConfig, sites []world.Site) (map[int]netip.Addr, []Outcome, error) {
	assign, probes, err := cfg.Decide(ctx, nodes, sites)
	if err != nil {
		return nil, nil, fmt.Errorf("deciding in the overlay: %w", err)
	}
	out := make([]Outcome, 0, len(sites))
	for i, s := range sites {
		n, ok := assign[s.ID]
		if !ok || !slices.Contains(nodes, n) {
			return nil, nil, fmt.Errorf("deciding in the overlay: site %s went to %v, not one of the %d nodes", s.Name, n, len(nodes))
		}
		_, best, _ := w.Optimal(s, nodes)
		o := Outcome{Site: s.ID, Node: n, RTT: w.RTT(n, s), Optimal: best, New: true}
		// The probes spread evenly, the remainder on the first sites, so
		// that the mean per site is exact.
		o.Probes = int(probes / int64(len(sites)))
		if int64(i) < probes%int64(len(sites)) {
			o.Probes++
		}
		out = append(out, o)
	}
	return assign, out, nil
}
