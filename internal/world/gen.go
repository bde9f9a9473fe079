package world

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// orgKind is the role of an organisation in the emulated Internet.
type orgKind uint8

const (
	orgHosting    orgKind = iota // hosting provider: data centres, shared hosting, dedicated servers
	orgISP                       // access provider: regional pools, home lines, business lines
	orgEnterprise                // company or university hosting its own sites
	orgCDN                       // content delivery network: points of presence far apart
	orgCustomer                  // a customer of a hosting provider or ISP
	orgReal                      // an organisation of the real data
)

var orgKindNames = []string{"hosting", "isp", "enterprise", "cdn", "customer", "real"}

func (k orgKind) String() string { return orgKindNames[k] }

// org is one organisation.
type org struct {
	idx      int
	kind     orgKind
	handle   string // RPSL organisation handle; "" for customers known only by netname
	name     string
	opaque   string // opaque-id of its rows in the delegated files; "" when it has no allocation
	registry string // home registry
	country  string // home country
	home     int    // home location index
	asn      uint32 // 0 when it has no allocation
	stem     string // netname stem, upper case
	date     string // registration date YYYYMMDD
	weight   float64

	top   []*block       // org-level subnets, packed into allocations
	dcs   []*block       // hosting: data centres
	pools map[int]*block // ISP: regional pool per location
	resid map[int]*block // ISP: residential block being filled per location
	nsub  int            // counter for netnames
}

// bkind is the role of a block of the hierarchy.
type bkind uint8

const (
	bRoot        bkind = iota // 127.0.0.0/8
	bRegistry                 // a registry-level block (IANA file)
	bAlloc                    // an allocation or PI assignment (delegated file)
	bOrgNet                   // data centre, regional pool, office or point of presence (RPSL)
	bShared                   // a shared-hosting subnet (RPSL)
	bCustomer                 // a customer assignment (RPSL)
	bSub                      // a sub-assignment inside a customer (RPSL)
	bResidential              // an ISP's pool of home lines (RPSL)
	bUnary                    // one address registered on its own (RPSL)
	bReal                     // a range copied from the real data (RPSL)
)

// block is one range of the world's hierarchy while it is generated.
type block struct {
	kind     bkind
	org      *org
	loc      int     // location index; -1 inherits the parent's
	lastMile float64 // ms added to every RTT to an address inside; 0 inherits
	bw       float64 // bytes/s of the access link; 0 inherits
	netname  string
	descr    string
	status   string
	country  string // the country the registry declares; "" for the location's
	registry string // registry blocks and allocations
	date     string
	size     uint32 // number of addresses
	start    uint32 // first address, set by layout
	placed   bool   // start fixed before layout (the root's registry blocks)
	fixed    bool   // size fixed (a range of the real data): never resized
	rel      int64  // >= 0: start fixed relative to the parent's (real data); -1 otherwise
	slot     uint32 // > 0: the aligned slot layout reserves for the block (real allocations)
	slotOff  uint32 // offset of the block in its slot
	load     uint32 // addresses promised to children while planning
	real     string // the real range this block was copied from, if any
	kids     []*block
	hosts    []*host
}

// host is one address in use: a site's (several sites with name-based
// virtual hosting), a node's or the DNS server's.
type host struct {
	addr  uint32
	sites []*siteRec
}

// nodeRec is a volunteer node address while it is generated.
type nodeRec struct {
	id   int
	host *host
}

// gen holds the state of one generation.
type gen struct {
	p     Params
	seed  uint64
	lat   *latencyData
	r     *rng
	orgs  []*org
	isps  map[string]*org
	root  *block
	sites []*siteRec
	nodes []*nodeRec
	dns   *host

	realAllocs []*block // allocations copied from the real data
}

const (
	mbit        = 125_000.0 // bytes per second in one Mbit/s
	unitBits    = 18        // registry-level blocks are /14: 2^18 addresses
	maxAllocLen = 16        // allocations are at most /16
)

func newGen(p Params, lat *latencyData) *gen {
	seed := uint64(p.Seed)
	return &gen{
		p:    p,
		seed: seed,
		lat:  lat,
		r:    newRNG(seed, "structure"),
		isps: map[string]*org{},
		root: &block{kind: bRoot, loc: -1, size: 1 << 24, start: 127 << 24, placed: true, fixed: true, rel: -1},
	}
}

// ---- locations ----

func (g *gen) randomLoc(r *rng) int { return r.intn(g.lat.n()) }

