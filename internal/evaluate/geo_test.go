package evaluate

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/micra-net/micra/internal/realdata"
	"github.com/micra-net/micra/internal/world"
)

// geoData returns the shared data directory and the DB-IP file in it,
// skipping without them unless CI is set.
func geoData(t *testing.T) (dir, dbip string) {
	t.Helper()
	if raceEnabled {
		t.Skip("real-data tests run without -race")
	}
	dir = realdata.Need(t, world.DBIPFile)
	dbip = filepath.Join(dir, world.DBIPFile)
	return dir, dbip
}

// checkInvariants checks what holds of every evaluation's results.
func checkInvariants(t *testing.T, res []Result, nodes int) {
	t.Helper()
	get := func(name string) Result {
		for _, r := range res {
			if r.Strategy == name && r.Nodes == nodes {
				return r
			}
		}
		t.Fatalf("no result for %s", name)
		return Result{}
	}
	oracle, brute, random := get(OracleStr), get(Brute), get(Random)
	if brute.OptimalPct != oracle.OptimalPct || brute.New != oracle.New || oracle.ProbesPerURL != 0 {
		t.Errorf("brute force %+v against the oracle %+v", brute.Stats, oracle.Stats)
	}
	for _, r := range res {
		if r.Nodes != nodes {
			continue
		}
		if r.Strategy != OracleStr && r.OptimalPct > oracle.OptimalPct+1e-9 {
			t.Errorf("%s beats the oracle: %.1f %% > %.1f %%", r.Strategy, r.OptimalPct, oracle.OptimalPct)
		}
		// The excess per URL spreads the excess of the sub-optimal ones
		// over every URL.
		if r.Seeds == 1 && math.Abs(r.ExcessPerURLMS*float64(r.URLs)-r.ExcessMS*float64(r.Suboptimal)) > 1e-6*float64(r.URLs) {
			t.Errorf("%s: excess per URL %.3f × %d URLs ≠ excess %.3f × %d sub-optimal", r.Strategy, r.ExcessPerURLMS, r.URLs, r.ExcessMS, r.Suboptimal)
		}
		if r.Strategy != Random && r.ExcessPerURLMS >= random.ExcessPerURLMS {
			t.Errorf("%s loses as much per URL as random: %.2f ms", r.Strategy, r.ExcessPerURLMS)
		}
		if r.Strategy == IPMicra || r.Strategy == Guided {
			if r.ProbesPerNew >= brute.ProbesPerNew || r.OptimalPct <= random.OptimalPct {
				t.Errorf("%s %+v is no better than the baselines", r.Strategy, r.Stats)
			}
		}
	}
}

