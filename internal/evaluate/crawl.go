package evaluate

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/subnet"
)

// The crawl-speed experiments reproduce the IPMicra thesis' download-time
// measurements: 8.4 (every page from its assigned crawler, one connection
// at a time per crawler; location-aware assignment against UCYMicra's
// random one) and 8.3 (does the crawler with the smallest HEAD probe also
// download the page fastest?).

// CrawlStrategies are the assignments Crawl compares, in report order.
var CrawlStrategies = []string{Guided, IPMicra, Random, OracleStr}

// ModeSequential is the thesis' mode: each node downloads the front page
// of each of its sites, one HTTP connection at a time.
const ModeSequential = "sequential"

// CrawlConfig describes a crawl-speed experiment.
type CrawlConfig struct {
	Nodes      int           // nodes taking part, each at its own world address
	Seed       int64         // node subset, site order and random assignment
	Threshold  time.Duration // the searches' probing threshold
	Strategies []string      // of CrawlStrategies; all when empty
	Sites      int           // sites crawled (0: every site's)
	Modes      []string      // of CrawlModes; all when empty
	Depth      int           // link hops of ModeCrawl from each front page (0: DefaultCrawlDepth)
	// Agreement is the number of sites of the HEAD/GET experiment (0
	// skips it): each is probed with three HEADs and downloaded with
	// three GETs from every node.
	Agreement int
	// Decide, when set, decides the Guided strategy's assignment as a
	// running network does: nodes of micra's overlay at the given
	// addresses delegating the sites' subnets (internal/swarm). Without
	// it, the guided search runs here with the world's model answering
	// its probes, as the other searches do.
	Decide Decider
}

// Decider assigns sites to nodes in a running network: the node of each
// site (by ID; one of nodes) and the probes issued.
type Decider func(ctx context.Context, nodes []netip.Addr, sites []world.Site) (map[int]netip.Addr, int64, error)

// Where an assignment was decided (CrawlResult.DecidedBy).
const (
	DecidedByModel   = "model"   // the search run here, probes answered by the world's model
	DecidedByOverlay = "overlay" // a running network of micra nodes (CrawlConfig.Decide)
)

// Downloader times requests from a node's address to a site's front page,
// each on a fresh connection, as modelled (unscaled) durations.
type Downloader interface {
	// Get downloads the front page of s from node: the time from the start
	// of the connect to the last body byte, and the body's bytes.
	Get(ctx context.Context, node netip.Addr, s world.Site) (time.Duration, int64, error)
	// Head probes s from node: the time to the response's first byte.
	Head(ctx context.Context, node netip.Addr, s world.Site) (time.Duration, error)
}

// CrawlResult is one strategy's crawl in one mode. Times are modelled
// (unscaled): measured wall time divided by the world's time scale. ModelS
// is the same crawl by the world's model alone, free of the machine's
// timing noise: per request two RTTs on a new connection (the connect,
// then the request) or one on a kept-alive one, plus the body at the
// path's bandwidth (ModelDownload; crawlDeep for the crawl mode).
type CrawlResult struct {
	Strategy   string  `json:"strategy"`
	Mode       string  `json:"mode"`
	Depth      int     `json:"depth"` // link hops from the front pages (ModeCrawl)
	Nodes      int     `json:"nodes"`
	DownloadS  float64 `json:"download_s"` // sum over pages
	MakespanS  float64 `json:"makespan_s"` // until the last node is done
	MeanPageMS float64 `json:"mean_page_ms"`
	P90PageMS  float64 `json:"p90_page_ms"`
	Pages      int     `json:"pages"`
	Bytes      int64   `json:"bytes"`
	Failed     int     `json:"failed"`  // downloads that failed (not in the times)
	ModelS     float64 `json:"model_s"` // the model's download time of the same pages
	// VsRandom and VsOracle are DownloadS divided into random's and by
	// oracle's: how many times faster than random, how many times slower
	// than the physical limit (0 when the strategy was not run).
	VsRandom      float64 `json:"speedup_vs_random"`
	VsOracle      float64 `json:"ratio_to_oracle"`
	ModelVsRandom float64 `json:"model_speedup_vs_random"`
	OptimalPct    float64 `json:"optimal_pct"`     // sites assigned to their nearest node
	ProbesPerSite float64 `json:"probes_per_site"` // the assignment's probes
	DecidedBy     string  `json:"decided_by"`      // DecidedByModel or DecidedByOverlay

	sites []int    // site IDs crawled, for the report's checks
	urls  []string // ModeCrawl: the final URLs of the records' pages, sorted, once each

	assign      map[int]netip.Addr // the node of each site
	bytesBySite map[int]int64      // ModeSequential: the front page's bytes of each site downloaded
}

