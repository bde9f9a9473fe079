package world

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/micra-net/micra/subnet"
)

// World is a generated emulated Internet: the registry hierarchy inside
// 127.0.0.0/8 with every subnet placed at a real location, the web sites
// and their content, the volunteer node addresses, and the latency model
// that knows the true RTT of every pair of addresses. A World is immutable
// and safe for concurrent use; Start serves it.
type World struct {
	p       Params
	seed    uint64
	dataDir string
	lat     *latencyData
	defLoc  int
	data    []DataFile

	blocks []blockRec // preorder: start ascending, end descending
	orgs   []*org
	sites  []*siteRec
	nodes  []*nodeRec
	dns    netip.Addr

	byName  map[string]*siteRec // canonical names and aliases
	byAddr  map[uint32][]*siteRec
	popCum  []float64
	popRank []int

	files []RegistryFile
	spec  []byte
}

// blockRec is one range of the finished hierarchy with its effective
// (inherited) location, last mile and bandwidth.
type blockRec struct {
	start, end uint32
	parent     int32
	depth      int // 1 for 127/8, as subnet.Tree counts below its 0/0 root
	b          *block
	loc        int
	lastMile   float64 // ms
	bw         float64 // bytes/s
}

// Defaults for addresses outside every organisation's range.
const (
	defaultLastMile = 5.0        // ms
	defaultBW       = 50 * mbit  // bytes/s
	tcpWindow       = 512 << 10  // bytes in flight: caps a path's throughput at window/RTT
	worldDate       = "20260101" // the date the registry files describe
)

// Generate builds the world p describes. It reads the latency data (and,
// with FromReal, the registry data; with Geo, the geolocation file) from
// the data directory; the same Params and data give the same world, byte
// for byte. It honours ctx only while reading real data.
func Generate(ctx context.Context, p Params) (*World, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	lat, dir, used, err := findLatency(p.DataDir, p.Latency)
	if err != nil {
		return nil, err
	}
	p.Latency = used
	w := &World{p: p, seed: uint64(p.Seed), dataDir: dir, lat: lat, defLoc: -1}
	for i, l := range lat.locs {
		if strings.EqualFold(l.City, p.DefaultCity) {
			w.defLoc = i
			break
		}
	}
	if w.defLoc < 0 {
		return nil, fmt.Errorf("%w: default city %q is not in the latency data", ErrParams, p.DefaultCity)
	}
	w.data = []DataFile{lat.sums, lat.pings}
	g := newGen(p, lat)
	switch {
	case p.Geo != "":
		files, err := g.fromGeo(ctx, dir)
		if err != nil {
			return nil, err
		}
		w.data = append(w.data, files...)
	case p.FromReal:
		files, err := g.fromReal(ctx, dir)
		if err != nil {
			return nil, err
		}
		w.data = append(w.data, files...)
	default:
		if err := g.synthetic(); err != nil {
			return nil, err
		}
	}
	if err := g.layout(); err != nil {
		return nil, err
	}
	if err := w.assemble(g); err != nil {
		return nil, err
	}
	w.files = w.registryFiles()
	if w.spec, err = w.encodeSpec(); err != nil {
		return nil, err
	}
	return w, nil
}

