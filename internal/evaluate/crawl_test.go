package evaluate

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/internal/world/worldtest"
)

// TestCrawl crawls a small world's front pages by every strategy over
// loopback. Times measured on a shared machine are noisy, so the checks on
// speed are the model's: oracle never downloads slower than random, and
// the location-aware search is faster than random.
func TestCrawl(t *testing.T) {
	run := worldtest.Start(t, worldtest.Params(3, 120, 8), world.TimeScale(0.02))
	w := run.World()
	tree, err := w.Tree(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cfg := CrawlConfig{Nodes: 8, Seed: 1, Threshold: 50 * time.Millisecond, Sites: 60, Agreement: 10}
	rep, err := Crawl(context.Background(), w, tree, &HTTPDownloader{Run: run}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != len(CrawlStrategies) {
		t.Fatalf("%d results, want %d", len(rep.Results), len(CrawlStrategies))
	}
	by := map[string]CrawlResult{}
	for _, r := range rep.Results {
		t.Logf("%-9s pages %d bytes %d download %.2f s (model %.2f s) makespan %.2f s mean %.0f ms p90 %.0f ms optimal %.0f %% ×%.2f vs random",
			r.Strategy, r.Pages, r.Bytes, r.DownloadS, r.ModelS, r.MakespanS, r.MeanPageMS, r.P90PageMS, r.OptimalPct, r.VsRandom)
		by[r.Strategy] = r
		if r.Failed != 0 || r.Pages != 60 || r.Bytes <= 0 || r.Mode != ModeSequential || r.Nodes != 8 {
			t.Errorf("%s: %+v", r.Strategy, r)
		}
		if r.MakespanS > r.DownloadS || r.MakespanS*8 < r.DownloadS || r.P90PageMS <= 0 {
			t.Errorf("%s: makespan %.2f s of %.2f s, p90 %.0f ms", r.Strategy, r.MakespanS, r.DownloadS, r.P90PageMS)
		}
	}
	ids := by[OracleStr].sites
	for _, r := range rep.Results {
		if !slices.Equal(r.sites, ids) {
			t.Errorf("%s crawled other pages than oracle", r.Strategy)
		}
	}
	oracle, random, guided := by[OracleStr], by[Random], by[Guided]
	if oracle.ModelS > random.ModelS || oracle.OptimalPct != 100 {
		t.Errorf("oracle %.2f s by the model (optimal %.0f %%), random %.2f s", oracle.ModelS, oracle.OptimalPct, random.ModelS)
	}
	if guided.ModelVsRandom < 1.5 || guided.ModelS < oracle.ModelS*0.999 {
		t.Errorf("guided search %.2f s by the model, random %.2f s, oracle %.2f s", guided.ModelS, random.ModelS, oracle.ModelS)
	}
	if oracle.VsOracle != 1 || random.VsRandom != 1 {
		t.Errorf("ratios to themselves: %v %v", oracle.VsOracle, random.VsRandom)
	}
	if rep.AgreementN != 10 || rep.AgreementPct < 0 || rep.AgreementPct > 100 {
		t.Errorf("HEAD/GET: %.0f %% of %d sites", rep.AgreementPct, rep.AgreementN)
	}
}