// TestGeoFile: a hand-made file of real server addresses (an ipv4 column,
// extra columns, one bad row) is a real-geo world like any other.
func TestGeoFile(t *testing.T) {
	dir, _ := geoData(t)
	var b strings.Builder
	b.WriteString("name,ipv4,latitude,longitude,country_code\n")
	// Addresses of well-known networks in several countries, at their
	// operators' main cities (approximate, for the test).
	rows := []struct {
		ip       string
		lat, lon float64
		cc       string
	}{
		{"8.8.8.8", 37.42, -122.08, "US"}, {"1.1.1.1", -33.87, 151.21, "AU"}, {"9.9.9.9", 47.37, 8.54, "CH"},
		{"81.2.69.142", 51.51, -0.13, "GB"}, {"193.0.6.139", 52.37, 4.9, "NL"}, {"202.12.29.205", -27.47, 153.02, "AU"},
		{"200.160.2.3", -23.55, -46.63, "BR"}, {"196.216.2.6", -20.16, 57.5, "MU"}, {"203.119.101.61", 35.68, 139.69, "JP"},
		{"84.200.69.80", 50.11, 8.68, "DE"}, {"77.88.8.8", 55.75, 37.62, "RU"}, {"114.114.114.114", 32.06, 118.79, "CN"},
		{"80.80.80.80", 52.37, 4.9, "NL"}, {"156.154.70.1", 38.9, -77.04, "US"}, {"64.6.64.6", 38.95, -77.45, "US"},
		{"185.228.168.9", 51.51, -0.13, "GB"}, {"94.140.14.14", 34.68, 33.04, "CY"}, {"180.76.76.76", 39.9, 116.4, "CN"},
		{"168.126.63.1", 37.57, 126.98, "KR"}, {"203.80.96.10", 22.32, 114.17, "HK"},
	}
	for i, r := range rows {
		fmt.Fprintf(&b, "s%d,%s,%v,%v,%s\n", i, r.ip, r.lat, r.lon, r.cc)
	}
	b.WriteString("bad,not-an-address,1,2,XX\n")
	path := filepath.Join(t.TempDir(), "servers.csv")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	g, info, err := LoadGeo(context.Background(), GeoConfig{Path: path, Sites: 1000, Seed: 1, Nodes: 12, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if info.File.Rows != len(rows) || info.File.Skipped != 1 || info.File.Sampled != len(rows) || len(g.Sites())+g.Dropped() != len(rows) {
		t.Fatalf("read %+v, %d sites, %d dropped", info.File, len(g.Sites()), g.Dropped())
	}
	for _, s := range g.Sites() {
		if s.Name == "8.8.8.8" && (s.Place.Country != "US" || s.Loc.Country != "US") {
			t.Errorf("8.8.8.8 placed at %+v, %s", s.Place, s.Loc.City)
		}
	}
	if _, _, err := LoadGeo(context.Background(), GeoConfig{Path: path, Strict: true, Seed: 1, Nodes: 12, DataDir: dir}); err == nil {
		t.Error("strict accepted the bad row")
	}
	cfg := DefaultConfig()
	cfg.Seeds, cfg.Nodes, cfg.Thresholds = []int64{1}, []int{12}, []time.Duration{50 * time.Millisecond}
	res, err := Split(context.Background(), g, info.Tree, ModelProber{g}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(AllStrategies) {
		t.Fatalf("%d results", len(res))
	}
}

// TestGeoSplit runs every strategy on real structure: sites sampled from
// DB-IP City Lite in the real hierarchy, 12 and 100 nodes.
func TestGeoSplit(t *testing.T) {
	t.Parallel()
	dir, dbip := geoData(t)
	g, info, err := LoadGeo(context.Background(), GeoConfig{Path: dbip, Sites: 400, Seed: 3, Nodes: 100, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Sites()) < 390 || info.File.Rows < 6_000_000 || info.File.Skipped != 0 {
		t.Fatalf("%d sites of %+v", len(g.Sites()), info.File)
	}
	cfg := DefaultConfig()
	cfg.Seeds, cfg.Nodes, cfg.Thresholds = []int64{3}, []int{12, 100}, []time.Duration{50 * time.Millisecond}
	res, err := Split(context.Background(), g, info.Tree, ModelProber{g}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, res, 12)
	checkInvariants(t, res, 100)
}

// TestStructure bounds the figures docs/delegation.md publishes of real
// structure against a generated world's (micra bench structure).
func TestStructure(t *testing.T) {
	t.Parallel()
	dir, dbip := geoData(t)
	g, info, err := LoadGeo(context.Background(), GeoConfig{Path: dbip, Sites: 100_000, Seed: 1, Nodes: 1, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	real := Describe(g, info.Tree)
	p := world.DefaultParams()
	p.Seed, p.Sites, p.Nodes, p.FromReal, p.DataDir = 1, 2000, 1, true, dir
	w, err := world.Generate(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := w.Tree(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	gen := Describe(w, tree)
	t.Logf("real %+v\ngenerated %+v", real, gen)
	within := func(name string, v, lo, hi float64) {
		t.Helper()
		if v < lo || v > hi {
			t.Errorf("%s = %.3f, want %.2f to %.2f", name, v, lo, hi)
		}
	}
	within("real: sibling ranges' sites at one place", real.SiblingSamePlace, 0.25, 0.40)
	within("real: sibling ranges' sites in one country", real.SiblingSameCountry, 0.65, 0.85)
	within("real: an organisation's sites at its most common place", real.OrgTopShare, 0.45, 0.65)
	within("real: organisations spanning 3,000 km", real.OrgFarShare, 0.12, 0.30)
	within("real: one allocation's sites at one place", real.AllocSamePlace, 0.30, 0.50)
	if real.SiblingPairs < 50_000 || real.Orgs < 1000 {
		t.Errorf("too few pairs or organisations to tell: %+v", real)
	}
	// The generated world's defaults are calibrated to the real
	// structure (Params.OtherCity, AdjacentFar, International and how
	// providers spread): measured 62.6 %, 16.7 %, 41.0 %, 81.6 %, 26.2 %
	// and 2,895 km against the real 54.0 %, 20.2 %, 31.2 %, 75.9 %,
	// 39.3 % and 1,716 km; before the calibration 100 %, 0 %, 97.2 %,
	// 97.2 %, 90.9 % and 3,808 km. The bounds are the measured values
	// with a margin of about 0.1, which the spread between seeds needs
	// (seeds 1 to 5 give 38-63 %, 17-50 %, 28-41 %, 59-86 %, 26-33 %):
	// they fail when the world drifts back towards the kind one. If they
	// fail, recalibrate the defaults (and docs/delegation.md).
	within("generated: an organisation's sites at its most common place", gen.OrgTopShare, 0.52, 0.73)
	within("generated: organisations spanning 3,000 km", gen.OrgFarShare, 0.05, 0.35)
	within("generated: sibling ranges' sites at one place", gen.SiblingSamePlace, 0.30, 0.51)
	within("generated: sibling ranges' sites in one country", gen.SiblingSameCountry, 0.70, 0.90)
	within("generated: one allocation's sites at one place", gen.AllocSamePlace, 0.18, 0.40)
	within("generated: consecutive allocations' median km", gen.ConsecutiveKm, 1500, 3500)
	if gen.SiblingPairs < 500 || gen.AllocPairs < 2000 || gen.Orgs < 4 {
		t.Errorf("too few generated pairs or organisations to tell: %+v", gen)
	}
}

// TestGeoHeadline bounds the headline figures of README and
// docs/delegation.md: 1,000 DB-IP sites (seed 1), 12 nodes, 50 ms, five
// repetitions, as "micra bench delegation --geo ... --nodes 12
// --threshold 50" runs them.
func TestGeoHeadline(t *testing.T) {
	t.Parallel()
	dir, dbip := geoData(t)
	g, info, err := LoadGeo(context.Background(), GeoConfig{Path: dbip, Sites: 1000, Seed: 1, Nodes: 12, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Nodes, cfg.Thresholds = []int{12}, []time.Duration{50 * time.Millisecond}
	cfg.Strategies = []string{IPMicra, Guided, OracleStr}
	res, err := Split(context.Background(), g, info.Tree, ModelProber{g}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		t.Logf("%s: %.1f %% optimal, %.2f probes per new subnet, %.2f per URL, %.2f ms excess per URL", r.Strategy, r.OptimalPct, r.ProbesPerNew, r.ProbesPerURL, r.ExcessPerURLMS)
		var ok bool
		switch r.Strategy {
		case Guided: // published: 91.7 %, 1.67, 0.85 ms
			ok = r.OptimalPct >= 89 && r.ProbesPerNew <= 1.75 && r.ExcessPerURLMS <= 1.2
		case IPMicra: // published: 75.6 %, 3.21 per URL, 3.89 ms
			ok = r.OptimalPct >= 70 && r.OptimalPct <= 82 && r.ProbesPerURL >= 2.7 && r.ProbesPerURL <= 3.7
		case OracleStr: // published: 97.9 %
			ok = r.OptimalPct >= 97
		}
		if !ok {
			t.Errorf("%s is off its published figures: %+v", r.Strategy, r.Stats)
		}
	}
}

// TestGeoOrg: one cloud organisation's prefixes in many cities (Amazon's
// in DB-IP City Lite). Whole registry ranges cap any search well below
// 100 % optimal; parts searched apart lift the cap (docs/delegation.md).
func TestGeoOrg(t *testing.T) {
	t.Parallel()
	dir, dbip := geoData(t)
	g, info, err := LoadGeo(context.Background(), GeoConfig{Path: dbip, Sites: 600, Seed: 1, Nodes: 12, DataDir: dir, Org: "amazon"})
	if err != nil {
		t.Fatal(err)
	}
	if info.File.Kept < 100_000 || info.File.Kept > 120_000 || len(g.Sites()) != 600 {
		t.Fatalf("kept %d rows, %d sites", info.File.Kept, len(g.Sites()))
	}
	cities := map[int]bool{}
	for _, s := range g.Sites() {
		id := info.Tree.SmallestNonUnary(s.Addrs[0])
		if name := info.Tree.OrgName(world.OrgOf(info.Tree, id)); !strings.Contains(strings.ToLower(name), "amazon") {
			t.Fatalf("site %s of %q", s.Name, name)
		}
		cities[s.Loc.ID] = true
	}
	if len(cities) < 20 {
		t.Errorf("the organisation's sites are at %d places only", len(cities))
	}
	oracle := func(split time.Duration) float64 {
		cfg := DefaultConfig()
		cfg.Seeds, cfg.Nodes, cfg.Thresholds, cfg.Strategies = []int64{1, 2}, []int{12}, []time.Duration{50 * time.Millisecond}, []string{OracleStr}
		cfg.Split = split
		res, err := Split(context.Background(), g, info.Tree, ModelProber{g}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return res[0].OptimalPct
	}
	whole, parts := oracle(0), oracle(10*time.Millisecond)
	t.Logf("oracle: %.1f %% with whole ranges, %.1f %% with parts", whole, parts)
	if whole > 88 || parts < whole+8 {
		t.Errorf("oracle %.1f %% with whole ranges, %.1f %% with parts: want at most 88 and 8 points more", whole, parts)
	}

	// A cold start on the cloud (no training, as the demo starts): one
	// probed range of the organisation must not send the others to its
	// node unprobed. Published (150 sites, seed 1): 74.8 %, 2.01 probes
	// per new subnet, 2.90 ms excess per URL; with the paper's blind
	// same-organisation rule in the guided search, 58.1 % and 22.7 ms.
	cold, cinfo, err := LoadGeo(context.Background(), GeoConfig{Path: dbip, Sites: 150, Seed: 1, Nodes: 12, DataDir: dir, Org: "amazon"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Nodes, cfg.Thresholds, cfg.Strategies = []int{12}, []time.Duration{50 * time.Millisecond}, []string{Guided}
	cfg.TrainFraction = 0
	res, err := Split(context.Background(), cold, cinfo.Tree, ModelProber{cold}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := res[0]
	t.Logf("cold start on the cloud: %.1f %% optimal, %.2f probes per new subnet, %.2f ms excess per URL", r.OptimalPct, r.ProbesPerNew, r.ExcessPerURLMS)
	if r.OptimalPct < 70 || r.ExcessPerURLMS > 5 || r.ProbesPerNew > 2.5 {
		t.Errorf("cold start on the cloud off its published figures: %+v", r.Stats)
	}
}

// TestGeoLatencyMap: the latency map (Config.Map) and the density
// tolerance at 100 nodes on real structure (docs/delegation.md, "The
// latency map" and "What nodes can measure"). The exact map gains optimal
// delegations and saves probes; the density tolerance buys most near ties
// within the probe goal. As a running network sees it ("As a running
// network sees it": the density tolerance, the inter-node RTTs with the
// noise the demo's measurements fit, ×e^N(0, 0.012²) + |N(0, (1.5 ms)²)|,
// and each probe the least of three samples of the world's jitter) the
// figures are bounded as published, without a map and with the map of
// measured RTTs.
func TestGeoLatencyMap(t *testing.T) {
	t.Parallel()
	dir, dbip := geoData(t)
	g, info, err := LoadGeo(context.Background(), GeoConfig{Path: dbip, Sites: 1000, Seed: 1, Nodes: 100, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	run := func(name string, p Prober, set func(*Config)) Stats {
		cfg := DefaultConfig()
		cfg.Nodes, cfg.Thresholds, cfg.Strategies = []int{100}, []time.Duration{50 * time.Millisecond}, []string{Guided}
		set(&cfg)
		res, err := Split(context.Background(), g, info.Tree, p, cfg)
		if err != nil || len(res) != 1 {
			t.Fatalf("%v, %d results", err, len(res))
		}
		s := res[0].Stats
		t.Logf("%s: %.1f %% optimal, %.2f probes per new subnet, %.2f ms excess per URL", name, s.OptimalPct, s.ProbesPerNew, s.ExcessPerURLMS)
		return s
	}
	exact := ModelProber{g}
	off := run("no map", exact, func(*Config) {})
	on := run("exact map", exact, func(c *Config) { c.Map = true })
	dense := run("density tolerance", exact, func(c *Config) { c.Density = true })
	measured := run("as a running network measures", JitterProber{World: g, Seed: 1}, func(c *Config) {
		c.Density, c.RTTNoise, c.RTTJitter = true, 0.012, 1500*time.Microsecond
	})
	measuredMap := run("the same, with the map of measured RTTs", JitterProber{World: g, Seed: 1}, func(c *Config) {
		c.Density, c.RTTNoise, c.RTTJitter, c.Map, c.MeasuredMap = true, 0.012, 1500*time.Microsecond, true, true
	})
	// Published: 82.2 %, 2.02; 85.3 %, 1.72; 89.9 %, 2.44.
	if on.OptimalPct < off.OptimalPct+1.5 || on.ProbesPerNew > off.ProbesPerNew-0.15 || on.ExcessPerURLMS > off.ExcessPerURLMS {
		t.Errorf("the exact map gains too little: %+v against %+v", on, off)
	}
	if dense.OptimalPct < 88.5 || dense.ProbesPerNew > 2.55 || dense.ExcessPerURLMS > off.ExcessPerURLMS-0.4 {
		t.Errorf("the density tolerance: %+v against a fifth of the threshold's %+v", dense, off)
	}
	// Published: 86.4 %, 2.52, 1.50 ms.
	if measured.OptimalPct < 85 || measured.ProbesPerNew > 2.6 || measured.ExcessPerURLMS > 1.7 {
		t.Errorf("100 nodes as a running network measures: %.1f %% optimal, %.2f probes per new subnet, %.2f ms per URL; want ≥ 85 %%, ≤ 2.6, ≤ 1.7 ms", measured.OptimalPct, measured.ProbesPerNew, measured.ExcessPerURLMS)
	}
	// Published: 84.7 %, 2.47, 1.87 ms.
	if mm := measuredMap; mm.OptimalPct < 83 || mm.ProbesPerNew > 2.6 || mm.ExcessPerURLMS > 2.1 {
		t.Errorf("100 nodes with the map of measured RTTs: %.1f %% optimal, %.2f probes per new subnet, %.2f ms per URL; want ≥ 83 %%, ≤ 2.6, ≤ 2.1 ms", mm.OptimalPct, mm.ProbesPerNew, mm.ExcessPerURLMS)
	}
}
