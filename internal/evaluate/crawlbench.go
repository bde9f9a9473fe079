package evaluate

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"

	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/subnet"
)

// CrawlBench is one run of micra bench crawl: a world generated from
// World and served at time scale Scale, crawled as CrawlConfig says.
type CrawlBench struct {
	CrawlConfig
	World world.Params
	Scale float64
	// Decider, when set, returns CrawlConfig.Decide for the world once it
	// runs (DecidedByOverlay).
	Decider func(run *world.Running, tree *subnet.Tree) Decider
	// Attribution is the credit the geolocation data asks for wherever
	// results derived from it are shown ("": none).
	Attribution string
	Log         io.Writer // a description of the world (nil: none)
}

// CrawlBenchReport is what a CrawlBench measured (micra bench crawl --json
// prints it).
type CrawlBenchReport struct {
	World world.Params `json:"world"`
	Scale float64      `json:"scale"`
	CrawlReport
	Elapsed float64 `json:"elapsed_s"` // set by the caller
	// For the text: the world's latencies (world.World.DescribeLatency),
	// the modes run (all when empty), ModeCrawl's depth and the
	// attribution.
	Latency     string   `json:"-"`
	Modes       []string `json:"-"`
	Depth       int      `json:"-"`
	Attribution string   `json:"-"`
}

// RunCrawlBench generates b's world, serves it, and runs Crawl on it.
func RunCrawlBench(ctx context.Context, b CrawlBench) (CrawlBenchReport, error) {
	if b.Log == nil {
		b.Log = io.Discard
	}
	w, err := world.Generate(ctx, b.World)
	if err != nil {
		return CrawlBenchReport{}, err
	}
	tree, err := w.Tree(ctx)
	if err != nil {
		return CrawlBenchReport{}, fmt.Errorf("loading the world's registry: %w", err)
	}
	run, err := w.Start(ctx, world.TimeScale(b.Scale), world.Port(0), world.Logger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		return CrawlBenchReport{}, err
	}
	defer run.Close()
	fmt.Fprintf(b.Log, "world: %d sites, %d nodes, time scale %v; latencies: %s\n", len(w.Sites()), len(w.Nodes()), b.Scale, w.DescribeLatency())
	cfg := b.CrawlConfig
	if b.Decider != nil {
		cfg.Decide = b.Decider(run, tree)
	}
	rep, err := Crawl(ctx, run, tree, cfg)
	if err != nil {
		return CrawlBenchReport{}, err
	}
	depth := cfg.Depth
	if depth == 0 {
		depth = DefaultCrawlDepth
	}
	return CrawlBenchReport{World: w.Params(), Scale: b.Scale, CrawlReport: rep, Latency: w.DescribeLatency(), Modes: cfg.Modes,
		Depth: depth, Attribution: b.Attribution}, nil
}

// WriteText prints rep as bench crawl does without --json: what each
// mode did, the table (WriteCrawlTable), the attribution and the time it
// took.
func (rep CrawlBenchReport) WriteText(w io.Writer) error {
	ran := func(mode string) bool { return len(rep.Modes) == 0 || slices.Contains(rep.Modes, mode) }
	fmt.Fprintf(w, "%d sites, each crawled by the node its strategy assigns; times modelled (measured / %v); latencies: %s.\n", len(rep.Results[0].Sites()), rep.Scale, rep.Latency)
	if ran(ModeSequential) {
		fmt.Fprintf(w, "  %s: the front pages, one connection at a time per node (thesis 8.4).\n", ModeSequential)
	}
	if ran(ModeCrawl) {
		fmt.Fprintf(w, "  %s: micra's crawler on every node, polite (1 s between requests to a host) and concurrent, each site from its front page to depth %d.\n", ModeCrawl, rep.Depth)
	}
	fmt.Fprintln(w)
	for _, r := range rep.Results {
		if r.Strategy == Guided && r.DecidedBy == DecidedByOverlay {
			fmt.Fprintf(w, "%s decided in the overlay: %d micra nodes at the crawling nodes' addresses delegating the sites' subnets, as a running network does.\n", r.Strategy, r.Nodes)
			break
		}
	}
	if err := WriteCrawlTable(w, rep.CrawlReport); err != nil {
		return err
	}
	if rep.Attribution != "" {
		fmt.Fprintf(w, "\n%s\n", rep.Attribution)
	}
	_, err := fmt.Fprintf(w, "\n%.1f s\n", rep.Elapsed)
	return err
}
