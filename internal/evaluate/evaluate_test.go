package evaluate

import (
	"bytes"
	"context"
	"encoding/csv"
	"strings"
	"testing"
	"time"

	"github.com/micra-net/micra/internal/world/worldtest"
)

func TestSplit(t *testing.T) {
	w := worldtest.Generate(t, worldtest.Params(1, 400, 12))
	tree, err := w.Tree(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Seeds = []int64{1, 2}
	cfg.Nodes = []int{6, 12}
	cfg.Thresholds = []time.Duration{50 * time.Millisecond}
	cfg.Split = 0 // whole ranges, as the paper: every strategy meets the same new subnets
	res, err := Split(context.Background(), w, tree, ModelProber{w}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string, nodes int) Result {
		t.Helper()
		for _, r := range res {
			if r.Strategy == name && r.Nodes == nodes {
				return r
			}
		}
		t.Fatalf("no result for %s with %d nodes", name, nodes)
		return Result{}
	}
	for _, k := range cfg.Nodes {
		oracle, brute, random := get(OracleStr, k), get(Brute, k), get(Random, k)
		ipm, guided, hi := get(IPMicra, k), get(Guided, k), get(HiMicra, k)
		if oracle.OptimalPct != 100 || oracle.ProbesPerURL != 0 || oracle.ExcessMS != 0 {
			t.Errorf("%d nodes: oracle %+v", k, oracle.Stats)
		}
		if brute.OptimalPct != 100 || brute.ProbesPerNew != float64(k) {
			t.Errorf("%d nodes: brute force %+v, want every node probing every new subnet", k, brute.Stats)
		}
		if random.ProbesPerURL != 0 || random.OptimalPct >= oracle.OptimalPct || random.ExcessMS <= 0 {
			t.Errorf("%d nodes: random %+v", k, random.Stats)
		}
		for _, r := range []Result{ipm, guided, hi} {
			if r.ProbesPerNew >= brute.ProbesPerNew || r.OptimalPct < random.OptimalPct {
				t.Errorf("%d nodes: %s %+v is no better than the baselines", k, r.Strategy, r.Stats)
			}
			if r.URLs != oracle.URLs || r.New != oracle.New || r.Seeds != 2 {
				t.Errorf("%d nodes: %s delegated %d (%d new) over %d seeds, oracle %d (%d)", k, r.Strategy, r.URLs, r.New, r.Seeds, oracle.URLs, oracle.New)
			}
		}
		if guided.ProbesPerNew >= ipm.ProbesPerNew {
			t.Errorf("%d nodes: the guided search (%.2f probes per new subnet) saves nothing over the paper's (%.2f)", k, guided.ProbesPerNew, ipm.ProbesPerNew)
		}
		if hi.SetupProbes != float64(k*cfg.HiMicraSample) {
			t.Errorf("%d nodes: HiMicra setup probes %.0f", k, hi.SetupProbes)
		}
	}

	var tab, csvOut, png bytes.Buffer
	if err := WriteTable(&tab, res); err != nil || !strings.Contains(tab.String(), "ipmicra") {
		t.Errorf("table: %v\n%s", err, tab.String())
	}
	if err := WriteCSV(&csvOut, res); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&csvOut).ReadAll()
	if err != nil || len(rows) != len(res)+1 || rows[0][6] != "optimal_pct" {
		t.Errorf("csv: %v, %d rows", err, len(rows))
	}
	curves, err := Progressive(context.Background(), w, tree, ModelProber{w}, 12, 1, Config{Thresholds: cfg.Thresholds, Progressive: 200, Branching: 2})
	if err != nil || len(curves) != 1 || len(curves[0].Probes) != 200 {
		t.Fatalf("progressive: %v %+v", err, curves)
	}
	if err := Plot(&png, res, curves); err != nil || !bytes.HasPrefix(png.Bytes(), []byte("\x89PNG")) {
		t.Errorf("plot: %v, %d bytes", err, png.Len())
	}
}

func TestPooled(t *testing.T) {
	// One seed with one sub-optimal delegation 90 ms off, one with nine 1 ms
	// off: the mean of the seeds' means is 45.5 ms, the pooled mean 9.9 ms.
	ss := []Stats{{ExcessMS: 90, Suboptimal: 1}, {ExcessMS: 1, Suboptimal: 9}, {}}
	if got := pooled(ss); got < 9.899 || got > 9.901 {
		t.Errorf("pooled = %v, want 9.9", got)
	}
	if got := pooled([]Stats{{}}); got != 0 {
		t.Errorf("pooled of none = %v", got)
	}
}

func TestTrend(t *testing.T) {
	slope, icpt := trend([]int{5, 4, 3, 2, 1})
	if slope != -1 || icpt != 5 {
		t.Errorf("trend = %v, %v", slope, icpt)
	}
	if m, s := meanStd([]float64{1, 3}); m != 2 || s < 1.41 || s > 1.42 {
		t.Errorf("meanStd = %v %v", m, s)
	}
}
