package evaluate

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/internal/world/worldtest"
)

// TestCrawl crawls a small world by every strategy in both modes over
// loopback. Times measured on a shared machine are noisy, so the checks on
// speed are the model's: oracle never downloads slower than random, and
// the location-aware search is faster than random. Every strategy crawls
// the same pages: the same front pages, and in the crawl mode the same
// pages to the depth (by their final URLs: whether a redirect's page is
// recorded under the redirecting URL too depends on the order of the
// fetches).
func TestCrawl(t *testing.T) {
	p := worldtest.Params(3, 120, 8)
	p.MaxPages = 20 // the largest site's politeness waits set the crawl mode's run time
	run := worldtest.Start(t, p, world.TimeScale(0.02))
	w := run.World()
	tree, err := w.Tree(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cfg := CrawlConfig{Nodes: 8, Seed: 1, Threshold: 50 * time.Millisecond, Sites: 40, Agreement: 10}
	rep, err := Crawl(context.Background(), run, tree, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != len(CrawlStrategies)*len(CrawlModes) {
		t.Fatalf("%d results, want %d", len(rep.Results), len(CrawlStrategies)*len(CrawlModes))
	}
	for i, mode := range CrawlModes {
		by := map[string]CrawlResult{}
		for j, r := range rep.Results[i*len(CrawlStrategies) : (i+1)*len(CrawlStrategies)] {
			t.Logf("%-10s %-9s pages %4d bytes %8d download %6.2f s (model %6.2f s) makespan %6.2f s mean %4.0f ms p90 %4.0f ms optimal %3.0f %% ×%.2f vs random",
				r.Mode, r.Strategy, r.Pages, r.Bytes, r.DownloadS, r.ModelS, r.MakespanS, r.MeanPageMS, r.P90PageMS, r.OptimalPct, r.VsRandom)
			if r.Mode != mode || r.Strategy != CrawlStrategies[j] {
				t.Fatalf("result %d is %s in %s mode, want %s in %s", j, r.Strategy, r.Mode, CrawlStrategies[j], mode)
			}
			by[r.Strategy] = r
			if r.Failed != 0 || r.Bytes <= 0 || r.Nodes != 8 || r.P90PageMS <= 0 || r.ModelS <= 0 {
				t.Errorf("%s, %s: %+v", r.Strategy, mode, r)
			}
			switch mode {
			case ModeSequential:
				if r.Pages != 40 || r.Depth != 0 || r.MakespanS > r.DownloadS || r.MakespanS*8 < r.DownloadS {
					t.Errorf("%s, sequential: %d pages, makespan %.2f s of %.2f s", r.Strategy, r.Pages, r.MakespanS, r.DownloadS)
				}
			case ModeCrawl:
				// Depth 1 reaches the front pages' links and the sitemaps'.
				if r.Pages <= 40 || r.Depth != DefaultCrawlDepth || len(r.urls) > r.Pages || len(r.urls) < r.Pages*9/10 {
					t.Errorf("%s, crawl: %d pages (%d URLs) at depth %d", r.Strategy, r.Pages, len(r.urls), r.Depth)
				}
			}
		}
		oracle, random, guided := by[OracleStr], by[Random], by[Guided]
		for _, r := range by {
			if !slices.Equal(r.sites, oracle.sites) || !slices.Equal(r.urls, oracle.urls) {
				t.Errorf("%s mode: %s crawled other pages than oracle (%d URLs, oracle %d)", mode, r.Strategy, len(r.urls), len(oracle.urls))
			}
		}
		if oracle.ModelS > random.ModelS || oracle.OptimalPct != 100 {
			t.Errorf("%s mode: oracle %.2f s by the model (optimal %.0f %%), random %.2f s", mode, oracle.ModelS, oracle.OptimalPct, random.ModelS)
		}
		if guided.ModelVsRandom < 1.5 || guided.ModelS < oracle.ModelS*0.999 {
			t.Errorf("%s mode: guided search %.2f s by the model, random %.2f s, oracle %.2f s", mode, guided.ModelS, random.ModelS, oracle.ModelS)
		}
		if oracle.VsOracle != 1 || random.VsRandom != 1 {
			t.Errorf("%s mode: ratios to themselves: %v %v", mode, oracle.VsOracle, random.VsRandom)
		}
	}
	if len(rep.PageSize) != len(PageSizeFactors) {
		t.Fatalf("page-size model: %d rows, want %d", len(rep.PageSize), len(PageSizeFactors))
	}
	for _, m := range rep.PageSize {
		t.Logf("pages ×%g (mean %.1f kB): %v", m.Factor, m.MeanPageKB, m.VsRandom)
		if m.DownloadS[OracleStr] > m.DownloadS[Random] || m.VsRandom[OracleStr] < 1 || m.MeanPageKB <= 0 {
			t.Errorf("pages ×%g: oracle %.2f s, random %.2f s", m.Factor, m.DownloadS[OracleStr], m.DownloadS[Random])
		}
	}
	if rep.AgreementN != 10 || rep.AgreementPct < 0 || rep.AgreementPct > 100 || rep.SinglePct < 0 || rep.SinglePct > 100 {
		t.Errorf("HEAD/GET: %.0f %% (one against one: %.0f %%) of %d sites", rep.AgreementPct, rep.SinglePct, rep.AgreementN)
	}
}

// scripted is a Downloader whose answers are given per node, in order.
type scripted struct {
	mu          sync.Mutex
	heads, gets map[netip.Addr][]time.Duration
}

func (d *scripted) next(m map[netip.Addr][]time.Duration, node netip.Addr) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := m[node][0]
	m[node] = m[node][1:]
	return t
}

func (d *scripted) Get(_ context.Context, node netip.Addr, _ world.Site) (time.Duration, int64, error) {
	return d.next(d.gets, node), 1000, nil
}

func (d *scripted) Head(_ context.Context, node netip.Addr, _ world.Site) (time.Duration, error) {
	return d.next(d.heads, node), nil
}

// TestHeadGet checks the HEAD/GET experiment's arithmetic: the probe is
// the least of three HEADs, the download the median of three GETs.
func TestHeadGet(t *testing.T) {
	a, b := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	ms := func(xs ...int) []time.Duration {
		var out []time.Duration
		for _, x := range xs {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	d := &scripted{
		// Site 1: a's least HEAD (10) beats b's (12), and a's median GET
		// (50) beats b's (60), though a's first GET (90) does not: micra's
		// probe agrees, one against one does not.
		// Site 2: a's probe (10) beats b's (11), b's download (40) beats
		// a's (45): a miss costing 5 ms.
		heads: map[netip.Addr][]time.Duration{a: ms(10, 30, 20, 10, 10, 10), b: ms(12, 13, 14, 11, 11, 11)},
		gets:  map[netip.Addr][]time.Duration{a: ms(90, 50, 40, 45, 45, 45), b: ms(60, 60, 60, 40, 40, 40)},
	}
	got, err := headGet(context.Background(), d, []netip.Addr{a, b}, []world.Site{{ID: 1}, {ID: 2}})
	if err != nil {
		t.Fatal(err)
	}
	want := headGetResult{agreePct: 50, extraMS: 5, singlePct: 0, n: 2}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}
