package scale

import (
	"testing"
	"time"

	"github.com/micra-net/micra/internal/p2ptest"
)

// TestRun: a small network in virtual time converges, delegates every
// subnet asked at a bounded cost in messages and mostly to the nearest
// node, idles at a bounded cost in bytes, resolves, rejects no node's
// (true) probe claims, and after a tenth of its nodes left without a word
// loses and doubles nothing.
func TestRun(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("a network of 20 overlays; not with -short or -race")
	}
	p2ptest.Bubble(t, func(t *testing.T) {
		// The world's RTTs between nodes (WorldRTTs). With what the
		// overlays measure, the default, one run in CI had the claim check
		// reject an honest claim, which ClaimsRejected == 0 forbids, and 7
		// of 110 runs on the real matrix missed the excess bound below
		// (3.4–5.9 ms per URL); docs/delegation.md, "The running overlay
		// against the benchmark".
		res, err := Run(t, Config{Nodes: 20, Subnets: 100, Churn: 0.1, Seed: 1, Liveness: time.Minute, Idle: 2 * time.Minute, WorldRTTs: true, Log: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", res)
		if res.Delegations != 100 || res.Lost != 0 || res.Doubled != 0 || res.ClaimsRejected != 0 || res.HopsP50 <= 0 || res.IdleBytesPerHour <= 0 || res.IdleHeldBytesPerHour <= 0 {
			t.Fatalf("%+v", res)
		}
		// docs/scale.md: 18–20 messages per delegation at 20 nodes since
		// claims are confirmed by their replica sets (60 with a lookup
		// before each claim, 157 with one per maintenance round), idle
		// upkeep of a megabyte or two per node per hour (31 then).
		// A resolve that misses the caches: one RESOLVE, a redirect or a
		// walk of a few DHT queries at most (the routing table's refresh
		// is not counted).
		if res.HopsP90 > 6 {
			t.Errorf("hops p90 %.0f, want ≤ 6", res.HopsP90)
		}
		// The decisions' quality against the latency model's oracle
		// (internal/evaluate's definitions): 97 % optimal, 0.13 ms excess
		// per URL; the floor leaves room for the order in which concurrent
		// decisions see each other's probes.
		if res.OptimalPct < 85 || res.ExcessPerURLMS > 3 {
			t.Errorf("%.1f %% optimal (want ≥ 85), %.2f ms excess per URL (want ≤ 3)", res.OptimalPct, res.ExcessPerURLMS)
		}
		if res.MessagesPerDelegation > 30 || res.IdleBytesPerHour > 5e6 || res.IdleHeldBytesPerHour > 10e6 {
			t.Errorf("%.1f messages per delegation (want ≤ 30), %.0f idle bytes per node per hour (want ≤ 5 MB), %.0f holding the delegations (want ≤ 10 MB)",
				res.MessagesPerDelegation, res.IdleBytesPerHour, res.IdleHeldBytesPerHour)
		}
	})
}
