package world

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"

	"github.com/micra-net/micra/internal/geo"
	"github.com/micra-net/micra/subnet"
	"github.com/micra-net/micra/subnet/embedded"
)

// A world served from a geolocation file (Params.Geo): the real-geo world
// of NewGeo made servable. Its sites are Params.Sites rows of the file,
// drawn with the seed as ReadGeoSites draws them; its hierarchy is the
// part of the built-in real hierarchy (subnet/embedded, the one
// "micra bench delegation --geo" searches) that holds the sites and the
// nodes, remapped into 127/8 with its shape: the same ranges nested the
// same way, with the same organisations, registries, countries and
// statuses, siblings in their real address order, each range sized to
// what it holds (so prefix lengths are not the real ones). Every site is
// a unary range of its own at the location of the latency data nearest to
// its coordinates, with the rest of the way as its last mile (LastMileMS),
// so that its true RTT to a node is the one NewGeo gives; the search sees
// its real smallest range, since unary ranges are below every search.
// Nodes sit in countries with registry allocations, each on a home line
// (a /28 assignment) inside a range drawn from its country's real
// allocations, with its own access delay of 1 to 10 ms.

// geoRange is a range of the real hierarchy a geo world keeps.
type geoRange struct {
	id    subnet.ID
	kids  []*geoRange
	sites []*siteRec
	nodes []*nodeRec
	place map[*siteRec]geoPlace
	nodeL map[*nodeRec]int
}

type geoPlace struct {
	loc      int
	lastMile float64
}

// fromGeo builds the structure of a geo world (see above).
func (g *gen) fromGeo(ctx context.Context, dir string) ([]DataFile, error) {
	p := g.p
	t, err := embedded.Tree()
	if err != nil {
		return nil, fmt.Errorf("%w: the built-in hierarchy: %v", ErrBadData, err)
	}
	sum, err := fileSHA256(p.Geo)
	if err != nil {
		return nil, err
	}
	usable := func(a netip.Addr) bool {
		id := t.SmallestNonUnary(a)
		return id != subnet.None && t.Parent(id) != subnet.None
	}
	inOrg := func(netip.Addr) bool { return true }
	if p.GeoOrg != "" {
		inOrg = OrgFilter(t, p.GeoOrg)
	}
	sites, _, err := ReadGeoSites(p.Geo, p.Sites, p.Seed, false, func(_ geo.Row, a netip.Addr) bool { return usable(a) && inOrg(a) })
	if err != nil {
		return nil, err
	}
	if len(sites) == 0 && p.GeoOrg != "" {
		return nil, fmt.Errorf("%w: no row of %s is in an organisation named like %q", ErrParams, p.Geo, p.GeoOrg)
	}
	byID := map[subnet.ID]*geoRange{}
	var tops []*geoRange
	// chain returns the kept range of id, keeping it and its ancestors
	// below the root.
	var chain func(id subnet.ID) *geoRange
	chain = func(id subnet.ID) *geoRange {
		if gr, ok := byID[id]; ok {
			return gr
		}
		gr := &geoRange{id: id, place: map[*siteRec]geoPlace{}, nodeL: map[*nodeRec]int{}}
		byID[id] = gr
		if par := t.Parent(id); par != subnet.None && t.Parent(par) != subnet.None {
			pg := chain(par)
			pg.kids = append(pg.kids, gr)
		} else {
			tops = append(tops, gr)
		}
		return gr
	}
	seen := map[netip.Addr]bool{}
	for _, gs := range sites {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		a := gs.Addr.Unmap()
		if seen[a] {
			continue
		}
		seen[a] = true
		loc, km := g.lat.nearest(gs.Lat, gs.Lon)
		s := &siteRec{id: len(g.sites), kind: RealHosted, place: Place{Lat: gs.Lat, Lon: gs.Lon, Country: gs.Country, City: gs.City, KmToLoc: km}}
		g.sites = append(g.sites, s)
		gr := chain(t.SmallestNonUnary(a))
		gr.sites = append(gr.sites, s)
		gr.place[s] = geoPlace{loc: loc, lastMile: max(LastMileMS(km), 0.01)}
	}
	if len(g.sites) < p.Hostile {
		return nil, fmt.Errorf("%w: %s gave %d sites, fewer than the %d hostile ones", ErrParams, p.Geo, len(g.sites), p.Hostile)
	}
	space := allocSpace(t)
	r := newRNG(g.seed, "geo-world")
	for i, loc := range g.nodeLocs(r, func(cc string) bool { return space[cc] != nil }) {
		cs := space[g.lat.locs[loc].Country]
		var a netip.Addr
		for try := 0; ; try++ {
			if try == 64 {
				return nil, fmt.Errorf("%w: no address with a subnet in %s's allocations", ErrBadData, g.lat.locs[loc].Country)
			}
			if a = cs.draw(r); usable(a) {
				break
			}
		}
		nd := &nodeRec{id: i, host: &host{}}
		g.nodes = append(g.nodes, nd)
		gr := chain(t.SmallestNonUnary(a))
		gr.nodes = append(gr.nodes, nd)
		gr.nodeL[nd] = loc
	}

	orgOf := map[string]*org{}
	slices.SortFunc(tops, func(x, y *geoRange) int { return t.Range(x.id).Start.Compare(t.Range(y.id).Start) })
	for _, top := range tops {
		n := t.Node(top.id)
		reg := n.Registry
		if !slices.Contains(registries, reg) {
			reg = g.registryOf(n.Country)
		}
		o := g.geoOrg(r, t, top.id, reg, orgOf)
		cc := cmp.Or(t.Country(top.id), "ZZ") // ZZ: the registry names no country
		a := &block{kind: bAlloc, org: o, loc: -1, rel: -1, registry: reg, country: cc, status: n.Status, date: o.date, real: n.Range.String(), size: 256}
		if a.status != "allocated" && a.status != "assigned" {
			a.status = "allocated"
		}
		g.geoBlock(r, t, top, a, reg, orgOf)
		g.realAllocs = append(g.realAllocs, a)
	}
	g.placeDNS()
	return []DataFile{{Path: p.Geo, SHA256: sum}}, g.allocate(r)
}

