package world

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/micra-net/micra/subnet"
)

// The real-geo latency model (Geo). A site is a real address at the
// coordinates its geolocation gives; its RTT to a node is the measured
// WonderProxy RTT between the node's location and the location nearest to
// the site (IntraCityRTT when they are the same), plus the site's last mile
// over the remaining distance, plus the node's own access delay.
const (
	// fibreKmPerMs is how far light travels in fibre in one millisecond,
	// one way (about two thirds of c).
	fibreKmPerMs = 200.0
	// pathInflation is how much longer a real path is than the great
	// circle. The WonderProxy matrix's own slope of RTT over distance,
	// between pairs 300 to 5,000 km apart, is 1.8 to 2.3 times the fibre's
	// (medians per distance band: 15.0 ms at 200-500 km, 25.6 at
	// 500-1,000, 41.0 at 1,000-2,000, 74.5 at 2,000-5,000); 2 is its middle.
	pathInflation = 2.0
	// geoAccessMin and geoAccessMax bound a node's access delay in ms (its
	// own link to the first router: fibre to DSL), drawn uniformly per
	// node so that nodes sharing a location are never tied.
	geoAccessMin, geoAccessMax = 1.0, 10.0
	// maxGeoSites bounds the sites of a real-geo world.
	maxGeoSites = 1_000_000
)

// LastMileMS returns the real-geo model's last-mile RTT in ms over km
// kilometres: there and back at fibre speed along a path pathInflation
// times the great circle.
func LastMileMS(km float64) float64 { return 2 * km * pathInflation / fibreKmPerMs }

// Place is where a real-geo world puts a site: the coordinates its
// geolocation gives, and how far that is from the nearest location of the
// latency data (Site.Loc).
type Place struct {
	Lat, Lon float64
	Country  string  // ISO 3166 alpha-2 as the geolocation gives it; "" when unknown
	City     string  // as the geolocation gives it
	KmToLoc  float64 // great-circle distance to Site.Loc
}

// GeoSite is one real address at a real place, as read from a
// geolocation file: a site of a real-geo world.
type GeoSite struct {
	Addr     netip.Addr
	Lat, Lon float64 // degrees
	Country  string
	City     string
}

// GeoParams describes a real-geo world. The zero values of IntraCityRTT and
// Jitter mean the generated world's defaults (2 ms, 1).
type GeoParams struct {
	Seed         int64   // places and addresses of the nodes, their access delays
	Nodes        int     // volunteer nodes, 1 to 10,000
	DataDir      string  // the data directory; "" finds it (see FindDataDir)
	Latency      string  // where the RTTs come from, as Params.Latency; NewGeo records the one it used
	IntraCityRTT float64 // ms between two places at one location, before last miles and access delays
	Jitter       float64 // multiplier of the per-request jitter (as Params.Jitter); negative disables it
}

// Geo is a real-geo world: real addresses placed at their real coordinates,
// looked up in a real hierarchy, with nodes at locations of the real latency
// matrix. It has no servers or pages: it answers what evaluations need
// (sites, nodes, true RTTs) with the same methods as World. A Geo is
// immutable and safe for concurrent use.
type Geo struct {
	p       GeoParams
	lat     *latencyData
	sites   []Site
	nodes   []Node
	ep      map[netip.Addr]endpoint // every site's and node's address
	isNode  map[netip.Addr]struct{}
	dropped int
}

