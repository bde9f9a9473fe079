package evaluate

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/subnet"
)

// What a probe answers (DelegationBench.Probes).
const (
	ProbesModel  = "model"  // the world's true mean RTT (ModelProber)
	ProbesJitter = "jitter" // the least of 3 samples of the world's per-request jitter (JitterProber)
)

// DelegationBench is one run of micra bench delegation: the world it
// evaluates, on what probes, and the experiments' Config.
type DelegationBench struct {
	Config
	Seed   int64  // of the jitter and of the progressive run
	Probes string // ProbesModel or ProbesJitter
	// The world: a real-geo one when Geo.Path is set, else the one micra
	// world gen wrote in Dir, else one generated from Params.
	Geo    GeoConfig
	Dir    string
	Data   string // the shared data directory for Dir ("": the default search)
	Params world.Params
	// Attribution is the credit the geolocation data asks for wherever
	// results derived from it are shown ("": none).
	Attribution string
	Log         io.Writer // a description of the world (nil: none)
}

// DelegationBenchReport is what a DelegationBench measured (micra bench
// delegation --json prints it).
type DelegationBenchReport struct {
	World       world.Params `json:"world"`
	Geo         *GeoSummary  `json:"geo,omitempty"` // a real-geo world
	Probes      string       `json:"probes"`
	Latency     string       `json:"latency"` // world.LatencyMatrix or world.LatencyModel
	WorldSites  int          `json:"world_sites"`
	Seeds       []int64      `json:"seeds"`
	SplitMS     int          `json:"split_ms"` // 0: whole ranges
	Results     []Result     `json:"results"`
	Progressive []Curve      `json:"progressive"`
	Paper       []Paper      `json:"paper"`
	Elapsed     float64      `json:"elapsed_s"` // set by the caller
	// TrainFraction is the training split's (Config.TrainFraction).
	TrainFraction float64 `json:"-"`
}

// GeoSummary describes a real-geo world in a DelegationBenchReport.
type GeoSummary struct {
	world.GeoFileStats
	Dropped     int    `json:"dropped"`  // sites dropped: repeated addresses, no subnet
	Snapshot    string `json:"snapshot"` // the hierarchy searched
	Nodes       int    `json:"nodes"`    // nodes placed (the node sets are drawn from them)
	Attribution string `json:"attribution,omitempty"`
}

// RunDelegationBench runs b: the training split (Split) and, when
// b.Progressive > 0, progressive learning (Progressive) with 12 nodes,
// or b.Nodes[0] when 12 is not among them.
func RunDelegationBench(ctx context.Context, b DelegationBench) (DelegationBenchReport, error) {
	if b.Log == nil {
		b.Log = io.Discard
	}
	w, tree, rep, err := delegationWorld(ctx, b)
	if err != nil {
		return DelegationBenchReport{}, err
	}
	var prober Prober = ModelProber{World: w}
	if b.Probes == ProbesJitter {
		prober = JitterProber{World: w, Seed: uint64(b.Seed)}
	}
	if rep.Results, err = Split(ctx, w, tree, prober, b.Config); err != nil {
		return DelegationBenchReport{}, err
	}
	if b.Progressive > 0 {
		k := 12
		if !slices.Contains(b.Nodes, k) {
			k = b.Nodes[0]
		}
		if rep.Progressive, err = Progressive(ctx, w, tree, prober, k, b.Seed, b.Config); err != nil {
			return DelegationBenchReport{}, err
		}
	}
	rep.Probes, rep.SplitMS, rep.WorldSites, rep.Seeds = b.Probes, int(b.Split/time.Millisecond), len(w.Sites()), b.Seeds
	rep.Paper, rep.TrainFraction = Published, b.TrainFraction
	return rep, nil
}

// delegationWorld loads or generates b's world and describes it to
// b.Log; the report holds the world's parameters or geo summary and its
// latency source.
func delegationWorld(ctx context.Context, b DelegationBench) (World, *subnet.Tree, DelegationBenchReport, error) {
	var rep DelegationBenchReport
	if b.Geo.Path != "" {
		g, info, err := LoadGeo(ctx, b.Geo)
		if err != nil {
			return nil, nil, rep, err
		}
		tree := info.Tree
		rep.Latency = g.Latency()
		rep.Geo = &GeoSummary{GeoFileStats: info.File, Dropped: g.Dropped(), Snapshot: tree.ID().String(), Nodes: len(g.Nodes()), Attribution: b.Attribution}
		fmt.Fprintf(b.Log, "real-geo world: %d sites of %d rows (%d kept) in %s (%d malformed rows skipped, %d sites dropped), %d nodes placed, real hierarchy %s\n",
			len(g.Sites()), info.File.Rows, info.File.Kept, b.Geo.Path, info.File.Skipped, g.Dropped(), len(g.Nodes()), tree.ID().Short())
		for _, ex := range info.File.Examples {
			fmt.Fprintf(b.Log, "  skipped %s\n", ex)
		}
		return g, tree, rep, nil
	}
	var gw *world.World
	var err error
	if b.Dir != "" {
		gw, err = world.Load(ctx, b.Dir, b.Data)
	} else {
		gw, err = world.Generate(ctx, b.Params)
	}
	if err != nil {
		return nil, nil, rep, err
	}
	tree, err := gw.Tree(ctx)
	if err != nil {
		return nil, nil, rep, fmt.Errorf("loading the world's registry: %w", err)
	}
	rep.World, rep.Latency = gw.Params(), gw.Params().Latency
	fmt.Fprintf(b.Log, "world: %d sites, %d nodes, %d ranges (snapshot %s); latencies: %s\n", len(gw.Sites()), len(gw.Nodes()), tree.Len()-2, tree.ID().Short(), gw.DescribeLatency())
	return gw, tree, rep, nil
}

// WriteText prints rep as bench delegation does without --json: the
// training split's table, the progressive curves, the attribution and
// the time it took.
func (rep DelegationBenchReport) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "Training split (thesis 8.6): %.0f %% of the sites delegated optimally, the rest by each strategy; mean ± sd over %d seeds; probes: %s; latencies: %s.\n\n",
		100*rep.TrainFraction, len(rep.Seeds), rep.Probes, rep.Latency)
	if err := WriteTable(w, rep.Results); err != nil {
		return err
	}
	if len(rep.Progressive) > 0 {
		fmt.Fprintf(w, "\nProgressive learning (thesis 7.7), IPMicra from a clean start:\n\n")
		if err := WriteCurves(w, rep.Progressive); err != nil {
			return err
		}
	}
	if rep.Geo != nil && rep.Geo.Attribution != "" {
		fmt.Fprintf(w, "\n%s\n", rep.Geo.Attribution)
	}
	_, err := fmt.Fprintf(w, "\n%.1f s\n", rep.Elapsed)
	return err
}