// assemble turns the laid-out plan into the world's tables.
func (w *World) assemble(g *gen) error {
	w.orgs = g.orgs
	w.sites = g.sites
	w.nodes = g.nodes
	w.dns = u32addr(g.dns.addr)
	hostBlock := map[*host]int{}
	var walk func(b *block, parent int32, depth int)
	walk = func(b *block, parent int32, depth int) {
		rec := blockRec{start: b.start, end: b.start + b.size - 1, parent: parent, depth: depth, b: b}
		switch {
		case parent < 0:
			rec.loc, rec.lastMile, rec.bw = w.defLoc, defaultLastMile, defaultBW
		default:
			pr := &w.blocks[parent]
			rec.loc, rec.lastMile, rec.bw = pr.loc, pr.lastMile, pr.bw
		}
		if b.loc >= 0 {
			rec.loc = b.loc
		} else if b.kind == bAlloc && b.org != nil {
			rec.loc = b.org.home
		}
		if b.lastMile > 0 {
			rec.lastMile = b.lastMile
		} else if b.kind == bAlloc {
			rec.lastMile = 2
		}
		if b.bw > 0 {
			rec.bw = b.bw
		} else if b.kind == bAlloc {
			rec.bw = 100 * mbit
		}
		idx := len(w.blocks)
		w.blocks = append(w.blocks, rec)
		for _, h := range b.hosts {
			hostBlock[h] = idx
		}
		kids := slices.Clone(b.kids)
		slices.SortFunc(kids, func(x, y *block) int {
			return cmp.Or(cmp.Compare(x.start, y.start), cmp.Compare(y.size, x.size))
		})
		for _, k := range kids {
			walk(k, int32(idx), depth+1)
		}
	}
	walk(g.root, -1, 1)
	for i := 1; i < len(w.blocks); i++ {
		a, b := &w.blocks[i-1], &w.blocks[i]
		if b.start < a.start || (b.start == a.start && b.end >= a.end) {
			return fmt.Errorf("internal error: blocks out of order at %s", u32addr(b.start))
		}
	}

	nonUnary := func(i int) int {
		for i >= 0 && w.blocks[i].start == w.blocks[i].end {
			i = int(w.blocks[i].parent)
		}
		return i
	}
	for _, s := range w.sites {
		bi, ok := hostBlock[s.hosts[0]]
		if !ok {
			return fmt.Errorf("internal error: site %d has no block", s.id)
		}
		s.block = nonUnary(bi)
		s.loc = w.blocks[bi].loc
		w.initContent(s)
	}
	for _, n := range w.nodes {
		if _, ok := hostBlock[n.host]; !ok {
			return fmt.Errorf("internal error: node %d has no block", n.id)
		}
	}
	w.nameSites()
	w.pickHostile()
	w.byName = map[string]*siteRec{}
	w.byAddr = map[uint32][]*siteRec{}
	for _, s := range w.sites {
		w.byName[s.name] = s
		for _, a := range s.aliases {
			w.byName[a] = s
		}
		for _, h := range s.hosts {
			w.byAddr[h.addr] = append(w.byAddr[h.addr], s)
		}
	}
	for a, ss := range w.byAddr {
		w.byAddr[a] = slices.Compact(ss)
	}
	// Popularity: a Zipf law over a random order of the sites.
	r := newRNG(w.seed, "popularity")
	w.popRank = r.perm(len(w.sites))
	w.popCum = make([]float64, len(w.sites))
	sum := 0.0
	for k := range w.popCum {
		sum += 1 / math.Pow(float64(k+1), w.p.Popularity)
		w.popCum[k] = sum
	}
	return nil
}

// nameSites gives every site a unique DNS name in its country's domain
// (a CDN-like site gets a generic one) and some a www alias.
func (w *World) nameSites() {
	used := map[string]bool{}
	for _, s := range w.sites {
		r := newRNG(w.seed, "name", uint64(s.id))
		tld := "com"
		if s.kind != CDNSite {
			if c, ok := countries[w.lat.locs[s.loc].CountryName]; ok && r.chance(0.7) {
				tld = c.tld
			}
		} else {
			tld = []string{"com", "net", "io"}[r.intn(3)]
		}
		var label string
		for try := 0; ; try++ {
			a := nameWords[r.intn(len(nameWords))]
			b := vocabulary[r.intn(len(vocabulary))]
			switch r.intn(3) {
			case 0:
				label = a + b
			case 1:
				label = a + "-" + b
			default:
				label = b + "-" + a
			}
			switch {
			case try >= 16:
				label += fmt.Sprint("-", s.id) // unique: ids are
			case try > 3:
				label += fmt.Sprint(r.intn(1000))
			}
			if base := label + "." + tld; !used[base] {
				used[base] = true
				break
			}
		}
		base := label + "." + tld
		switch {
		case s.kind == CDNSite:
			s.name = []string{"static.", "cdn.", "assets.", "media."}[r.intn(4)] + base
		case r.chance(0.5):
			s.name = "www." + base
			if r.chance(w.p.Aliases) {
				s.aliases = []string{base}
			}
		default:
			s.name = base
			if r.chance(w.p.Aliases) {
				s.aliases = []string{"www." + base}
			}
		}
	}
}