// NewGeo places sites and p.Nodes nodes. Each site keeps its address and
// coordinates, at the nearest location of the latency data, and gets its
// subnet and organisation from tree (the smallest non-unary range of its
// address); a site whose address repeats an earlier one, or that has no
// range below a root in tree, is dropped and counted (Dropped). Nodes sit
// at the latency data's locations, taken in a random order (a new order
// each time all are taken), each with its own access delay, at an address
// drawn from the registry allocations of its location's country in tree;
// its own subnet is that address's smallest non-unary range. The same
// inputs give the same Geo.
func NewGeo(ctx context.Context, sites []GeoSite, tree *subnet.Tree, p GeoParams) (*Geo, error) {
	switch {
	case p.Nodes < 1 || p.Nodes > 10_000:
		return nil, fmt.Errorf("%w: nodes must be 1 to 10000, got %d", ErrParams, p.Nodes)
	case len(sites) > maxGeoSites:
		return nil, fmt.Errorf("%w: more than %d sites", ErrParams, maxGeoSites)
	case p.IntraCityRTT < 0 || p.IntraCityRTT > 50:
		return nil, fmt.Errorf("%w: intra-city RTT must be 0 to 50 ms, got %v", ErrParams, p.IntraCityRTT)
	case p.Jitter > 10:
		return nil, fmt.Errorf("%w: jitter must be at most 10, got %v", ErrParams, p.Jitter)
	case tree == nil:
		return nil, fmt.Errorf("%w: no hierarchy", ErrParams)
	}
	if p.IntraCityRTT == 0 {
		p.IntraCityRTT = DefaultParams().IntraCityRTT
	}
	switch {
	case p.Jitter == 0:
		p.Jitter = DefaultParams().Jitter
	case p.Jitter < 0:
		p.Jitter = 0
	}
	lat, _, used, err := findLatency(p.DataDir, p.Latency)
	if err != nil {
		return nil, err
	}
	p.Latency = used
	g := &Geo{p: p, lat: lat, ep: make(map[netip.Addr]endpoint, len(sites)+p.Nodes), isNode: map[netip.Addr]struct{}{}}
	for _, gs := range sites {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		a := gs.Addr.Unmap()
		id := tree.SmallestNonUnary(a)
		if _, dup := g.ep[a]; dup || !a.IsValid() || id == subnet.None || tree.Parent(id) == subnet.None {
			g.dropped++
			continue
		}
		loc, km := lat.nearest(gs.Lat, gs.Lon)
		s := Site{
			ID: len(g.sites), Name: a.String(), Addrs: []netip.Addr{a}, Kind: RealHosted,
			Loc: lat.locs[loc], Subnet: tree.Range(id), Org: tree.OrgName(tree.Org(id)),
			Place: Place{Lat: gs.Lat, Lon: gs.Lon, Country: gs.Country, City: gs.City, KmToLoc: km},
		}
		g.sites = append(g.sites, s)
		g.ep[a] = endpoint{loc: loc, lastMile: LastMileMS(km), bw: defaultBW}
	}
	if err := g.placeNodes(tree); err != nil {
		return nil, err
	}
	return g, nil
}

// placeNodes puts the nodes at locations and addresses (see NewGeo).
func (g *Geo) placeNodes(tree *subnet.Tree) error {
	space := allocSpace(tree)
	// Nodes sit where the hierarchy can give them an address: locations
	// whose country has allocations (the 2020 latency data has a server in
	// Kosovo, XK, which no registry file of 2013-2026 names).
	var usable []int
	for i, l := range g.lat.locs {
		if _, ok := space[l.Country]; ok {
			usable = append(usable, i)
		}
	}
	if len(usable) == 0 {
		return fmt.Errorf("%w: no location's country has a registry allocation in the hierarchy", ErrBadData)
	}
	seed := uint64(g.p.Seed)
	var order []int
	for i := range g.p.Nodes {
		if i%len(usable) == 0 {
			order = newRNG(seed, "geo-node-round", uint64(i/len(usable))).perm(len(usable))
		}
		loc := usable[order[i%len(usable)]]
		l := g.lat.locs[loc]
		r := newRNG(seed, "geo-node", uint64(i))
		access := geoAccessMin + r.float()*(geoAccessMax-geoAccessMin)
		cs := space[l.Country]
		var addr netip.Addr
		for try := 0; ; try++ {
			if try == 64 {
				return fmt.Errorf("%w: no free address with a subnet in %s's allocations", ErrBadData, l.Country)
			}
			a := cs.draw(r)
			id := tree.SmallestNonUnary(a)
			if _, used := g.ep[a]; !used && id != subnet.None && tree.Parent(id) != subnet.None {
				addr = a
				break
			}
		}
		id := tree.SmallestNonUnary(addr)
		g.nodes = append(g.nodes, Node{ID: i, Addr: addr, Loc: l, Subnet: tree.Range(id), Org: tree.OrgName(tree.Org(id))})
		g.ep[addr] = endpoint{loc: loc, lastMile: access, bw: defaultBW}
		g.isNode[addr] = struct{}{}
	}
	return nil
}

// countrySpace is the IPv4 address space a registry allocated in one
// country: top-level allocations with their cumulative sizes.
type countrySpace struct {
	start []uint32
	cum   []uint64 // cum[i]: addresses in allocations 0..i
}

// draw returns an address of the space, uniformly over its addresses.
func (c *countrySpace) draw(r *rng) netip.Addr {
	total := c.cum[len(c.cum)-1]
	x := r.u64() % total
	i := sort.Search(len(c.cum), func(k int) bool { return c.cum[k] > x })
	below := uint64(0)
	if i > 0 {
		below = c.cum[i-1]
	}
	return u32addr(c.start[i] + uint32(x-below))
}

// allocSpace indexes tree's top-level IPv4 registry allocations (allocated
// or assigned, not nested in another) by country.
func allocSpace(tree *subnet.Tree) map[string]*countrySpace {
	out := map[string]*countrySpace{}
	for id := range tree.Subtree(tree.Root(true)) {
		if tree.Layer(id) != subnet.LayerRIR {
			continue
		}
		if par := tree.Parent(id); par != subnet.None && tree.Layer(par) == subnet.LayerRIR {
			continue
		}
		n := tree.Node(id)
		if n.Status != "allocated" && n.Status != "assigned" || len(n.Country) != 2 {
			continue
		}
		start, ok := addrU32(n.Range.Start)
		if !ok {
			continue
		}
		c := out[n.Country]
		if c == nil {
			c = &countrySpace{}
			out[n.Country] = c
		}
		prev := uint64(0)
		if len(c.cum) > 0 {
			prev = c.cum[len(c.cum)-1]
		}
		c.start = append(c.start, start)
		c.cum = append(c.cum, prev+n.Range.NumAddrs())
	}
	return out
}

// nearest returns the index of the location nearest to (lat, lon) and its
// great-circle distance in km; the lowest index wins ties.
func (d *latencyData) nearest(lat, lon float64) (int, float64) {
	p := Location{Lat: lat, Lon: lon}
	best, bestKm := 0, math.Inf(1)
	for i, l := range d.locs {
		if km := greatCircleKm(p, l); km < bestKm {
			best, bestKm = i, km
		}
	}
	return best, bestKm
}

// Dropped returns how many of NewGeo's sites were dropped: repeated
// addresses and addresses with no subnet in the hierarchy.
func (g *Geo) Dropped() int { return g.dropped }

// Latency returns where the Geo's RTTs come from: LatencyMatrix or
// LatencyModel.
func (g *Geo) Latency() string { return g.p.Latency }

// Sites returns every site, ordered by ID.
func (g *Geo) Sites() []Site {
	out := make([]Site, len(g.sites))
	for i, s := range g.sites {
		out[i] = s
		out[i].Addrs = slices.Clone(s.Addrs)
	}
	return out
}

// Nodes returns every node, ordered by ID.
func (g *Geo) Nodes() []Node { return slices.Clone(g.nodes) }

// Locations returns every location of the latency data, ordered by ID.
func (g *Geo) Locations() []Location { return slices.Clone(g.lat.locs) }

// AccessMS returns the access delay in ms of a node's address (0 for
// another address).
func (g *Geo) AccessMS(node netip.Addr) float64 {
	if _, ok := g.isNode[node.Unmap()]; !ok {
		return 0
	}
	return g.ep[node.Unmap()].lastMile
}

// RTTAddr returns the true mean RTT between two addresses of the world
// (sites or nodes), unscaled; subnet.Unreachable when either is unknown.
func (g *Geo) RTTAddr(a, b netip.Addr) time.Duration {
	x, ok1 := g.ep[a.Unmap()]
	y, ok2 := g.ep[b.Unmap()]
	if !ok1 || !ok2 {
		return subnet.Unreachable
	}
	return msDur(g.lat.meanRTT(x, y, g.p.IntraCityRTT))
}

// RTT returns the true mean RTT from address from to site s, unscaled.
func (g *Geo) RTT(from netip.Addr, s Site) time.Duration {
	if len(s.Addrs) == 0 {
		return subnet.Unreachable
	}
	return g.RTTAddr(from, s.Addrs[0])
}

// SampleRTT returns one RTT sample from address from to site s, as
// World.SampleRTT does: the mean plus z deviations of the pair's jitter.
func (g *Geo) SampleRTT(from netip.Addr, s Site, z float64) time.Duration {
	if len(s.Addrs) == 0 {
		return subnet.Unreachable
	}
	x, ok1 := g.ep[from.Unmap()]
	y, ok2 := g.ep[s.Addrs[0]]
	if !ok1 || !ok2 {
		return subnet.Unreachable
	}
	return msDur(g.lat.sampleRTT(x, y, g.p.IntraCityRTT, g.p.Jitter, z))
}

// LoadLocations returns the locations of latency source src (as
// Params.Latency) with data directory dataDir ("" finds it, see
// FindDataDir), ordered by ID: where nodes and sites can be.
func LoadLocations(dataDir, src string) ([]Location, error) {
	lat, _, _, err := findLatency(dataDir, src)
	if err != nil {
		return nil, err
	}
	return slices.Clone(lat.locs), nil
}