// CrawlReport is the outcome of Crawl.
type CrawlReport struct {
	// AgreementPct is the share of the sampled sites where the node with
	// the smallest probe (the least of three HEADs, as micra probes) is
	// the node with the smallest download (the median of three GETs)
	// (thesis 8.3); ExtraMS the mean extra download time where it is not.
	// SinglePct is the same share for one HEAD against one GET.
	AgreementPct float64       `json:"head_get_agreement_pct"`
	AgreementN   int           `json:"head_get_sites"`
	ExtraMS      float64       `json:"head_get_extra_ms"`
	SinglePct    float64       `json:"head_get_single_pct"`
	Results      []CrawlResult `json:"results"`
	// PageSize is the sequential mode by the world's model with the front
	// pages scaled by each of PageSizeFactors (empty without that mode).
	PageSize []SizeModel `json:"page_size_model,omitempty"`
}

// Crawl assigns the sites of run's world to cfg.Nodes nodes by each
// strategy and crawls them in each mode: the front pages one connection
// at a time per node (ModeSequential), and by micra's crawler to a depth
// (ModeCrawl). The searches decide from a clean start (every node owning
// only its own subnet), one site after the other in a seeded order, with
// probes answered by the world's model, unless cfg.Decide decides ipmicra+
// in a running network. Each strategy decides once; every mode crawls the
// same sites under that assignment.
func Crawl(ctx context.Context, run *world.Running, tree *subnet.Tree, cfg CrawlConfig) (CrawlReport, error) {
	var rep CrawlReport
	w := run.World()
	strategies, err := oneOf("strategy", cfg.Strategies, CrawlStrategies)
	if err != nil {
		return rep, err
	}
	modes, err := oneOf("mode", cfg.Modes, CrawlModes)
	if err != nil {
		return rep, err
	}
	depth := cfg.Depth
	if depth == 0 {
		depth = DefaultCrawlDepth
	}
	// Flaky sites answer one request in five with 503, and a robots.txt
	// that fails forbids the whole site: either would make the strategies
	// crawl different pages.
	sites := slices.DeleteFunc(evalSites(w), func(s world.Site) bool { return s.Flaky || s.Robots == world.RobotsError })
	if len(sites) == 0 {
		return rep, errNoSites
	}
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(cfg.Nodes)))
	nodes, err := pickNodes(w, cfg.Nodes, rng)
	if err != nil {
		return rep, err
	}
	rng.Shuffle(len(sites), func(i, j int) { sites[i], sites[j] = sites[j], sites[i] })
	if cfg.Sites > 0 {
		sites = sites[:min(len(sites), cfg.Sites)]
	}
	d := &HTTPDownloader{Run: run}
	for _, name := range strategies {
		by := DecidedByModel
		decide := assignSites
		if name == Guided && cfg.Decide != nil {
			by, decide = DecidedByOverlay, decideInOverlay
		}
		assign, out, err := decide(ctx, w, tree, nodes, name, cfg, sites)
		if err != nil {
			return rep, fmt.Errorf("%s: %w", name, err)
		}
		st := Summarise(out)
		for _, mode := range modes {
			// What the deciding swarm or the last mode left on the heap is
			// collected now, not during the timed downloads.
			runtime.GC()
			var r CrawlResult
			switch mode {
			case ModeSequential:
				r = crawlSequential(ctx, w, d, nodes, assign, sites)
			case ModeCrawl:
				if r, err = crawlDeep(ctx, run, nodes, assign, sites, depth); err != nil {
					return rep, fmt.Errorf("%s, %s mode: %w", name, mode, err)
				}
				r.Depth = depth
			}
			if err := ctx.Err(); err != nil {
				return rep, err
			}
			r.Strategy, r.Mode, r.Nodes, r.OptimalPct, r.ProbesPerSite = name, mode, len(nodes), st.OptimalPct, st.ProbesPerURL
			r.DecidedBy, r.assign = by, assign
			rep.Results = append(rep.Results, r)
		}
	}
	// Results in mode order, the strategies in theirs within each.
	slices.SortStableFunc(rep.Results, func(a, b CrawlResult) int {
		return slices.Index(modes, a.Mode) - slices.Index(modes, b.Mode)
	})
	ratios(rep.Results)
	rep.PageSize = pageSizeModel(w, sites, rep.Results)
	if cfg.Agreement > 0 {
		sample := sites[:min(len(sites), cfg.Agreement)]
		hg, err := headGet(ctx, d, nodes, sample)
		if err != nil {
			return rep, err
		}
		rep.AgreementPct, rep.ExtraMS, rep.SinglePct, rep.AgreementN = hg.agreePct, hg.extraMS, hg.singlePct, hg.n
	}
	return rep, nil
}

