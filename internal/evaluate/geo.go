package evaluate

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/micra-net/micra/internal/geo"

	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/subnet"
	"github.com/micra-net/micra/subnet/embedded"
)

// GeoConfig describes a real-geo world for an evaluation (LoadGeo).
type GeoConfig struct {
	Path    string // geolocation CSV (package geo's format)
	Sites   int    // rows sampled as sites (0: all)
	Strict  bool   // a malformed row is an error
	Seed    int64  // sample, addresses, node places
	Nodes   int    // the most nodes an evaluation will use
	DataDir string // the shared data directory ("" finds it)
	Latency string // where RTTs come from: world.LatencyMatrix, world.LatencyModel, "" the matrix when found
	// Org keeps only the rows whose range's organisation (its own or its
	// nearest ancestor's, in the real hierarchy) has a name containing
	// Org, case folded: one organisation's prefixes, such as a cloud's.
	Org string
}

// GeoInfo says what LoadGeo read and searched.
type GeoInfo struct {
	File world.GeoFileStats
	Tree *subnet.Tree // the real hierarchy: the built-in snapshot
}

// LoadGeo builds the real-geo world cfg describes: cfg.Sites real
// addresses sampled from the file, looked up in the built-in real
// hierarchy (subnet/embedded) with their own addresses, and a pool of
// nodes at the latency data's locations: one per location, or cfg.Nodes
// when that is more, so that every repetition of an evaluation draws its
// node set from every location (pickNodes prefers distinct ones).
func LoadGeo(ctx context.Context, cfg GeoConfig) (*world.Geo, GeoInfo, error) {
	var info GeoInfo
	locs, err := world.LoadLocations(cfg.DataDir, cfg.Latency)
	if err != nil {
		return nil, info, err
	}
	tree, err := embedded.Tree()
	if err != nil {
		return nil, info, fmt.Errorf("loading the built-in hierarchy: %w", err)
	}
	info.Tree = tree
	var keep func(geo.Row, netip.Addr) bool
	if cfg.Org != "" {
		in := world.OrgFilter(tree, cfg.Org)
		keep = func(_ geo.Row, a netip.Addr) bool { return in(a) }
	}
	sites, st, err := world.ReadGeoSites(cfg.Path, cfg.Sites, cfg.Seed, cfg.Strict, keep)
	info.File = st
	if err != nil {
		return nil, info, err
	}
	g, err := world.NewGeo(ctx, sites, tree, world.GeoParams{Seed: cfg.Seed, Nodes: max(cfg.Nodes, len(locs)), DataDir: cfg.DataDir, Latency: cfg.Latency})
	if err != nil {
		return nil, info, err
	}
	if len(g.Sites()) == 0 {
		return nil, info, fmt.Errorf("%s: no site has a subnet in the hierarchy", cfg.Path)
	}
	return g, info, nil
}