// farFrom returns a location in another country at least FarRTT from
// every location in from; when none is, the one farthest from them.
func (g *gen) farFrom(r *rng, from []int) int {
	n := g.lat.n()
	start := r.intn(n)
	best, bestD := -1, -1.0
	for k := 0; k < n; k++ {
		c := (start + k) % n
		d := math.Inf(1)
		sameCountry := false
		for _, f := range from {
			d = math.Min(d, g.lat.at(c, f))
			if g.lat.locs[c].Country == g.lat.locs[f].Country {
				sameCountry = true
			}
		}
		if sameCountry {
			continue
		}
		if d >= g.p.FarRTT {
			return c
		}
		if d > bestD {
			best, bestD = c, d
		}
	}
	if best < 0 {
		return from[0]
	}
	return best
}

// otherCity returns another location of loc's country, if there is one.
func (g *gen) otherCity(r *rng, loc int) (int, bool) {
	cs := g.lat.byCountry[g.lat.locs[loc].Country]
	if len(cs) < 2 {
		return loc, false
	}
	for {
		c := cs[r.intn(len(cs))]
		if c != loc {
			return c, true
		}
	}
}

// spread returns k locations for points of presence: greedily, each next
// one is the candidate that most lowers the mean RTT from every location
// to its nearest chosen one (a p-median heuristic), over a random
// two-thirds of the candidates so that two CDNs differ. Together they are
// near everybody.
func (g *gen) spread(r *rng, k int) []int {
	n := g.lat.n()
	k = min(k, n)
	var cands []int
	for i := 0; i < n; i++ {
		if r.chance(2.0 / 3) {
			cands = append(cands, i)
		}
	}
	if len(cands) < k {
		cands = r.perm(n)
	}
	near := make([]float64, n)
	for i := range near {
		near[i] = math.Inf(1)
	}
	var out []int
	for len(out) < k {
		best, bestSum := -1, math.Inf(1)
		for _, c := range cands {
			if slices.Contains(out, c) {
				continue
			}
			sum := 0.0
			for i := 0; i < n; i++ {
				sum += math.Min(near[i], g.lat.at(i, c))
			}
			if sum < bestSum {
				best, bestSum = c, sum
			}
		}
		out = append(out, best)
		for i := range near {
			near[i] = math.Min(near[i], g.lat.at(i, best))
		}
	}
	return out
}

// ---- names ----

