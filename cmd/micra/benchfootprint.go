package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/micra-net/micra/internal/footprint"
	"github.com/micra-net/micra/node"
)

const footprintSynopsis = `[flags] [-- NODE FLAGS]

Measures the footprint of one volunteer node: a real "micra node" process
(this binary), joined to a small network on an emulated Internet served by
this process (two peers that coordinate shards but never crawl, and an
indexer), so that every site seeded is delegated to the measured node.
Its CPU time and memory are read from /proc every second: first idle
(joined, nothing to crawl) for --idle, then crawling at its bandwidth cap
for --crawl, after a warm-up in which the seeds are submitted and the
node reaches its cap. Flags after "--" are passed to the measured node
(e.g. -- --memory-limit 256MiB); GOGC and GOMEMLIMIT in the environment
reach it too, MICRA_* variables do not. Linux only.

Flags:`

// benchFootprint runs micra bench footprint: it parses the flags and runs
// internal/footprint with this binary as the measured node.
func benchFootprint(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench footprint", footprintSynopsis, stderr)
	idle := fs.Duration("idle", time.Minute, "how long to measure the joined node with nothing to crawl")
	crawlFor := fs.Duration("crawl", 2*time.Minute, "how long to measure the node crawling")
	bwFlag := fs.String("bandwidth", "1MiB", "the measured node's bandwidth cap per second, a `SIZE` (0: none)")
	warmup := fs.Duration("warmup", 30*time.Second, "longest wait, after seeding, for the node to reach its cap before the crawl is measured")
	settleFor := fs.Duration("settle", 10*time.Second, "wait after the node joined before the idle phase")
	sites := fs.Int("sites", 600, "sites of the emulated Internet, each seeded")
	depth := fs.Int("depth", 8, "link hops crawled from each site's home page")
	scale := fs.Float64("scale", 0.25, "the emulated Internet's time scale")
	seed := fs.Int64("seed", 1, "`seed` of the emulated Internet")
	dataDir := fs.String("data", "", "the shared data `DIR` (default: ../shared/data or $MICRA_DATA)")
	keep := fs.String("keep", "", "keep the data directories and logs in `DIR` (default: a temporary directory, removed)")
	asJSON := fs.Bool("json", false, "print the results as one JSON object")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	bw, err := node.ParseSize(*bwFlag)
	switch {
	case err != nil:
		return fmt.Errorf("%w: --bandwidth: %v", errUsage, err)
	case *idle < time.Second || *crawlFor < time.Second:
		return fmt.Errorf("%w: --idle and --crawl must be at least 1s", errUsage)
	case *idle > 24*time.Hour || *crawlFor > 24*time.Hour:
		return fmt.Errorf("%w: --idle and --crawl must be at most 24h", errUsage)
	case *warmup < 0 || *warmup > 10*time.Minute || *settleFor < 0 || *settleFor > 10*time.Minute:
		return fmt.Errorf("%w: --warmup and --settle must lie in [0, 10m]", errUsage)
	case *sites < 10 || *sites > 5000:
		return fmt.Errorf("%w: --sites %d must lie in [10, 5000]", errUsage, *sites)
	case *depth < 1 || *depth > 16:
		return fmt.Errorf("%w: --depth %d must lie in [1, 16]", errUsage, *depth)
	case *scale < 0.01 || *scale > 10:
		return fmt.Errorf("%w: --scale %v must lie in [0.01, 10]", errUsage, *scale)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this binary to run the node: %w", err)
	}
	rep, err := footprint.Run(ctx, footprint.Config{
		Exe: exe, Idle: *idle, Crawl: *crawlFor, Warmup: *warmup, Settle: *settleFor, Bandwidth: bw,
		Sites: *sites, Depth: *depth, Scale: *scale, Seed: *seed, Data: *dataDir, Keep: *keep,
		NodeArgs: fs.Args(), Progress: stderr,
	})
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(rep)
	}
	rep.Write(stdout)
	return nil
}