// pickHostile marks Params.Hostile sites, none of them CDN-like, with the
// hostile kinds in turn.
func (w *World) pickHostile() {
	if w.p.Hostile == 0 {
		return
	}
	r := newRNG(w.seed, "hostile")
	k := 0
	for _, i := range r.perm(len(w.sites)) {
		s := w.sites[i]
		if s.kind == CDNSite || len(w.byAddrCount(s)) > 1 {
			continue
		}
		// In turn, in the order of the kinds: worlds with at most five
		// hostile sites are what they were before kinds were appended.
		s.hostile = HostileKind(1 + k%numHostileKinds)
		k++
		if k == w.p.Hostile {
			return
		}
	}
}

// byAddrCount returns the sites sharing s's first address (before byAddr
// is built).
func (w *World) byAddrCount(s *siteRec) []*siteRec { return s.hosts[0].sites }

func u32addr(a uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)})
}

func addrU32(a netip.Addr) (uint32, bool) {
	a = a.Unmap()
	if !a.Is4() {
		return 0, false
	}
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]), true
}

// lookup returns the deepest block containing a, or -1.
func (w *World) lookup(a uint32) int {
	i := sort.Search(len(w.blocks), func(k int) bool { return w.blocks[k].start > a }) - 1
	for i >= 0 && w.blocks[i].end < a {
		i = int(w.blocks[i].parent)
	}
	return i
}

func (w *World) blockRange(i int) subnet.Range {
	return subnet.Range{Start: u32addr(w.blocks[i].start), End: u32addr(w.blocks[i].end)}
}

// ---- public API ----

// Params returns the parameters the world was generated from.
func (w *World) Params() Params { return w.p }

// DataDir returns the data directory the world was generated from; "" when
// none was found (its RTTs are the embedded model's, its structure
// synthetic or the built-in hierarchy's).
func (w *World) DataDir() string { return w.dataDir }

// DescribeLatency says where the world's RTTs come from, in words for a
// person; Params().Latency names it as a value.
func (w *World) DescribeLatency() string {
	if w.p.Latency == LatencyModel {
		return "the embedded latency model (fitted to the WonderProxy matrix; places from GeoNames)"
	}
	return "the WonderProxy RTT matrix in " + w.dataDir
}

// Site is one web site of the world. Values are copies; changing them
// changes nothing in the world.
type Site struct {
	ID      int
	Name    string       // canonical DNS name, lower case, e.g. "www.polar-garden.de"
	Aliases []string     // other names that redirect (301) to Name
	Addrs   []netip.Addr // one per point of presence for a CDN-like site, else one
	Kind    SiteKind
	Org     string   // display name of the organisation holding the address
	Loc     Location // of the first address; a CDN-like site is at every point of presence
	Subnet  subnet.Range
	Place   Place       // a real-geo site's own place (Geo); zero in a generated world, whose sites are at Loc
	Hostile HostileKind // NotHostile for a normal site
	Pages   int         // pages reachable by links from the home page, listed by World.Pages

	Robots     RobotsPolicy
	CrawlDelay time.Duration // asked by robots.txt, unscaled; 0 when none
	Sitemap    bool          // has /sitemap.xml (an index of /sitemap-N.xml when large)
	Feeds      bool          // has /feed.xml (RSS 2.0) and /atom.xml (Atom)
	SchemaType string        // the schema.org type of the structured data on its pages, "" for none (Params.Structured)
	Format     string        // the format of that structured data: FormatJSONLD or FormatMicrodata
	Gzip       bool          // uses gzip content coding when the request accepts it
	Validators bool          // sends Last-Modified and ETag and answers 304
	Flaky      bool          // answers about one request in five with 503 and Retry-After
}

// URL returns the site's home page URL on port.
func (s Site) URL(port int) string { return fmt.Sprintf("http://%s:%d/", s.Name, port) }

func (w *World) site(s *siteRec) Site {
	out := Site{
		ID:         s.id,
		Name:       s.name,
		Aliases:    slices.Clone(s.aliases),
		Kind:       s.kind,
		Loc:        w.lat.locs[s.loc],
		Subnet:     w.blockRange(s.block),
		Place:      s.place,
		Hostile:    s.hostile,
		Pages:      s.pages,
		Robots:     s.robots,
		CrawlDelay: time.Duration(s.crawlDelay) * time.Second,
		Sitemap:    s.sitemap,
		Feeds:      s.feeds,
		SchemaType: s.schemaType,
		Format:     s.format,
		Gzip:       s.gzip,
		Validators: s.validators,
		Flaky:      s.flaky,
	}
	if s.org != nil {
		out.Org = s.org.name
	}
	for _, h := range s.hosts {
		out.Addrs = append(out.Addrs, u32addr(h.addr))
	}
	return out
}

