package overlay

import (
	"slices"
	"testing"
	"time"
)

// refreshEvery sets the routing table's refresh period (defaultRefresh
// outside tests).
func refreshEvery(d time.Duration) Option {
	return func(c *config) error { c.refresh = d; return nil }
}

// TestRefreshSpread: nodes started together refresh their routing tables
// at phases spread over the period, not in step as kad-dht's ticker had
// them, each about once a period, and the refreshes keep every bucket
// fresh.
func TestRefreshSpread(t *testing.T) {
	if raceEnabled {
		// 24 nodes' lookups for three periods: the longest test of the
		// package under the race detector. The loop's races are run there
		// by the swarms of ten, whose tables of fewer than lowPeers peers
		// refresh every lowPeersCheck (TestHoodSettlesHeldShards idles
		// through several).
		t.Skip("the refreshes' phases and counts are figures of the plain run; the race detector would see the refresh loop of every small swarm the same")
	}
	const n, period = 24, 20 * time.Second
	simulate(t, func(t *testing.T, r *rig) {
		nodes := r.swarm(n, refreshEvery(period))
		start := time.Now()
		first := make([]time.Duration, n) // since the join; 0: none yet
		for range 3 * period / time.Second {
			time.Sleep(time.Second)
			for i, nd := range nodes {
				if first[i] == 0 && nd.o.Stats().Refreshes > 0 {
					first[i] = time.Since(start)
				}
			}
		}
		end := time.Now()
		for i, nd := range nodes {
			// Phase in [0, period), then periods of 0.9 to 1.1 of it:
			// two or three in three periods (and a low-peer refresh now
			// and then where a table holds few peers).
			if got := nd.o.Stats().Refreshes; got < 2 || got > 6 {
				t.Errorf("node %d refreshed %d times in three periods, want 2 to 6", i, got)
			}
			// A refresh leaves no bucket older than half a period, and
			// refreshes come at most 1.1 periods apart. Past an empty
			// bucket c kad-dht refreshes only up to bucket 2(c+1), by
			// design (rtrefresh's doRefresh): buckets beyond it may
			// never have been refreshed, as in a swarm of 24 where two
			// nodes share more prefix bits than the table has
			// neighbours below them.
			rt := nd.o.dht.RoutingTable()
			gap := -1
			for cpl, at := range rt.GetTrackedCplsForRefresh() {
				if gap < 0 && rt.NPeersForCpl(uint(cpl)) == 0 {
					gap = cpl
				}
				if at.IsZero() && gap >= 0 && cpl > gap {
					continue
				}
				if age := end.Sub(at); age > 17*period/10 {
					t.Errorf("node %d: bucket %d (first empty bucket %d) last refreshed %v ago, want within 1.7 periods (%v)", i, cpl, gap, age, 17*period/10)
				}
			}
		}
		if slices.Contains(first, 0) {
			t.Fatalf("a node never refreshed: first refreshes %v", first)
		}
		// 24 phases drawn in [0, period) all fall in half of it with
		// probability about 24·2⁻²³.
		if spread := slices.Max(first) - slices.Min(first); spread < period/2 {
			t.Errorf("first refreshes within %v of each other (%v), want spread over at least half the period %v", spread, first, period)
		}
	})
}
