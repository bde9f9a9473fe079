package evaluate

import (
	"context"
	"testing"
	"time"
)

// TestGeoMeasured bounds the guided search at 100 nodes on real structure
// as a running network sees it (docs/delegation.md, "Which noise costs
// what"): the density tolerance, the inter-node RTTs with the noise the
// demo's measurements fit (×e^N(0, 0.012²) + |N(0, (1.5 ms)²)|), and each
// probe the least of three samples of the world's per-request jitter.
// Published: 86.4 % optimal, 2.52 probes per new subnet, 1.50 ms excess
// per URL.
func TestGeoMeasured(t *testing.T) {
	t.Parallel()
	dir, dbip := geoData(t)
	g, info, err := LoadGeo(context.Background(), GeoConfig{Path: dbip, Sites: 1000, Seed: 1, Nodes: 100, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Nodes, cfg.Thresholds, cfg.Strategies = []int{100}, []time.Duration{50 * time.Millisecond}, []string{Guided}
	cfg.Density, cfg.RTTNoise, cfg.RTTJitter = true, 0.012, 1500*time.Microsecond
	res, err := Split(context.Background(), g, info.Tree, JitterProber{World: g, Seed: 1}, cfg)
	if err != nil || len(res) != 1 {
		t.Fatalf("%v, %d results", err, len(res))
	}
	s := res[0].Stats
	t.Logf("%.1f %% optimal, %.2f probes per new subnet, %.2f ms excess per URL", s.OptimalPct, s.ProbesPerNew, s.ExcessPerURLMS)
	if s.OptimalPct < 85 || s.ProbesPerNew > 2.6 || s.ExcessPerURLMS > 1.7 {
		t.Errorf("100 nodes as a running network measures: %.1f %% optimal, %.2f probes per new subnet, %.2f ms per URL; want ≥ 85 %%, ≤ 2.6, ≤ 1.7 ms", s.OptimalPct, s.ProbesPerNew, s.ExcessPerURLMS)
	}
}
