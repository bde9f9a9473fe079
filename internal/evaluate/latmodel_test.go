package evaluate

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/micra-net/micra/internal/realdata"
	"github.com/micra-net/micra/internal/world"
)

// Margins within which the benchmarks' figures on the embedded latency
// model must stay of the same figures on the real matrix
// (TestLatencyModelMargin; docs/latency-model.md).
const (
	marginOptimalPct   = 3.0  // percentage points of sites delegated optimally
	marginProbesPerNew = 0.2  // relative: probes per new subnet
	marginExcessPerURL = 0.3  // ms of excess RTT per URL
	marginSpeedUp      = 0.15 // relative: the crawl's speed-up over random assignment
)

// TestLatencyModelMargin keeps what the benchmarks measure on worlds of the
// embedded latency model within a stated margin of what they measure on the
// same worlds of the real matrix: "micra bench delegation"'s optimal share,
// probes per new subnet and excess per URL of the guided and the paper's
// searches (its default world, 1,000 sites from real allocations, with
// world seeds 1 to 4; 12 and 50 nodes, 50 ms, three repetitions each), and
// the crawl speed-up of the guided search over random assignment (12
// nodes, each site's front page, 32 KiB, on a fresh connection, as the
// world's model times it). Means over the worlds: one world's figures
// differ from another's by more than the margins, on either latency. It
// skips without the matrix (fails under CI).
func TestLatencyModelMargin(t *testing.T) {
	t.Parallel()
	realdata.Need(t, "latency/wonderproxy-2020-07-19/servers-2020-07-19.csv", "latency/wonderproxy-2020-07-19/pings-2020-07-19-2020-07-20-grouped.csv.gz")
	if testing.Short() || raceEnabled {
		t.Skip("generates and searches eight worlds of 1,000 sites; the race detector finds nothing here a normal run does not")
	}
	ctx := context.Background()
	type figures struct {
		res     map[string]Result // by strategy and nodes
		speedUp float64
	}
	worldSeeds := []int64{1, 2, 3, 4}
	run := func(latency string) figures {
		f := figures{res: map[string]Result{}}
		n := float64(len(worldSeeds))
		for _, seed := range worldSeeds {
			p := world.DefaultParams()
			p.Seed, p.Sites, p.Nodes, p.FromReal, p.Port, p.Latency = seed, 1000, 50, true, 0, latency
			w, err := world.Generate(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			tree, err := w.Tree(ctx)
			if err != nil {
				t.Fatal(err)
			}
			cfg := DefaultConfig()
			cfg.Seeds = []int64{seed, seed + 100, seed + 200}
			cfg.Nodes = []int{12, 50}
			cfg.Thresholds = []time.Duration{50 * time.Millisecond}
			cfg.Strategies = []string{IPMicra, Guided, OracleStr}
			res, err := Split(ctx, w, tree, ModelProber{World: w}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res {
				k := fmt.Sprint(r.Strategy, r.Nodes)
				m := f.res[k]
				m.Strategy, m.Nodes = r.Strategy, r.Nodes
				m.OptimalPct += r.OptimalPct / n
				m.ProbesPerNew += r.ProbesPerNew / n
				m.ExcessPerURLMS += r.ExcessPerURLMS / n
				f.res[k] = m
			}
			nodes := w.NodeAddrs()[:12]
			sites := evalSites(w)
			total := map[string]time.Duration{}
			for _, name := range []string{Guided, Random} {
				assign, _, err := assignSites(ctx, w, tree, nodes, name, CrawlConfig{Seed: seed, Threshold: 50 * time.Millisecond}, sites)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range sites {
					total[name] += ModelDownload(w, assign[s.ID], s, 1, 32<<10)
				}
			}
			f.speedUp += total[Random].Seconds() / total[Guided].Seconds() / n
		}
		return f
	}
	mat, mod := run(world.LatencyMatrix), run(world.LatencyModel)
	t.Logf("%-10s %5s  %-22s %-22s %-22s", "strategy", "nodes", "optimal % matrix|model", "probes/new subnet", "excess/URL ms")
	for _, name := range []string{IPMicra, Guided} {
		for _, k := range []int{12, 50} {
			a, b := mat.res[fmt.Sprint(name, k)], mod.res[fmt.Sprint(name, k)]
			t.Logf("%-10s %5d  %9.1f | %-9.1f %9.2f | %-9.2f %9.2f | %-9.2f", name, k, a.OptimalPct, b.OptimalPct,
				a.ProbesPerNew, b.ProbesPerNew, a.ExcessPerURLMS, b.ExcessPerURLMS)
			if d := math.Abs(a.OptimalPct - b.OptimalPct); d > marginOptimalPct {
				t.Errorf("%s, %d nodes: optimal %.1f %% on the matrix, %.1f %% on the model: %.1f points apart, margin %v", name, k, a.OptimalPct, b.OptimalPct, d, marginOptimalPct)
			}
			if d := math.Abs(a.ProbesPerNew-b.ProbesPerNew) / a.ProbesPerNew; d > marginProbesPerNew {
				t.Errorf("%s, %d nodes: %.2f probes per new subnet on the matrix, %.2f on the model: %.0f %% apart, margin %.0f %%", name, k, a.ProbesPerNew, b.ProbesPerNew, 100*d, 100*marginProbesPerNew)
			}
			if d := math.Abs(a.ExcessPerURLMS - b.ExcessPerURLMS); d > marginExcessPerURL {
				t.Errorf("%s, %d nodes: %.2f ms excess per URL on the matrix, %.2f on the model: margin %v ms", name, k, a.ExcessPerURLMS, b.ExcessPerURLMS, marginExcessPerURL)
			}
		}
	}
	t.Logf("crawl speed-up over random assignment, 12 nodes: matrix %.2f×, model %.2f×", mat.speedUp, mod.speedUp)
	if d := math.Abs(mat.speedUp-mod.speedUp) / mat.speedUp; d > marginSpeedUp {
		t.Errorf("speed-up %.2f× on the matrix, %.2f× on the model: %.0f %% apart, margin %.0f %%", mat.speedUp, mod.speedUp, 100*d, 100*marginSpeedUp)
	}
}
