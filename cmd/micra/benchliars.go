package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/micra-net/micra/internal/evaluate"
	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/subnet"
)

// liarsJSON is bench liars' JSON.
type liarsJSON struct {
	World       string                `json:"world"` // "geo FILE" or "generated"
	Results     []evaluate.LiarResult `json:"results"`
	Attribution string                `json:"attribution,omitempty"`
	Elapsed     float64               `json:"elapsed_s"`
}

func benchLiars(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench liars", "[flags]", stderr)
	geoFile := fs.String("geo", "", "sites are real addresses from the geolocation CSV `FILE` (default: DB-IP City Lite in the data directory), in the real hierarchy, with the real RTT matrix")
	generated := fs.Bool("generated", false, "run on a generated world instead of real addresses")
	sites := fs.Int("sites", 1000, "sites: rows sampled from the geolocation file, or of the generated world")
	nodes := fs.Int("nodes", 50, "nodes in each run")
	liars := fs.Int("liars", 5, "of them liars")
	fraction := fs.Float64("fraction", 0.5, "the scaled liar's share of the truth")
	seed := fs.Int64("seed", 1, "first `seed`: of the world and of the runs")
	repeats := fs.Int("repeats", 2, "runs with seeds seed, seed+1, ...: other nodes, liars and site orders")
	factor := fs.Float64("factor", 0, "the check's Factor (0: the default, 2.5)")
	floor := fs.Bool("floor", false, "the check with its floor: a claim counts for no less than the witnesses show by the plain triangle inequality (subnet.ClaimCheck.Floor)")
	slack := fs.Duration("slack", 0, "the check's Slack (0: the default, 20ms)")
	agree := fs.Int("agree", 0, "witnesses that must agree (0: the default, 2)")
	extra := fs.Int("extra", 0, "witnesses a check may ask (0: the default, 3)")
	dataDir := fs.String("data", "", "the shared data `DIR` (default: ../shared/data or $MICRA_DATA)")
	asJSON := fs.Bool("json", false, "print the results as one JSON object")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	switch {
	case *sites <= 0 || *nodes <= 1 || *repeats <= 0:
		return fmt.Errorf("%w: --sites, --repeats must be positive and --nodes at least 2", errUsage)
	case *liars < 0 || *liars >= *nodes:
		return fmt.Errorf("%w: --liars %d must lie in [0, --nodes)", errUsage, *liars)
	case *fraction <= 0 || *fraction >= 1:
		return fmt.Errorf("%w: --fraction %v must lie in (0, 1)", errUsage, *fraction)
	case *factor < 0 || *slack < 0 || *agree < 0 || *extra < 0:
		return fmt.Errorf("%w: the check's settings must not be negative", errUsage)
	case *generated && *geoFile != "":
		return fmt.Errorf("%w: --generated and --geo exclude each other", errUsage)
	}
	start := time.Now()
	var (
		w    evaluate.World
		tree *subnet.Tree
		out  liarsJSON
	)
	if *generated {
		p := world.DefaultParams()
		// Decoys are world nodes outside the run: twice as many nodes.
		p.Seed, p.Sites, p.Nodes, p.FromReal, p.DataDir = *seed, *sites, 2**nodes, true, *dataDir
		gw, err := world.Generate(ctx, p)
		if err != nil {
			return err
		}
		if tree, err = gw.Tree(ctx); err != nil {
			return fmt.Errorf("loading the world's registry: %w", err)
		}
		w, out.World = gw, "generated"
	} else {
		path := *geoFile
		if path == "" {
			var err error
			if path, err = dbipFile(*dataDir, "liars", ", --generated runs on a generated world"); err != nil {
				return err
			}
		}
		g, info, err := evaluate.LoadGeo(ctx, evaluate.GeoConfig{Path: path, Sites: *sites, Seed: *seed, Nodes: 2 * *nodes, DataDir: *dataDir})
		if err != nil {
			return err
		}
		w, tree, out.World = g, info.Tree, "geo "+path
		out.Attribution = attributionFor(path)
	}
	sw := evaluate.LiarSweep{Nodes: *nodes, Liars: *liars, Sites: *sites, Fraction: *fraction,
		Check: subnet.ClaimCheck{Factor: *factor, Slack: *slack, Agree: *agree, Extra: *extra, Floor: *floor}}
	for i := range *repeats {
		sw.Seeds = append(sw.Seeds, *seed+int64(i))
	}
	var err error
	if out.Results, err = evaluate.SweepLiars(ctx, w, tree, sw); err != nil {
		return err
	}
	out.Elapsed = time.Since(start).Seconds()
	if *asJSON {
		return json.NewEncoder(stdout).Encode(out)
	}
	fmt.Fprintf(stdout, "%d nodes, %d of them liars, %d sites (%s), seeds %v; summed over the seeds.\n\n", *nodes, *liars, len(w.Sites()), out.World, sw.Seeds)
	if err := evaluate.WriteLiarTable(stdout, out.Results); err != nil {
		return err
	}
	if out.Attribution != "" {
		fmt.Fprintf(stdout, "\n%s\n", out.Attribution)
	}
	fmt.Fprintf(stdout, "\n%.1f s\n", out.Elapsed)
	return nil
}
