package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/micra-net/micra/internal/evaluate"
	"github.com/micra-net/micra/internal/realdata"
	"github.com/micra-net/micra/internal/world"
)

// structureJSON is bench structure's --json output.
type structureJSON struct {
	Real        evaluate.Structure `json:"real"`
	Generated   evaluate.Structure `json:"generated"`
	Geo         string             `json:"geo"`
	World       world.Params       `json:"world"`
	Attribution string             `json:"attribution,omitempty"`
}

// benchStructure compares how real addresses sit in the real hierarchy and
// on the map with how a generated world's sites do.
func benchStructure(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench structure", "[flags]", stderr)
	geoFile := fs.String("geo", "", "geolocation CSV `FILE` of real addresses (default: DB-IP City Lite in the data directory)")
	rows := fs.Int("rows", 100_000, "rows sampled from the geolocation file")
	sites := fs.Int("sites", 2000, "sites of the generated world")
	fromReal := fs.Bool("from-real", true, "derive the generated world's allocation structure from the real RIR and ip2asn data")
	seed := fs.Int64("seed", 1, "`seed` of the sample and of the generated world")
	dataDir := fs.String("data", "", "the shared data `DIR` (default: ../shared/data or $MICRA_DATA)")
	asJSON := fs.Bool("json", false, "print the statistics as one JSON object")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if *rows <= 0 || *sites <= 0 {
		return fmt.Errorf("%w: --rows and --sites must be positive", errUsage)
	}
	path := *geoFile
	if path == "" {
		var err error
		if path, err = dbipFile(*dataDir, "structure", ""); err != nil {
			return err
		}
	}
	g, info, err := evaluate.LoadGeo(ctx, evaluate.GeoConfig{Path: path, Sites: *rows, Seed: *seed, Nodes: 1, DataDir: *dataDir})
	if err != nil {
		return err
	}
	p := world.DefaultParams()
	p.Seed, p.Sites, p.Nodes, p.FromReal, p.DataDir = *seed, *sites, 1, *fromReal, *dataDir
	w, err := world.Generate(ctx, p)
	if err != nil {
		return err
	}
	tree, err := w.Tree(ctx)
	if err != nil {
		return err
	}
	out := structureJSON{Real: evaluate.Describe(g, info.Tree), Generated: evaluate.Describe(w, tree), Geo: path, World: w.Params()}
	if strings.Contains(strings.ToLower(path), "dbip") {
		out.Attribution = dbipAttribution
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "\treal (%d addresses)\tgenerated (%d sites)\t\n", out.Real.Sites, out.Generated.Sites)
	row := func(name string, f func(evaluate.Structure) string) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t\n", name, f(out.Real), f(out.Generated))
	}
	pct := func(v float64) string { return fmt.Sprintf("%.1f %%", 100*v) }
	row("organisations with 5+ sites", func(s evaluate.Structure) string { return fmt.Sprint(s.Orgs) })
	row("their sites at their most common place", func(s evaluate.Structure) string { return pct(s.OrgTopShare) })
	row("of them spanning more than 3,000 km", func(s evaluate.Structure) string { return pct(s.OrgFarShare) })
	row("sibling ranges' sites at one place", func(s evaluate.Structure) string {
		return fmt.Sprintf("%s of %d pairs", pct(s.SiblingSamePlace), s.SiblingPairs)
	})
	row("sibling ranges' sites in one country", func(s evaluate.Structure) string { return pct(s.SiblingSameCountry) })
	row("one allocation's ranges' sites at one place", func(s evaluate.Structure) string {
		return fmt.Sprintf("%s of %d pairs", pct(s.AllocSamePlace), s.AllocPairs)
	})
	row("consecutive allocations: median distance", func(s evaluate.Structure) string { return fmt.Sprintf("%.0f km", s.ConsecutiveKm) })
	row("consecutive allocations over 1,000 km apart", func(s evaluate.Structure) string { return pct(s.ConsecutiveFar) })
	if err := tw.Flush(); err != nil {
		return err
	}
	if out.Attribution != "" {
		fmt.Fprintf(stdout, "\n%s\n", out.Attribution)
	}
	return nil
}

// dbipFile returns DB-IP's geolocation file in the data directory (dataDir,
// $MICRA_DATA or ../shared/data), or an error saying that benchmark bench
// reads real addresses from it, with what else it can run on (alt).
func dbipFile(dataDir, bench, alt string) (string, error) {
	dir, err := realdata.Find(dataDir, world.DBIPFile)
	if err != nil {
		return "", fmt.Errorf("micra bench %s reads real addresses from DB-IP's file in the shared data, not in the repository (README, \"Data and licences\"); --geo FILE names another%s: %w", bench, alt, err)
	}
	return filepath.Join(dir, world.DBIPFile), nil
}
