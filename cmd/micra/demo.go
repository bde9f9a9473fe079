package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/micra-net/micra/internal/demo"
)

func init() {
	commands["demo"] = command{"the whole system in one process: an emulated Internet, volunteer nodes, an indexer", runDemo}
}

const demoSynopsis = `[flags]

Starts the emulated Internet (sites, DNS and latencies, on loopback), N
volunteer nodes bootstrapping from the first, and one indexer, all in this
process; seeds a crawl of every site; shows the progress; and ends, when
the crawl is done or at --duration, with the quality of the delegations
(optimal %, probes, excess RTT), the crawl speed-up and a sample search.
Every node's dashboard is reachable while the demo runs (--linger keeps
them up after the summary). Private networks are allowed for the demo's
nodes only. It takes about two and a half minutes: a few seconds to join,
the crawl up to --duration, the summary.

The latencies are the real WonderProxy RTT matrix when the shared data is
found (../shared/data beside the checkout, $MICRA_DATA or --data), else the
embedded latency model fitted to it (docs/latency-model.md).

Flags:`

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", demoSynopsis, stderr)
	var c demo.Config
	fs.IntVar(&c.Nodes, "nodes", 12, "volunteer nodes (2 to 50)")
	fs.IntVar(&c.Sites, "sites", 150, "web sites of the emulated Internet")
	fs.Int64Var(&c.Seed, "seed", 1, "seed of the emulated Internet")
	fs.Float64Var(&c.Scale, "scale", 0.2, "time scale of the emulated Internet's delays (1: real latencies)")
	fs.DurationVar(&c.Threshold, "threshold", 50*time.Millisecond, "IPMicra's probing threshold (unscaled)")
	fs.DurationVar(&c.Split, "split", 10*time.Millisecond, "a node that finds a server this much (and 1.5 times) slower than the probe it won the server's range with has the part of the range holding it delegated apart (unscaled; 0: never)")
	fs.IntVar(&c.Depth, "depth", 2, "link depth of the crawl from each site's home page")
	fs.DurationVar(&c.Duration, "duration", 2*time.Minute, "longest time the crawl runs before the summary")
	fs.StringVar(&c.DataDir, "data", "", "the shared data `DIR` (default: ../shared/data or $MICRA_DATA)")
	latencyFlag(fs, &c.Latency)
	fs.StringVar(&c.Geo, "geo", "", "a real-geo world: sites drawn from the geolocation CSV `FILE` (such as DB-IP's under the data directory), at their real places, in the real hierarchy's shape mapped into 127/8")
	fs.StringVar(&c.Org, "org", "", "with --geo: only the rows whose organisation in the real hierarchy has a name containing `TEXT` (one organisation's prefixes, e.g. Amazon's)")
	fs.StringVar(&c.Keep, "keep", "", "keep the nodes' and the indexer's data in `DIR` (default: a temporary directory, removed)")
	fs.BoolVar(&c.LatencyMap, "map", false, "give the guided search a latency map: the nodes' locations (the emulated Internet's) and the RTT matrix (see micra bench delegation --map)")
	fs.BoolVar(&c.WorldRTTs, "world-rtts", false, "give the guided search the world's RTTs between the nodes instead of what the nodes measure (the nodes' libp2p traffic crosses emulated links with the world's latencies, and the overlays measure it, as a real network does)")
	fs.IntVar(&c.Submitters, "submitters", 4, "seeds submitted at once, each through another node")
	fs.StringVar(&c.Store, "store", "", "keep the indexer's index in the PostgreSQL database `DSN` (postgres://user@host/db; its micra schema must be empty or micra's) instead of its own database")
	fs.BoolVar(&c.Linger, "linger", false, "after the summary, keep everything running until interrupted")
	fs.BoolVar(&c.Verbose, "v", false, "log at debug level (to the log file the demo names at its start; kept after it)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() != 0:
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	case c.Submitters < 1 || c.Submitters > 64:
		return fmt.Errorf("%w: --submitters must be 1 to 64", errUsage)
	case c.Nodes < 2 || c.Nodes > 50:
		return fmt.Errorf("%w: --nodes must be 2 to 50", errUsage)
	case c.Sites < 10 || c.Sites > 5000:
		return fmt.Errorf("%w: --sites must be 10 to 5000", errUsage)
	case c.Scale <= 0 || c.Scale > 1:
		return fmt.Errorf("%w: --scale must be in (0, 1]", errUsage)
	case c.Org != "" && c.Geo == "":
		return fmt.Errorf("%w: --org needs --geo", errUsage)
	case c.Split < 0:
		return fmt.Errorf("%w: --split must not be negative", errUsage)
	case c.Threshold <= 0 || c.Depth < 0 || c.Depth > 8 || c.Duration <= 0 || c.Duration > time.Hour:
		return fmt.Errorf("%w: --threshold, --depth (0-8) or --duration (up to 1h) out of range", errUsage)
	}
	if c.Split == 0 {
		c.Split = -1 // demo.Config's zero is the default
	}
	return demo.Run(ctx, c, stdout, stderr)
}
