package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/micra-net/micra/internal/evaluate"
	"github.com/micra-net/micra/internal/swarm"
	"github.com/micra-net/micra/internal/world"
)

// benchCrawlJSON is bench crawl's --json output.
type benchCrawlJSON struct {
	World world.Params `json:"world"`
	Scale float64      `json:"scale"`
	evaluate.CrawlReport
	Elapsed float64 `json:"elapsed_s"`
}

func benchCrawl(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench crawl", "[flags]", stderr)
	seed := fs.Int64("seed", 1, "`seed` of the world, the node subset, the site order and the random assignment")
	sites := fs.Int("sites", 1000, "sites of the world; with --geo, rows sampled from the file")
	nodes := fs.Int("nodes", 12, "nodes crawling, each at its own world address")
	geoFile := fs.String("geo", "", "a real-geo world: sites are real addresses from the geolocation CSV `FILE` at their real places, in the real hierarchy's shape")
	maxPages := fs.Int("max-pages", 50, "most pages of one site in the world (its crawl mode's largest site sets every strategy's makespan)")
	crawled := fs.Int("crawl-sites", 300, "sites crawled, drawn with the seed (0: every site's but the flaky ones' and those whose robots.txt fails)")
	agreement := fs.Int("agreement", 100, "sites of the HEAD/GET experiment (0 skips it)")
	threshold := fs.Int("threshold", 50, "the searches' probing threshold in `MS`")
	stratFlag := fs.String("strategies", strings.Join(evaluate.CrawlStrategies, ","), "assignments compared: "+strings.Join(evaluate.CrawlStrategies, ", "))
	decide := fs.String("decide", evaluate.DecidedByOverlay, "where ipmicra+ decides: overlay (a network of micra nodes at the crawling nodes' addresses, as a running network does) or model (the search run in the benchmark, probes answered by the world's model, as for the other strategies)")
	mode := fs.String("mode", "both", "sequential: each node downloads the front pages of its sites one connection at a time (thesis 8.4); crawl: each node runs micra's crawler, with its politeness and concurrency, on its sites to --depth; both")
	depth := fs.Int("depth", evaluate.DefaultCrawlDepth, "link hops the crawl mode follows from each front page, within the site")
	scale := fs.Float64("scale", 0.25, "the world's time scale: every modelled delay is multiplied by it (times are reported unscaled)")
	dataDir := fs.String("data", "", "the shared data `DIR` (default: ../shared/data or $MICRA_DATA)")
	var latency string
	latencyFlag(fs, &latency)
	asJSON := fs.Bool("json", false, "print the results as one JSON object")
	csvOut := fs.String("csv", "", "write the results as CSV to `FILE`")
	plotOut := fs.String("plot", "", "write a PNG bar chart to `FILE`")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	switch {
	case *mode != evaluate.ModeSequential && *mode != evaluate.ModeCrawl && *mode != "both":
		return fmt.Errorf("%w: --mode %q: sequential, crawl or both", errUsage, *mode)
	case *maxPages < 20 || *maxPages > 400:
		return fmt.Errorf("%w: --max-pages %d must lie in [20, 400]", errUsage, *maxPages)
	case *depth < 1 || *depth > 8:
		return fmt.Errorf("%w: --depth %d must lie in [1, 8]", errUsage, *depth)
	case *decide != evaluate.DecidedByOverlay && *decide != evaluate.DecidedByModel:
		return fmt.Errorf("%w: --decide %q: overlay or model", errUsage, *decide)
	case *nodes < 1 || *nodes > 1000:
		return fmt.Errorf("%w: --nodes %d must lie in [1, 1000]", errUsage, *nodes)
	case *sites < 1 || *sites > 5000:
		return fmt.Errorf("%w: --sites %d must lie in [1, 5000]", errUsage, *sites)
	case *crawled < 0 || *agreement < 0:
		return fmt.Errorf("%w: --crawl-sites and --agreement must not be negative", errUsage)
	case *threshold < 1 || *threshold > 1000:
		return fmt.Errorf("%w: --threshold %d must lie in [1, 1000] ms", errUsage, *threshold)
	case *scale < 0.01 || *scale > 10:
		return fmt.Errorf("%w: --scale %v must lie in [0.01, 10]", errUsage, *scale)
	}
	cfg := evaluate.CrawlConfig{Nodes: *nodes, Seed: *seed, Threshold: time.Duration(*threshold) * time.Millisecond,
		Sites: *crawled, Agreement: *agreement, Depth: *depth}
	if *mode != "both" {
		cfg.Modes = []string{*mode}
	}
	for _, s := range strings.Split(*stratFlag, ",") {
		cfg.Strategies = append(cfg.Strategies, strings.TrimSpace(s))
	}

	start := time.Now()
	p := world.DefaultParams()
	p.Seed, p.Sites, p.Nodes, p.FromReal, p.DataDir, p.Port, p.Geo = *seed, *sites, *nodes, *geoFile == "", *dataDir, 0, *geoFile
	p.MaxPages, p.Latency = *maxPages, latency
	w, err := world.Generate(ctx, p)
	if err != nil {
		return err
	}
	tree, err := w.Tree(ctx)
	if err != nil {
		return fmt.Errorf("loading the world's registry: %w", err)
	}
	run, err := w.Start(ctx, world.TimeScale(*scale), world.Port(0), world.Logger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		return err
	}
	defer run.Close()
	fmt.Fprintf(stderr, "world: %d sites, %d nodes, time scale %v; latencies: %s\n", len(w.Sites()), len(w.Nodes()), *scale, w.DescribeLatency())
	if *decide == evaluate.DecidedByOverlay {
		dir, err := os.MkdirTemp("", "micra-bench-crawl-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		// Errors only: a node that did not stop cleanly, say.
		sc := swarm.Config{Dir: dir, Scale: *scale, Threshold: cfg.Threshold,
			Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))}
		cfg.Decide = func(ctx context.Context, nodes []netip.Addr, sites []world.Site) (map[int]netip.Addr, int64, error) {
			sc.Nodes = nodes
			a, err := swarm.Decide(ctx, run, tree, sc, sites)
			return a.Node, a.Probes, err
		}
	}
	rep, err := evaluate.Crawl(ctx, run, tree, cfg)
	if err != nil {
		return err
	}
	if *csvOut != "" {
		if err := writeFile(*csvOut, func(f io.Writer) error { return evaluate.WriteCrawlCSV(f, rep) }); err != nil {
			return err
		}
	}
	if *plotOut != "" {
		if err := writeFile(*plotOut, func(f io.Writer) error { return evaluate.PlotCrawl(f, rep) }); err != nil {
			return err
		}
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(benchCrawlJSON{World: w.Params(), Scale: *scale, CrawlReport: rep, Elapsed: time.Since(start).Seconds()})
	}
	fmt.Fprintf(stdout, "%d sites, each crawled by the node its strategy assigns; times modelled (measured / %v); latencies: %s.\n", len(rep.Results[0].Sites()), *scale, w.DescribeLatency())
	if *mode != evaluate.ModeCrawl {
		fmt.Fprintf(stdout, "  %s: the front pages, one connection at a time per node (thesis 8.4).\n", evaluate.ModeSequential)
	}
	if *mode != evaluate.ModeSequential {
		fmt.Fprintf(stdout, "  %s: micra's crawler on every node, polite (1 s between requests to a host) and concurrent, each site from its front page to depth %d.\n", evaluate.ModeCrawl, *depth)
	}
	fmt.Fprintln(stdout)
	for _, r := range rep.Results {
		if r.Strategy == evaluate.Guided && r.DecidedBy == evaluate.DecidedByOverlay {
			fmt.Fprintf(stdout, "%s decided in the overlay: %d micra nodes at the crawling nodes' addresses delegating the sites' subnets, as a running network does.\n", r.Strategy, r.Nodes)
			break
		}
	}
	if err := evaluate.WriteCrawlTable(stdout, rep); err != nil {
		return err
	}
	if *geoFile != "" && strings.Contains(strings.ToLower(*geoFile), "dbip") {
		fmt.Fprintf(stdout, "\n%s\n", dbipAttribution)
	}
	fmt.Fprintf(stdout, "\n%.1f s\n", time.Since(start).Seconds())
	return nil
}