// Sites returns every site, ordered by ID.
func (w *World) Sites() []Site {
	out := make([]Site, len(w.sites))
	for i, s := range w.sites {
		out[i] = w.site(s)
	}
	return out
}

// Site returns the site named name (its canonical name or an alias; case
// and a trailing dot are ignored).
func (w *World) Site(name string) (Site, bool) {
	s, ok := w.byName[strings.TrimSuffix(strings.ToLower(name), ".")]
	if !ok {
		return Site{}, false
	}
	return w.site(s), true
}

// SitesAt returns the sites served on address a (several with name-based
// virtual hosting).
func (w *World) SitesAt(a netip.Addr) []Site {
	u, ok := addrU32(a)
	if !ok {
		return nil
	}
	var out []Site
	for _, s := range w.byAddr[u] {
		out = append(out, w.site(s))
	}
	return out
}

// Node is a volunteer node's address: the address a node binds its
// outgoing connections to, and where the world locates it.
type Node struct {
	ID     int
	Addr   netip.Addr
	Loc    Location
	Subnet subnet.Range // the smallest non-unary range containing Addr: the node's own subnet
	Org    string       // display name of the organisation holding the range
}

// Nodes returns every node, ordered by ID.
func (w *World) Nodes() []Node {
	out := make([]Node, len(w.nodes))
	for i, n := range w.nodes {
		bi := w.lookup(n.host.addr)
		out[i] = Node{ID: n.id, Addr: u32addr(n.host.addr), Loc: w.lat.locs[w.blocks[bi].loc]}
		for bi >= 0 && w.blocks[bi].start == w.blocks[bi].end {
			bi = int(w.blocks[bi].parent)
		}
		out[i].Subnet = w.blockRange(bi)
		if o := w.blocks[bi].b.org; o != nil {
			out[i].Org = o.name
		}
	}
	return out
}

// NodeAddrs returns the node addresses, ordered by node ID.
func (w *World) NodeAddrs() []netip.Addr {
	out := make([]netip.Addr, len(w.nodes))
	for i, n := range w.nodes {
		out[i] = u32addr(n.host.addr)
	}
	return out
}

// DNSAddr returns the address the world's DNS server listens on (the port
// is the running world's).
func (w *World) DNSAddr() netip.Addr { return w.dns }

// Locations returns every location of the latency data, ordered by ID.
func (w *World) Locations() []Location { return slices.Clone(w.lat.locs) }

// Locate returns the location of address a: that of the smallest range
// of the world containing it, or the default city (Params.DefaultCity)
// for addresses outside every organisation's range, outside 127/8
// included.
func (w *World) Locate(a netip.Addr) Location { return w.lat.locs[w.endpoint(a).loc] }

// Subnet returns the smallest non-unary range of the world's hierarchy
// containing a: the subnet IPMicra delegates. ok is false outside 127/8.
func (w *World) Subnet(a netip.Addr) (r subnet.Range, ok bool) {
	u, ok := addrU32(a)
	if !ok {
		return subnet.Range{}, false
	}
	i := w.lookup(u)
	for i >= 0 && w.blocks[i].start == w.blocks[i].end {
		i = int(w.blocks[i].parent)
	}
	if i < 0 {
		return subnet.Range{}, false
	}
	return w.blockRange(i), true
}

// RTTAddr returns the true mean round-trip time between two addresses,
// unscaled: the measured RTT between their locations (or the intra-city
// RTT when they share one) plus the last mile of each. Per-request jitter
// is not included; its mean is zero.
func (w *World) RTTAddr(a, b netip.Addr) time.Duration {
	return msDur(w.meanRTT(w.endpoint(a), w.endpoint(b)))
}