func title(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func (g *gen) pickName(r *rng) string {
	return nameWords[r.intn(len(nameWords))]
}

var kindWords = map[orgKind][]string{
	orgHosting:    {"Hosting", "Cloud", "Datacenter", "Servers", "Web Services", "Colocation"},
	orgISP:        {"Telecom", "Broadband", "Networks", "Communications", "Internet", "Fiber"},
	orgEnterprise: {"Foods", "Media", "University", "Bank", "Logistics", "Books", "Motors", "Clinic", "Publishing", "Retail"},
	orgCDN:        {"Edge", "CDN", "Delivery Network", "Accelerate"},
	orgCustomer:   {"Consulting", "Design", "Studio", "Shop", "Labs", "Agency", "Partners", "Travel"},
}

// newOrg creates an organisation of kind based at home.
func (g *gen) newOrg(r *rng, kind orgKind, home int) *org {
	loc := g.lat.locs[home]
	c := countries[loc.CountryName]
	a, b := title(g.pickName(r)), g.pickName(r)
	words := kindWords[kind]
	name := a + b + " " + words[r.intn(len(words))] + " " + c.suffix
	o := &org{
		idx:      len(g.orgs),
		kind:     kind,
		name:     name,
		registry: loc.Registry,
		country:  loc.Country,
		home:     home,
		stem:     strings.ToUpper(a + b),
		date:     randomDate(r, 1995, 2025),
		weight:   1,
	}
	if len(o.stem) > 14 {
		o.stem = o.stem[:14]
	}
	o.handle = fmt.Sprintf("ORG-%c%c%d-%s", a[0], strings.ToUpper(b)[0], o.idx+1, rpslSource(o.registry))
	g.orgs = append(g.orgs, o)
	return o
}

// giveAllocation gives o an opaque-id and an ASN so that it can hold
// allocations in the delegated files.
func (g *gen) giveAllocation(o *org) {
	if o.opaque != "" {
		return
	}
	o.opaque = opaqueID(o.registry, mix(g.seed, "opaque", uint64(o.idx)))
	o.asn = 4_200_000_000 + uint32(o.idx)
}

// opaqueID formats an opaque-id the way registry reg writes them.
func opaqueID(reg string, h uint64) string {
	h2 := splitmix(h)
	hex32 := fmt.Sprintf("%016x%016x", h, h2)
	switch reg {
	case "ripencc":
		return hex32[:8] + "-" + hex32[8:12] + "-4" + hex32[13:16] + "-a" + hex32[17:20] + "-" + hex32[20:32]
	case "arin":
		return hex32
	case "afrinic":
		return strings.ToUpper(hex32[:8])
	case "apnic":
		return "A9" + strings.ToUpper(hex32[:6])
	case "lacnic":
		return strconv.FormatUint(h%900000+100000, 10)
	}
	return hex32[:12]
}

func randomDate(r *rng, fromYear, toYear int) string {
	return fmt.Sprintf("%04d%02d%02d", r.rangeInt(fromYear, toYear), r.rangeInt(1, 12), r.rangeInt(1, 28))
}

// netname returns a fresh netname of o with the given role.
func (g *gen) netname(o *org, role string) string {
	o.nsub++
	return fmt.Sprintf("%s-%s%d", o.stem, role, o.nsub)
}

// newBlock returns a block of kind owned by o at loc (-1 to inherit).
func (g *gen) newBlock(kind bkind, o *org, loc int) *block {
	return &block{kind: kind, org: o, loc: loc, rel: -1}
}

// slotSize returns the aligned size layout reserves for b.
func (b *block) slotSize() uint32 {
	if b.slot > 0 {
		return b.slot
	}
	return b.size
}

func (b *block) add(k *block) *block { b.kids = append(b.kids, k); return k }

// ---- synthetic structure ----

// SiteKind says how a site is hosted.
type SiteKind uint8

// Site kinds.
const (
	Dedicated  SiteKind = iota // a customer's server at a hosting provider
	Shared                     // in a shared-hosting subnet with many other sites
	SelfHosted                 // on an enterprise's own (PI) or ISP-assigned (PA) space
	ISPHosted                  // on a small business line of an access ISP
	CDNSite                    // one address per point of presence of a CDN
	RealHosted                 // in a range copied from the real data
)

var siteKindNames = []string{"dedicated", "shared", "self-hosted", "isp-hosted", "cdn", "real"}

// String returns the kind's name as the spec writes it.
func (k SiteKind) String() string {
	if int(k) < len(siteKindNames) {
		return siteKindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// MarshalText implements encoding.TextMarshaler.
func (k SiteKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *SiteKind) UnmarshalText(b []byte) error {
	return unmarshalName(b, siteKindNames, (*uint8)(k), "site kind")
}

// unmarshalName sets *v to the index of b in names.
func unmarshalName(b []byte, names []string, v *uint8, what string) error {
	for i, n := range names {
		if string(b) == n {
			*v = uint8(i)
			return nil
		}
	}
	return fmt.Errorf("unknown %s %q", what, b)
}

// synthetic builds the whole structure from the seed.
func (g *gen) synthetic() error {
	p := g.p
	r := g.r
	n := p.Sites
	nCDN := int(math.Round(float64(n) * p.CDN))
	nShared := int(math.Round(float64(n) * p.SharedHosting))
	nSelf := int(math.Round(float64(n) * p.SelfHosted))
	nISP := int(math.Round(float64(n) * p.ISPHosted))
	for nCDN+nShared+nSelf+nISP > n {
		switch {
		case nShared > 0:
			nShared--
		case nSelf > 0:
			nSelf--
		case nISP > 0:
			nISP--
		default:
			nCDN--
		}
	}
	nDed := n - nCDN - nShared - nSelf - nISP
	kinds := make([]SiteKind, 0, n)
	for _, kc := range []struct {
		k SiteKind
		c int
	}{{Dedicated, nDed}, {Shared, nShared}, {SelfHosted, nSelf}, {ISPHosted, nISP}, {CDNSite, nCDN}} {
		for i := 0; i < kc.c; i++ {
			kinds = append(kinds, kc.k)
		}
	}
	r.shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	g.sites = make([]*siteRec, n)
	byKind := map[SiteKind][]*siteRec{}
	for i := range g.sites {
		s := &siteRec{id: i, kind: kinds[i]}
		g.sites[i] = s
		byKind[s.kind] = append(byKind[s.kind], s)
	}

	// Hosting providers, heavy-tailed in size.
	if nShared+nDed > 0 {
		nHost := max(1, (nShared+nDed+79)/80)
		for i := 0; i < nHost; i++ {
			g.newHoster(r)
		}
	}
	g.placeShared(r, byKind[Shared])
	g.placeDedicated(r, byKind[Dedicated])
	g.placeSelfHosted(r, byKind[SelfHosted])
	g.placeISPHosted(r, byKind[ISPHosted])
	g.placeCDN(r, byKind[CDNSite])
	g.placeNodes(r)
	g.placeDNS()
	return g.allocate(r)
}

func (g *gen) hosters() []*org {
	var hs []*org
	for _, o := range g.orgs {
		if o.kind == orgHosting {
			hs = append(hs, o)
		}
	}
	return hs
}

func (g *gen) pickWeighted(r *rng, os []*org) *org {
	w := make([]float64, len(os))
	for i, o := range os {
		w[i] = o.weight
	}
	return os[r.weighted(w)]
}

// newHoster creates a hosting provider with one or more data centres.
func (g *gen) newHoster(r *rng) *org {
	o := g.newOrg(r, orgHosting, g.randomLoc(r))
	o.weight = r.pareto(1.2)
	g.giveAllocation(o)
	locs := []int{o.home}
	switch {
	case r.chance(g.p.International):
		for k := r.rangeInt(1, 3); k > 0; k-- {
			locs = append(locs, g.farFrom(r, locs))
		}
	case r.chance(0.3):
		if c, ok := g.otherCity(r, o.home); ok {
			locs = append(locs, c)
		}
	}
	// A big provider has data centres in more cities of its country:
	// one more for every doubling of its weight, up to three.
	for k := min(3, int(math.Log2(o.weight))); k > 0; k-- {
		if c, ok := g.otherCity(r, o.home); ok && !slices.Contains(locs, c) {
			locs = append(locs, c)
		}
	}
	for _, l := range locs {
		dc := g.newBlock(bOrgNet, o, l)
		dc.lastMile = r.logUniform(0.2, 1.5)
		dc.bw = r.logUniform(200, 2000) * mbit
		dc.netname = g.netname(o, strings.ToUpper(cityCode(g.lat.locs[l].City)))
		dc.descr = o.name + ", " + g.lat.locs[l].City + " data centre"
		dc.status = "SUB-ALLOCATED PA"
		o.dcs = append(o.dcs, dc)
		o.top = append(o.top, dc)
	}
	return o
}

// dcLimit bounds the addresses one data-centre block holds; a busier data
// centre gets a second block at the same place, as real ones do.
const dcLimit = 8192

// dcFor returns a data centre of o with room for need more addresses.
func (g *gen) dcFor(r *rng, o *org, need uint32) *block {
	dc := o.dcs[r.intn(len(o.dcs))]
	if dc.load+need <= dcLimit {
		dc.load += need
		return dc
	}
	for _, d := range o.dcs {
		if d.loc == dc.loc && d.load+need <= dcLimit {
			d.load += need
			return d
		}
	}
	nd := g.newBlock(bOrgNet, o, dc.loc)
	nd.lastMile, nd.bw, nd.status = dc.lastMile, dc.bw, dc.status
	nd.netname = g.netname(o, strings.ToUpper(cityCode(g.lat.locs[dc.loc].City)))
	nd.descr = dc.descr
	nd.load = need
	o.dcs = append(o.dcs, nd)
	o.top = append(o.top, nd)
	return nd
}

func cityCode(city string) string {
	var b strings.Builder
	for _, c := range strings.ToUpper(city) {
		if c >= 'A' && c <= 'Z' {
			b.WriteRune(c)
		}
		if b.Len() == 3 {
			break
		}
	}
	for b.Len() < 3 {
		b.WriteByte('X')
	}
	return b.String()
}

func (g *gen) placeShared(r *rng, sites []*siteRec) {
	if len(sites) == 0 {
		return
	}
	hs := g.hosters()
	for i := 0; i < len(sites); i += g.p.SharedSize {
		group := sites[i:min(i+g.p.SharedSize, len(sites))]
		o := g.pickWeighted(r, hs)
		dc := g.dcFor(r, o, 256)
		sb := dc.add(g.newBlock(bShared, o, -1))
		sb.netname = g.netname(o, "SHARED")
		sb.descr = o.name + " shared web hosting"
		sb.status = "ASSIGNED PA"
		var h *host
		for j, s := range group {
			if j%g.p.SitesPerAddr == 0 {
				h = &host{}
				sb.hosts = append(sb.hosts, h)
			}
			h.sites = append(h.sites, s)
			s.hosts = append(s.hosts, h)
			s.org = o
		}
	}
}

// newCustomer creates a customer organisation of a provider; about half
// have an organisation object, the others are known by netname only.
func (g *gen) newCustomer(r *rng, provider *org, loc int) *org {
	c := g.newOrg(r, orgCustomer, loc)
	c.registry = provider.registry // the provider's registry holds the assignment
	if r.chance(0.5) {
		c.handle = "" // netname only
	} else {
		c.handle = fmt.Sprintf("ORG-%s%d-%s", c.stem[:2], c.idx+1, rpslSource(c.registry))
	}
	return c
}

// customerBlock returns a fresh customer assignment of provider under
// parent, possibly relocated far away (the adjacent-subnets anomaly).
func (g *gen) customerBlock(r *rng, parent *block, provider, cust *org, parentLoc int) *block {
	cb := parent.add(g.newBlock(bCustomer, cust, -1))
	cb.size = 1 << r.rangeInt(3, 5) // /29 to /27
	cb.netname = g.netname(cust, "NET")
	cb.descr = cust.name
	cb.status = "ASSIGNED PA"
	g.relocate(r, cb, parentLoc)
	return cb
}

// relocate places b, a subnet below a parent at parentLoc, where Params
// ask: far from the parent in another country (AdjacentFar; the registry
// may keep the parent's country, StaleCountry), in another city of the
// parent's country (OtherCity), or with its parent (b.loc stays -1).
func (g *gen) relocate(r *rng, b *block, parentLoc int) {
	switch u := r.float(); {
	case u < g.p.AdjacentFar:
		b.loc = g.farFrom(r, []int{parentLoc})
		b.lastMile = r.logUniform(0.5, 4)
		if r.chance(g.p.StaleCountry) {
			b.country = g.lat.locs[parentLoc].Country
		}
	case u < g.p.AdjacentFar+g.p.OtherCity:
		if c, ok := g.otherCity(r, parentLoc); ok {
			b.loc = c
		}
	}
}

// placeDeep puts h into b, possibly nested in sub-assignments and a unary
// range, to give the hierarchy its realistic depth.
func (g *gen) placeDeep(r *rng, b *block, h *host) {
	for b.size >= 8 && r.chance(0.45) {
		sub := b.add(g.newBlock(bSub, b.org, -1))
		sub.size = b.size / uint32(2<<r.intn(2)) // a half or a quarter
		sub.netname = b.netname + "-" + strconv.Itoa(len(b.kids))
		sub.descr = b.descr
		sub.status = "ASSIGNED PA"
		b = sub
	}
	if r.chance(g.p.Unary) {
		u := b.add(g.newBlock(bUnary, b.org, -1))
		u.size = 1
		u.netname = b.netname + "-HOST"
		u.descr = b.descr
		u.status = "ASSIGNED PA"
		u.hosts = append(u.hosts, h)
		return
	}
	b.hosts = append(b.hosts, h)
}

func (g *gen) placeDedicated(r *rng, sites []*siteRec) {
	if len(sites) == 0 {
		return
	}
	hs := g.hosters()
	var last *block
	lastN := 0
	for _, s := range sites {
		var cb *block
		if last != nil && lastN < 3 && r.chance(0.25) {
			cb = last // a customer with several sites
			lastN++
		} else {
			o := g.pickWeighted(r, hs)
			dc := g.dcFor(r, o, 32)
			cust := g.newCustomer(r, o, dc.loc)
			cb = g.customerBlock(r, dc, o, cust, dc.loc)
			last, lastN = cb, 1
		}
		h := &host{sites: []*siteRec{s}}
		s.hosts = []*host{h}
		s.org = cb.org
		g.placeDeep(r, cb, h)
	}
}

// isp returns the access ISP of a country, creating it based at loc.
func (g *gen) isp(r *rng, loc int) *org {
	cc := g.lat.locs[loc].Country
	if o, ok := g.isps[cc]; ok {
		return o
	}
	o := g.newOrg(r, orgISP, loc)
	o.weight = 1
	o.pools = map[int]*block{}
	o.resid = map[int]*block{}
	g.giveAllocation(o)
	g.isps[cc] = o
	return o
}

// pool returns the ISP's regional pool at loc.
func (g *gen) pool(r *rng, o *org, loc int) *block {
	if b, ok := o.pools[loc]; ok {
		return b
	}
	b := g.newBlock(bOrgNet, o, loc)
	b.lastMile = r.logUniform(0.5, 3)
	b.bw = r.logUniform(100, 1000) * mbit
	b.netname = g.netname(o, strings.ToUpper(cityCode(g.lat.locs[loc].City)))
	b.descr = o.name + ", " + g.lat.locs[loc].City + " region"
	b.status = "SUB-ALLOCATED PA"
	o.pools[loc] = b
	o.top = append(o.top, b)
	return b
}

func (g *gen) placeSelfHosted(r *rng, sites []*siteRec) {
	for i := 0; i < len(sites); {
		k := min(r.rangeInt(1, 3), len(sites)-i)
		group := sites[i : i+k]
		i += k
		o := g.newOrg(r, orgEnterprise, g.randomLoc(r))
		offices := []int{o.home}
		if r.chance(g.p.International) {
			for j := r.rangeInt(1, 2); j > 0; j-- {
				offices = append(offices, g.farFrom(r, offices))
			}
		}
		pi := r.chance(0.5)
		if pi {
			g.giveAllocation(o)
		}
		blocks := make([]*block, len(offices))
		for j, l := range offices {
			var b *block
			if pi {
				b = g.newBlock(bOrgNet, o, l)
				b.status = "ASSIGNED PI"
				o.top = append(o.top, b)
			} else {
				isp := g.isp(r, l)
				b = g.pool(r, isp, l).add(g.newBlock(bCustomer, o, l))
				b.status = "ASSIGNED PA"
			}
			b.lastMile = r.logUniform(1, 6)
			b.bw = r.logUniform(20, 300) * mbit
			b.size = 1 << r.rangeInt(4, 6)
			b.netname = g.netname(o, strings.ToUpper(cityCode(g.lat.locs[l].City)))
			b.descr = o.name + ", " + g.lat.locs[l].City
			blocks[j] = b
		}
		for j, s := range group {
			h := &host{sites: []*siteRec{s}}
			s.hosts = []*host{h}
			s.org = o
			g.placeDeep(r, blocks[j%len(blocks)], h)
		}
	}
}

func (g *gen) placeISPHosted(r *rng, sites []*siteRec) {
	for _, s := range sites {
		loc := g.randomLoc(r)
		o := g.isp(r, loc)
		cust := g.newCustomer(r, o, loc)
		b := g.pool(r, o, loc).add(g.newBlock(bCustomer, cust, -1))
		b.size = 8
		b.lastMile = r.logUniform(2, 10)
		b.bw = r.logUniform(10, 100) * mbit
		b.netname = g.netname(cust, "BIZ")
		b.descr = cust.name
		b.status = "ASSIGNED PA"
		h := &host{sites: []*siteRec{s}}
		s.hosts = []*host{h}
		s.org = cust
		g.placeDeep(r, b, h)
	}
}

func (g *gen) placeCDN(r *rng, sites []*siteRec) {
	if len(sites) == 0 {
		return
	}
	nOrgs := (len(sites) + 199) / 200
	cdns := make([]*org, nOrgs)
	for i := range cdns {
		pops := g.spread(r, g.p.CDNPoPs)
		o := g.newOrg(r, orgCDN, pops[0])
		g.giveAllocation(o)
		for _, l := range pops {
			b := g.newBlock(bOrgNet, o, l)
			b.lastMile = r.logUniform(0.1, 0.8)
			b.bw = r.logUniform(1000, 4000) * mbit
			b.netname = g.netname(o, strings.ToUpper(cityCode(g.lat.locs[l].City)))
			b.descr = o.name + " point of presence " + g.lat.locs[l].City
			b.status = "SUB-ALLOCATED PA"
			b.country = g.lat.locs[l].Country
			o.top = append(o.top, b)
		}
		cdns[i] = o
	}
	for i, s := range sites {
		o := cdns[i%len(cdns)]
		s.org = o
		for _, pop := range o.top {
			h := &host{sites: []*siteRec{s}}
			pop.hosts = append(pop.hosts, h)
			s.hosts = append(s.hosts, h)
		}
	}
}

// nodeLocs returns the nodes' locations: round a shuffled list of the
// countries that ok accepts (all when ok is nil), a random city of each,
// so that even a few nodes are spread over the world.
func (g *gen) nodeLocs(r *rng, ok func(cc string) bool) []int {
	var ccs []string
	for _, reg := range registries {
		for name, c := range countries {
			if c.registry == reg && len(g.lat.byCountry[c.code]) > 0 && (ok == nil || ok(c.code)) {
				ccs = append(ccs, c.code+"|"+name)
			}
		}
	}
	slices.Sort(ccs)
	r.shuffle(len(ccs), func(i, j int) { ccs[i], ccs[j] = ccs[j], ccs[i] })
	out := make([]int, g.p.Nodes)
	for i := range out {
		cc, _, _ := strings.Cut(ccs[i%len(ccs)], "|")
		cities := g.lat.byCountry[cc]
		out[i] = cities[r.intn(len(cities))]
	}
	return out
}

// placeNodes gives every node an address: in a data centre of its city
// for some, on an ISP's home-line pool for the others.
func (g *gen) placeNodes(r *rng) {
	locs := g.nodeLocs(r, nil)
	dcAt := map[int][]*block{}
	for _, o := range g.hosters() {
		for _, dc := range o.dcs {
			dcAt[dc.loc] = append(dcAt[dc.loc], dc)
		}
	}
	for i := 0; i < g.p.Nodes; i++ {
		loc := locs[i]
		nd := &nodeRec{id: i, host: &host{}}
		g.nodes = append(g.nodes, nd)
		if dcs := dcAt[loc]; len(dcs) > 0 && r.chance(g.p.NodesAtHosting) {
			dc := dcs[r.intn(len(dcs))]
			cust := g.newCustomer(r, dc.org, loc)
			cb := dc.add(g.newBlock(bCustomer, cust, -1))
			cb.size = 8
			cb.netname = g.netname(cust, "VOLUNTEER")
			cb.descr = cust.name + " volunteer server"
			cb.status = "ASSIGNED PA"
			cb.hosts = append(cb.hosts, nd.host)
			continue
		}
		o := g.isp(r, loc)
		res := o.resid[loc]
		if res == nil || len(res.hosts) >= 200 {
			res = g.pool(r, o, loc).add(g.newBlock(bResidential, o, -1))
			res.size = 256
			res.lastMile = r.logUniform(5, 25)
			res.bw = r.logUniform(10, 150) * mbit
			res.netname = g.netname(o, "DYN")
			res.descr = o.name + " residential customers"
			res.status = "ASSIGNED PA"
			o.resid[loc] = res
		}
		res.hosts = append(res.hosts, nd.host)
	}
}

// placeDNS puts the DNS server at 127.0.X.53 in the reserved first /14,
// outside every registry block; X comes from the seed.
func (g *gen) placeDNS() {
	x := uint32(1 + mix(g.seed, "dns")%254)
	g.dns = &host{addr: 127<<24 | x<<8 | 53}
}

// ---- allocations and registry blocks ----

// allocate groups every organisation's top-level subnets into
// allocations, the allocations into registry blocks, and sizes everything.
func (g *gen) allocate(r *rng) error {
	for _, o := range g.orgs {
		if len(o.top) == 0 {
			continue
		}
		for _, b := range o.top {
			flatten(b, 4, g.p.MaxDepth)
			sizeBlock(r, b, true)
		}
		// Group by registry: a CDN takes space from the registry of each
		// point of presence; everyone else from its home registry.
		groups := map[string][]*block{}
		var regs []string
		for _, b := range o.top {
			reg := o.registry
			if o.kind == orgCDN {
				reg = g.lat.locs[b.loc].Registry
			}
			if _, ok := groups[reg]; !ok {
				regs = append(regs, reg)
			}
			groups[reg] = append(groups[reg], b)
		}
		for _, reg := range regs {
			bs := groups[reg]
			parts := [][]*block{bs}
			if len(bs) >= 2 && r.chance(g.p.MultiAlloc) {
				cut := r.rangeInt(1, len(bs)-1)
				parts = [][]*block{bs[:cut], bs[cut:]}
			}
			for _, part := range parts {
				for _, a := range g.allocBlocks(r, o, reg, part) {
					g.attach(reg, a)
				}
			}
		}
	}
	for _, a := range g.realAllocs {
		flatten(a, 3, g.p.MaxDepth)
		sizeBlock(r, a, false)
		g.attach(a.registry, a)
	}
	return g.registryBlocks(r)
}

// allocBlocks packs subnets into allocations of at most /16.
func (g *gen) allocBlocks(r *rng, o *org, reg string, bs []*block) []*block {
	slices.SortStableFunc(bs, func(a, b *block) int { return int(b.size>>1) - int(a.size>>1) })
	var out []*block
	var cur *block
	var used uint32
	newAlloc := func() {
		cur = &block{kind: bAlloc, org: o, loc: -1, rel: -1, registry: reg, country: o.country, date: o.date}
		cur.status = "allocated"
		if o.kind == orgEnterprise {
			cur.status = "assigned"
		}
		out = append(out, cur)
		used = 0
	}
	const capacity = 1 << (32 - maxAllocLen - 1) // leave the /16 room to be a proper parent
	for _, b := range bs {
		if cur == nil || used+b.size > capacity {
			newAlloc()
		}
		cur.kids = append(cur.kids, b)
		used += b.size
	}
	for _, a := range out {
		sizeBlock(r, a, false)
		if r.chance(0.5) && a.size < 1<<(32-maxAllocLen) {
			a.size *= 2 // allocations are rarely full
		}
		a.size = max(a.size, 256)
	}
	return out
}

// attach records an allocation for its registry; registryBlocks places it.
func (g *gen) attach(reg string, a *block) {
	g.root.kids = append(g.root.kids, a) // temporarily; regrouped below
	a.registry = reg
}

// registryBlocks regroups the allocations under registry-level /14 blocks
// placed at random free positions of 127/8 (never the first /14).
func (g *gen) registryBlocks(r *rng) error {
	allocs := g.root.kids
	g.root.kids = nil
	byReg := map[string][]*block{}
	for _, a := range allocs {
		byReg[a.registry] = append(byReg[a.registry], a)
	}
	const units = 1 << (24 - unitBits)
	free := r.perm(units - 1)
	for i := range free {
		free[i]++
	}
	for _, reg := range registries {
		as := byReg[reg]
		if len(as) == 0 {
			continue
		}
		// A registry hands out neighbouring space in one region: the
		// allocations fill its blocks in the order of their countries'
		// longitudes (of a country's first city), so that addresses
		// next to each other are mostly in one country or nearby ones.
		lon := func(a *block) float64 {
			if cs := g.lat.byCountry[a.country]; len(cs) > 0 {
				return g.lat.locs[cs[0]].Lon
			}
			return 0
		}
		slices.SortStableFunc(as, func(a, b *block) int {
			if c := cmp.Compare(lon(a), lon(b)); c != 0 {
				return c
			}
			if c := strings.Compare(a.country, b.country); c != 0 {
				return c
			}
			return int(b.slotSize()>>1) - int(a.slotSize()>>1)
		})
		var blocks []*block
		var used []uint32
		for _, a := range as {
			k := -1
			for i := range blocks {
				if used[i]+a.slotSize() <= 1<<unitBits {
					k = i
					break
				}
			}
			if k < 0 {
				if len(free) == 0 {
					return fmt.Errorf("%w: the world does not fit in 127/8; use fewer sites", ErrParams)
				}
				u := free[0]
				free = free[1:]
				rb := &block{kind: bRegistry, loc: -1, rel: -1, registry: reg, size: 1 << unitBits, start: 127<<24 | uint32(u)<<unitBits, placed: true, fixed: true, date: "20000101"}
				blocks = append(blocks, rb)
				used = append(used, 0)
				k = len(blocks) - 1
			}
			blocks[k].kids = append(blocks[k].kids, a)
			used[k] += a.slotSize()
		}
		g.root.kids = append(g.root.kids, blocks...)
	}
	return nil
}

// flatten removes the blocks deeper than maxDepth below b (at depth d),
// moving their hosts up into the deepest block kept.
func flatten(b *block, d, maxDepth int) {
	if d >= maxDepth {
		for _, k := range b.kids {
			b.hosts = append(b.hosts, collectHosts(k)...)
		}
		b.kids = nil
		return
	}
	for _, k := range b.kids {
		flatten(k, d+1, maxDepth)
	}
}

func collectHosts(b *block) []*host {
	hs := slices.Clone(b.hosts)
	for _, k := range b.kids {
		hs = append(hs, collectHosts(k)...)
	}
	return hs
}

// sizeBlock sizes b and its subtree bottom-up: a power of two holding its
// children, its hosts and room for the first and last address of every
// /24 (never used by hosts), strictly larger than any child. slack adds
// realistic unused space.
func sizeBlock(r *rng, b *block, slack bool) {
	if b.kind == bUnary {
		b.size = 1
		return
	}
	var need uint32
	for _, k := range b.kids {
		sizeBlock(r, k, slack)
		need += k.size
	}
	if b.fixed {
		return
	}
	need += uint32(len(b.hosts))
	s := nextPow2(need + 2)
	for s-2*max(1, s/256) < need {
		s *= 2
	}
	if slack && b.kind == bOrgNet && r.chance(0.5) {
		s *= 2
	}
	b.size = max(b.size, s)
}

func nextPow2(x uint32) uint32 {
	if x <= 1 {
		return 1
	}
	s := uint32(1)
	for s < x {
		s <<= 1
	}
	return s
}