// oneOf returns asked, or all when asked is empty, and an error naming
// the first of asked that is not in all.
func oneOf(what string, asked, all []string) ([]string, error) {
	if len(asked) == 0 {
		return all, nil
	}
	for _, a := range asked {
		if !slices.Contains(all, a) {
			return nil, fmt.Errorf("%s %q: the crawl measures %v", what, a, all)
		}
	}
	return asked, nil
}

// assignSites delegates every site by the named strategy and returns the
// node of each site and the delegation outcomes.
func assignSites(ctx context.Context, w *world.World, tree *subnet.Tree, nodes []netip.Addr, name string, cfg CrawlConfig, sites []world.Site) (map[int]netip.Addr, []Outcome, error) {
	e, err := newEnv(w, tree, nodes, ModelProber{World: w})
	if err != nil {
		return nil, nil, err
	}
	e.split = 10 * time.Millisecond
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5eed))
	st, _, err := e.strategy(ctx, name, cfg.Threshold, rng, nil, 2)
	if err != nil {
		return nil, nil, err
	}
	assign := make(map[int]netip.Addr, len(sites))
	out := make([]Outcome, 0, len(sites))
	for _, s := range sites {
		o, err := e.delegate(ctx, st, s)
		if err != nil {
			return nil, nil, err
		}
		assign[s.ID] = o.Node
		out = append(out, o)
	}
	return assign, out, nil
}

// crawlSequential downloads every site's front page from its assigned
// node: the nodes at once, each one page at a time.
func crawlSequential(ctx context.Context, w *world.World, d Downloader, nodes []netip.Addr, assign map[int]netip.Addr, sites []world.Site) CrawlResult {
	queue := map[netip.Addr][]world.Site{}
	for _, s := range sites {
		queue[assign[s.ID]] = append(queue[assign[s.ID]], s)
	}
	type page struct {
		site  int
		t     time.Duration
		model float64 // seconds
		bytes int64
		ok    bool
	}
	results := make([][]page, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			for _, s := range queue[n] {
				if ctx.Err() != nil {
					return
				}
				t, b, err := d.Get(ctx, n, s)
				p := page{site: s.ID, t: t, bytes: b, ok: err == nil}
				if p.ok {
					p.model = ModelDownload(w, n, s, 1, b).Seconds()
				}
				results[i] = append(results[i], p)
			}
		})
	}
	wg.Wait()
	r := CrawlResult{bytesBySite: map[int]int64{}}
	var times []float64
	for _, ps := range results {
		var sum time.Duration
		for _, p := range ps {
			if !p.ok {
				r.Failed++
				continue
			}
			r.bytesBySite[p.site] = p.bytes
			sum += p.t
			r.Pages++
			r.Bytes += p.bytes
			r.ModelS += p.model
			times = append(times, ms(p.t))
		}
		r.DownloadS += sum.Seconds()
		r.MakespanS = max(r.MakespanS, sum.Seconds())
	}
	if len(times) > 0 {
		r.MeanPageMS = r.DownloadS * 1000 / float64(len(times))
		slices.Sort(times)
		r.P90PageMS = times[min(len(times)-1, len(times)*9/10)]
	}
	for _, s := range sites {
		r.sites = append(r.sites, s.ID)
	}
	return r
}