// geoBlock fills b, the block of gr, with the blocks of gr's kept
// sub-ranges in their address order, its sites' unary ranges and its
// nodes' home lines.
func (g *gen) geoBlock(r *rng, t *subnet.Tree, gr *geoRange, b *block, reg string, orgOf map[string]*org) {
	slices.SortFunc(gr.kids, func(x, y *geoRange) int { return t.Range(x.id).Start.Compare(t.Range(y.id).Start) })
	for _, k := range gr.kids {
		n := t.Node(k.id)
		o := b.org
		if t.Org(k.id) != "" {
			o = g.geoOrg(r, t, k.id, reg, orgOf)
		}
		kb := b.add(g.newBlock(bReal, o, -1))
		kb.real = n.Range.String()
		kb.size = uint32(min(n.Range.NumAddrs(), 256)) // at least what it is, up to a /24
		kb.netname = fmt.Sprintf("%s-%d", o.stem, len(b.kids))
		kb.descr = o.name
		kb.status = "ASSIGNED PA"
		kb.country = cmp.Or(t.Country(k.id), "ZZ") // its own or its nearest ancestor's, as the search reads it; ZZ: none
		kb.lastMile = r.logUniform(0.3, 3)
		kb.bw = r.logUniform(50, 1000) * mbit
		g.geoBlock(r, t, k, kb, reg, orgOf)
	}
	for _, s := range gr.sites {
		pl := gr.place[s]
		u := b.add(g.newBlock(bUnary, b.org, pl.loc))
		u.size = 1
		u.lastMile = pl.lastMile
		u.netname = b.netname + "-HOST"
		if b.netname == "" {
			u.netname = b.org.stem + "-HOST"
		}
		u.descr = b.org.name
		u.status = "ASSIGNED PA"
		h := &host{sites: []*siteRec{s}}
		u.hosts = append(u.hosts, h)
		s.hosts = []*host{h}
		s.org = b.org
	}
	for _, nd := range gr.nodes {
		res := b.add(g.newBlock(bResidential, b.org, gr.nodeL[nd]))
		res.size = 16
		res.lastMile = geoAccessMin + r.float()*(geoAccessMax-geoAccessMin)
		res.bw = r.logUniform(10, 150) * mbit
		res.netname = g.netname(b.org, "DYN")
		res.descr = b.org.name + " residential customers"
		res.status = "ASSIGNED PA"
		res.hosts = append(res.hosts, nd.host)
	}
}

// geoOrg returns the world organisation of the real range id's
// organisation (its own or its allocation's), giving it an opaque-id and
// an ASN so that its allocations group as the real ones do.
func (g *gen) geoOrg(r *rng, t *subnet.Tree, id subnet.ID, reg string, orgOf map[string]*org) *org {
	n := t.Node(id)
	key := t.Org(id)
	if key == "" {
		key = "range:" + n.Range.String()
	}
	name := t.OrgName(key)
	if name == "" {
		name = fmt.Sprintf("%s member %08x", rpslSource(reg), mix(g.seed, "geoname:"+key)>>32)
	}
	cc := n.Country
	if len(g.lat.byCountry[cc]) == 0 {
		cc = t.Country(id)
	}
	if len(g.lat.byCountry[cc]) == 0 {
		cc = g.lat.locs[g.lat.n()-1].Country
		for _, l := range g.lat.locs {
			if l.Registry == reg {
				cc = l.Country
				break
			}
		}
	}
	o := g.realOrg(r, key, name, cc, reg, orgOf)
	if o.opaque == "" {
		o.opaque = opaqueID(reg, mix(g.seed, "opaque", uint64(o.idx)))
		o.asn = 4_200_000_000 + uint32(o.idx)
	}
	return o
}

// registryOf returns the registry of country cc, by the latency data's
// locations ("ripencc" when it has none there).
func (g *gen) registryOf(cc string) string {
	for _, l := range g.lat.locs {
		if l.Country == cc && slices.Contains(registries, l.Registry) {
			return l.Registry
		}
	}
	return "ripencc"
}

// fileSHA256 returns the hex SHA-256 of the file at path.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrParams, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrBadData, path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
