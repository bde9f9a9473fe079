package main

import (
	"context"
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
	"github.com/micra-net/micra/subnet"
)

// benchCrawl runs evaluate.RunCrawlBench and prints its report; ipmicra+
// decides in a network of micra nodes (internal/swarm) unless --decide
// model.
func benchCrawl(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	b, out, inOverlay, err := parseBenchCrawl(args, stderr)
	if err != nil {
		return err
	}
	start := time.Now()
	if inOverlay {
		dir, err := os.MkdirTemp("", "micra-bench-crawl-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		b.Decider = overlayDecider(dir, b.Scale, b.Threshold, stderr)
	}
	b.Log = stderr
	rep, err := evaluate.RunCrawlBench(ctx, b)
	if err != nil {
		return err
	}
	return out.finish(stdout, start, &rep.Elapsed, &rep, func(f io.Writer) error { return evaluate.WriteCrawlCSV(f, rep.CrawlReport) },
		func(f io.Writer) error { return evaluate.PlotCrawl(f, rep.CrawlReport) })
}

// overlayDecider returns a Decider of evaluate.CrawlBench: the nodes
// decide in a network of micra overlays at their addresses, their data
// in dir.
func overlayDecider(dir string, scale float64, threshold time.Duration, stderr io.Writer) func(*world.Running, *subnet.Tree) evaluate.Decider {
	// Errors only: a node that did not stop cleanly, say.
	sc := swarm.Config{Dir: dir, Scale: scale, Threshold: threshold,
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))}
	return func(run *world.Running, tree *subnet.Tree) evaluate.Decider {
		return func(ctx context.Context, nodes []netip.Addr, sites []world.Site) (map[int]netip.Addr, int64, error) {
			sc.Nodes = nodes
			a, err := swarm.Decide(ctx, run, tree, sc, sites)
			return a.Node, a.Probes, err
		}
	}
}

// parseBenchCrawl parses bench crawl's flags; inOverlay says whether
// ipmicra+ decides in a network of micra nodes (--decide overlay).
func parseBenchCrawl(args []string, stderr io.Writer) (b evaluate.CrawlBench, out benchOutputs, inOverlay bool, err error) {
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
	fs.BoolVar(&out.asJSON, "json", false, "print the results as one JSON object")
	fs.StringVar(&out.csv, "csv", "", "write the results as CSV to `FILE`")
	fs.StringVar(&out.plot, "plot", "", "write a PNG bar chart to `FILE`")
	if err := parseNoArgs(fs, args); err != nil {
		return b, out, false, err
	}
	switch {
	case *mode != evaluate.ModeSequential && *mode != evaluate.ModeCrawl && *mode != "both":
		return b, out, false, fmt.Errorf("%w: --mode %q: sequential, crawl or both", errUsage, *mode)
	case *maxPages < 20 || *maxPages > 400:
		return b, out, false, fmt.Errorf("%w: --max-pages %d must lie in [20, 400]", errUsage, *maxPages)
	case *depth < 1 || *depth > 8:
		return b, out, false, fmt.Errorf("%w: --depth %d must lie in [1, 8]", errUsage, *depth)
	case *decide != evaluate.DecidedByOverlay && *decide != evaluate.DecidedByModel:
		return b, out, false, fmt.Errorf("%w: --decide %q: overlay or model", errUsage, *decide)
	case *nodes < 1 || *nodes > 1000:
		return b, out, false, fmt.Errorf("%w: --nodes %d must lie in [1, 1000]", errUsage, *nodes)
	case *sites < 1 || *sites > 5000:
		return b, out, false, fmt.Errorf("%w: --sites %d must lie in [1, 5000]", errUsage, *sites)
	case *crawled < 0 || *agreement < 0:
		return b, out, false, fmt.Errorf("%w: --crawl-sites and --agreement must not be negative", errUsage)
	case *threshold < 1 || *threshold > 1000:
		return b, out, false, fmt.Errorf("%w: --threshold %d must lie in [1, 1000] ms", errUsage, *threshold)
	case *scale < 0.01 || *scale > 10:
		return b, out, false, fmt.Errorf("%w: --scale %v must lie in [0.01, 10]", errUsage, *scale)
	}
	b.CrawlConfig = evaluate.CrawlConfig{Nodes: *nodes, Seed: *seed, Threshold: time.Duration(*threshold) * time.Millisecond,
		Sites: *crawled, Agreement: *agreement, Depth: *depth}
	if *mode != "both" {
		b.Modes = []string{*mode}
	}
	for _, s := range strings.Split(*stratFlag, ",") {
		b.Strategies = append(b.Strategies, strings.TrimSpace(s))
	}
	b.World = world.DefaultParams()
	b.World.Seed, b.World.Sites, b.World.Nodes, b.World.FromReal, b.World.DataDir, b.World.Port, b.World.Geo = *seed, *sites, *nodes, *geoFile == "", *dataDir, 0, *geoFile
	b.World.MaxPages, b.World.Latency = *maxPages, latency
	b.Scale, b.Attribution = *scale, attributionFor(*geoFile)
	return b, out, *decide == evaluate.DecidedByOverlay, nil
}