// ModelDownload returns the world model's time for node to download
// requests responses totalling bytes from s, each on a fresh connection:
// two RTTs per request (the connect and the request) plus the bytes at
// the path's bandwidth.
func ModelDownload(w *world.World, node netip.Addr, s world.Site, requests, bytes int64) time.Duration {
	sec := float64(requests)*2*w.RTT(node, s).Seconds() + float64(bytes)/w.Bandwidth(s.Addrs[0], node)
	return time.Duration(sec * float64(time.Second))
}

// ratios fills each result's ratios to random's and oracle's of its mode.
func ratios(rs []CrawlResult) {
	random, oracle := map[string]*CrawlResult{}, map[string]*CrawlResult{}
	for i := range rs {
		switch rs[i].Strategy {
		case Random:
			random[rs[i].Mode] = &rs[i]
		case OracleStr:
			oracle[rs[i].Mode] = &rs[i]
		}
	}
	for i := range rs {
		r := &rs[i]
		if rnd := random[r.Mode]; rnd != nil && r.DownloadS > 0 {
			r.VsRandom = rnd.DownloadS / r.DownloadS
		}
		if rnd := random[r.Mode]; rnd != nil && r.ModelS > 0 {
			r.ModelVsRandom = rnd.ModelS / r.ModelS
		}
		if o := oracle[r.Mode]; o != nil && o.DownloadS > 0 {
			r.VsOracle = r.DownloadS / o.DownloadS
		}
	}
}

// headGetSamples is the number of HEADs and of GETs per node and site in
// the HEAD/GET experiment: a probe is the least of three HEADs, as the
// overlay's probes are, and a download the median of three GETs.
const headGetSamples = 3

// headGetResult is the outcome of the HEAD/GET experiment.
type headGetResult struct {
	agreePct, extraMS float64 // micra's probe against the median download
	singlePct         float64 // one HEAD against one GET
	n                 int     // sites where every request succeeded
}

// headGet runs the HEAD/GET experiment (thesis 8.3) on sample: for each
// site, from every node, headGetSamples HEADs and then as many GETs, one
// site at a time, the nodes at once. Sites where any request failed are
// left out.
func headGet(ctx context.Context, d Downloader, nodes []netip.Addr, sample []world.Site) (headGetResult, error) {
	var res headGetResult
	agree, single, misses := 0, 0, 0
	var extra time.Duration
	for _, s := range sample {
		heads := make([][]time.Duration, len(nodes))
		gets := make([][]time.Duration, len(nodes))
		errs := make([]error, len(nodes))
		var wg sync.WaitGroup
		for i, node := range nodes {
			wg.Go(func() {
				for range headGetSamples {
					t, err := d.Head(ctx, node, s)
					if errs[i] = err; err != nil {
						return
					}
					heads[i] = append(heads[i], t)
				}
				for range headGetSamples {
					t, _, err := d.Get(ctx, node, s)
					if errs[i] = err; err != nil {
						return
					}
					gets[i] = append(gets[i], t)
				}
			})
		}
		wg.Wait()
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if slices.ContainsFunc(errs, func(e error) bool { return e != nil }) {
			continue
		}
		probe, download := make([]time.Duration, len(nodes)), make([]time.Duration, len(nodes))
		firstHead, firstGet := make([]time.Duration, len(nodes)), make([]time.Duration, len(nodes))
		for i := range nodes {
			probe[i] = slices.Min(heads[i])
			download[i] = median(gets[i])
			firstHead[i], firstGet[i] = heads[i][0], gets[i][0]
		}
		res.n++
		if argmin(firstHead) == argmin(firstGet) {
			single++
		}
		h, g := argmin(probe), argmin(download)
		if h == g {
			agree++
			continue
		}
		misses++
		extra += download[h] - download[g]
	}
	if res.n == 0 {
		return res, fmt.Errorf("HEAD/GET experiment: no site answered every node")
	}
	if misses > 0 {
		res.extraMS = ms(extra) / float64(misses)
	}
	res.agreePct = 100 * float64(agree) / float64(res.n)
	res.singlePct = 100 * float64(single) / float64(res.n)
	return res, nil
}

// median returns the median of ds (the upper one of an even count).
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// argmin returns the index of the smallest duration; the first wins ties.
func argmin(ds []time.Duration) int {
	best := 0
	for i, d := range ds {
		if d < ds[best] {
			best = i
		}
	}
	return best
}

// Sites returns the IDs of the sites crawled.
func (r CrawlResult) Sites() []int { return slices.Clone(r.sites) }