// RTT returns the true mean RTT from address from to site s, unscaled:
// for a CDN-like site, to its nearest point of presence, the one the
// world's DNS server lists first for a query from that address.
func (w *World) RTT(from netip.Addr, s Site) time.Duration {
	e := w.endpoint(from)
	best := math.Inf(1)
	for _, a := range s.Addrs {
		best = math.Min(best, w.meanRTT(e, w.endpoint(a)))
	}
	if math.IsInf(best, 1) {
		return 0
	}
	return msDur(best)
}

// SampleRTT returns one round-trip time from address from to site s as the
// site's server applies it to a request, unscaled: the true mean RTT plus
// z standard deviations of the pair's jitter, z clipped at ±2 as the
// server clips it (the server draws z from a standard normal per request).
// For a CDN-like site it is the sample of the nearest point of presence.
// With Params.Jitter 0 it is RTT(from, s) for every z. Benchmarks use it to
// model what a timed probe measures without serving the world.
func (w *World) SampleRTT(from netip.Addr, s Site, z float64) time.Duration {
	e := w.endpoint(from)
	best, at := math.Inf(1), -1
	for i, a := range s.Addrs {
		if m := w.meanRTT(e, w.endpoint(a)); m < best {
			best, at = m, i
		}
	}
	if at < 0 {
		return 0
	}
	return msDur(w.sampleRTT(e, w.endpoint(s.Addrs[at]), z))
}

// Optimal returns the node address among nodes with the lowest true RTT
// to s, and that RTT; the first wins ties. ok is false when nodes is
// empty.
func (w *World) Optimal(s Site, nodes []netip.Addr) (best netip.Addr, rtt time.Duration, ok bool) {
	for _, n := range nodes {
		d := w.RTT(n, s)
		if !ok || d < rtt {
			best, rtt, ok = n, d, true
		}
	}
	return best, rtt, ok
}

// Bandwidth returns the throughput in bytes per second, unscaled, at
// which a body travels from address a to address b: the slower access
// link of the two, and at most a 512 KiB TCP window per RTT.
func (w *World) Bandwidth(a, b netip.Addr) float64 {
	x, y := w.endpoint(a), w.endpoint(b)
	return w.bandwidth(x, y, w.meanRTT(x, y))
}

// Page is one page of a site.
type Page struct {
	Path         string        // canonical path and query, e.g. "/garden-1/river-7.html"
	Depth        int           // links from the home page along the site's tree
	Disallowed   bool          // robots.txt forbids it to RobotsAgent (and, except for RobotsForAgent sites, to every agent)
	Status       int           // 200, or 500 for a page that is always broken
	ChangePeriod time.Duration // between substantive changes, unscaled; 0 for a static page
	Trivial      bool          // carries a counter or clock that changes on every request
}

// Pages returns every page of s reachable by links from its home page, in
// the order of the site's tree. It does not list redirecting old URLs,
// sitemaps, feeds, robots.txt or the endless URLs of a hostile site.
func (w *World) Pages(s Site) []Page {
	if s.ID < 0 || s.ID >= len(w.sites) {
		return nil
	}
	sr := w.sites[s.ID]
	out := make([]Page, sr.pages)
	for i := range out {
		pi := w.pageInfo(sr, i)
		p := sr.path(i)
		out[i] = Page{
			Path:         p,
			Depth:        sr.depth(i),
			Disallowed:   sr.disallowed(p),
			Status:       pi.status,
			ChangePeriod: time.Duration(pi.period) * time.Second,
			Trivial:      pi.trivial != 0,
		}
	}
	return out
}

// Registry returns the world's registry files, in the order the spec
// lists them.
func (w *World) Registry() []RegistryFile { return slices.Clone(w.files) }

// Tree loads the world's registry files with the subnet importer, exactly
// as a node loads real registry data, and returns the hierarchy.
func (w *World) Tree(ctx context.Context) (*subnet.Tree, error) { return BuildTree(ctx, w.files) }

// BuildTree loads registry files (the world's, or UpdateRegistry's) with
// the subnet importer and returns the hierarchy.
func BuildTree(ctx context.Context, files []RegistryFile) (*subnet.Tree, error) {
	b, err := subnet.NewBuilder(subnet.Strict())
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		if _, err := b.Add(ctx, f.Name, bytes.NewReader(f.Data), subnet.FormatAuto); err != nil {
			return nil, err
		}
	}
	t, _, err := b.Build()
	return t, err
}

func msDur(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }
