package world

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/micra-net/micra/subnet"
	"github.com/micra-net/micra/subnet/embedded"
)

// realInputs are the registry data a world derived from real data reads,
// relative to the data directory: the extended files (whose opaque-ids
// group one organisation's allocations), the 2013 APNIC and ARIN files
// (no opaque-ids: each allocation is its own organisation) and the
// IP-to-ASN table, whose routed ranges with their organisation names give
// the allocations their internal structure.
var realInputs = []string{
	"rir/extended/delegated-afrinic-extended-latest.gz",
	"rir/extended/delegated-lacnic-extended-latest.gz",
	"rir/extended/delegated-ripencc-extended-head.gz",
	"rir/2013-08-13/delegated-apnic-latest.gz",
	"rir/2013-08-13/delegated-arin-latest.gz",
	"ip2asn/asn-ipv4.csv.gz",
}

// Sizes of the real allocations a world takes: /24 to /16.
const (
	realMinAlloc = 256
	realMaxAlloc = 65536
	realBudget   = 4 << 20 // addresses of real allocations in one world
)

// realTree is the hierarchy of the real data, built once per process and
// data directory (building it takes seconds).
type realTree struct {
	once  sync.Once
	t     *subnet.Tree
	files []DataFile
	err   error
}

var realTrees sync.Map // absolute data dir → *realTree

// loadRealTree returns the hierarchy of the real data in dir; with dir ""
// (no data directory found), the built-in snapshot's (subnet/embedded,
// built from the same files and the IANA and other 2013 RIR files), so
// that a world derived from real allocations needs nothing beside the
// checkout.
func loadRealTree(ctx context.Context, dir string) (*subnet.Tree, []DataFile, error) {
	if dir == "" {
		t, err := embedded.Tree()
		if err != nil {
			return nil, nil, fmt.Errorf("%w: the built-in hierarchy: %v", ErrBadData, err)
		}
		return t, []DataFile{{Path: builtinPrefix + "subnet/embedded/default.snap", SHA256: sha256Hex(embedded.Bytes())}}, nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, nil, err
	}
	v, _ := realTrees.LoadOrStore(abs, &realTree{})
	rt := v.(*realTree)
	rt.once.Do(func() { rt.t, rt.files, rt.err = buildRealTree(ctx, abs) })
	if rt.err != nil {
		// Do not cache a cancellation.
		realTrees.CompareAndDelete(abs, rt)
	}
	return rt.t, rt.files, rt.err
}

func buildRealTree(ctx context.Context, dir string) (*subnet.Tree, []DataFile, error) {
	b, err := subnet.NewBuilder()
	if err != nil {
		return nil, nil, err
	}
	var files []DataFile
	for _, rel := range realInputs {
		f, err := openData(dir, rel)
		if err != nil {
			return nil, nil, err
		}
		h := sha256.New()
		_, err = b.Add(ctx, rel, io.TeeReader(f, h), subnet.FormatAuto)
		if err == nil {
			_, err = io.Copy(h, f)
		}
		f.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %s: %v", ErrBadData, rel, err)
		}
		files = append(files, DataFile{Path: rel, SHA256: hex.EncodeToString(h.Sum(nil))})
	}
	t, _, err := b.Build()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: building the real hierarchy: %v", ErrBadData, err)
	}
	return t, files, nil
}

// realAlloc is a candidate allocation of the real data.
type realAlloc struct {
	id      subnet.ID
	rng     subnet.Range
	key     string // organisation key in the tree; "" for none
	cc      string
	reg     string
	status  string
	country string
}

// fromReal builds the structure from the real data: it chooses real
// allocations (of /24 to /16, in countries of the latency data), keeping
// every chosen organisation's allocations together, and remaps each into
// 127/8 with its routed sub-ranges at the same offsets, so prefix lengths,
// alignment and organisation grouping are the real ones. Real
// organisations with ranges in several far-apart countries are taken on
// purpose (Params.International); some routed ranges serve another city
// of their allocation's country (Params.OtherCity). Sites and nodes then
// get synthetic customer assignments and shared-hosting subnets inside
// the real ranges, with the same anomalies as a synthetic world; CDN-like
// sites get a synthetic CDN.
func (g *gen) fromReal(ctx context.Context, dir string) ([]DataFile, error) {
	t, files, err := loadRealTree(ctx, dir)
	if err != nil {
		return nil, err
	}
	r := newRNG(g.seed, "real")
	p := g.p

	// Candidates: top-level registry allocations.
	var cands []realAlloc
	for id := range t.Subtree(t.Root(true)) {
		n := t.Node(id)
		if n.Layer != subnet.LayerRIR || !n.Range.Start.Is4() {
			continue
		}
		size := n.Range.NumAddrs()
		if size < realMinAlloc || size > realMaxAlloc || (n.Status != "allocated" && n.Status != "assigned") {
			continue
		}
		if _, ok := g.lat.byCountry[n.Country]; !ok || !slices.Contains(registries, n.Registry) {
			continue
		}
		if par := t.Parent(id); par != subnet.None && t.Node(par).Layer == subnet.LayerRIR {
			continue // nested in another allocation
		}
		cands = append(cands, realAlloc{id: id, rng: n.Range, key: n.Org, cc: n.Country, reg: n.Registry, status: n.Status})
	}
	if len(cands) == 0 {
		return nil, fmt.Errorf("%w: no usable allocation in the real data", ErrBadData)
	}
	byKey := map[string][]int{}
	byCC := map[string][]int{}
	for i, c := range cands {
		if c.key != "" {
			byKey[c.key] = append(byKey[c.key], i)
		}
		byCC[c.cc] = append(byCC[c.cc], i)
	}
	// Real organisations of the routing data with ranges in allocations
	// of several countries: international companies.
	asCountries := map[string]map[string]int{} // as-org key → country → candidate
	for i, c := range cands {
		for d := range t.Subtree(c.id) {
			if d == c.id {
				continue
			}
			k := t.Org(d)
			if !strings.HasPrefix(k, "as-org:") {
				continue
			}
			m := asCountries[k]
			if m == nil {
				m = map[string]int{}
				asCountries[k] = m
			}
			if _, ok := m[c.cc]; !ok {
				m[c.cc] = i
			}
		}
	}
	var intl []string
	for k, m := range asCountries {
		if len(m) >= 2 && g.countriesFar(m) {
			intl = append(intl, k)
		}
	}
	slices.Sort(intl)

	chosen := map[int]bool{}
	var order []int
	var budget uint64
	take := func(i int) {
		if chosen[i] || budget+cands[i].rng.NumAddrs() > realBudget {
			return
		}
		chosen[i] = true
		order = append(order, i)
		budget += cands[i].rng.NumAddrs()
	}
	takeOrg := func(i int) {
		if k := cands[i].key; k != "" {
			for j, ci := range byKey[k] {
				if j == 4 {
					break
				}
				take(ci)
			}
			return
		}
		take(i)
	}
	// Every node's country needs real space.
	nodeLocs := g.realNodeLocs(r, byCC)
	for _, l := range nodeLocs {
		cs := byCC[g.lat.locs[l].Country]
		takeOrg(cs[r.intn(len(cs))])
	}
	nOrgs := max(8, p.Sites/6)
	for k := int(math.Ceil(p.International * float64(nOrgs))); k > 0 && len(intl) > 0; k-- {
		j := r.intn(len(intl))
		m := asCountries[intl[j]]
		ccs := make([]string, 0, len(m))
		for cc := range m {
			ccs = append(ccs, cc)
		}
		slices.Sort(ccs)
		for _, cc := range ccs[:min(3, len(ccs))] {
			takeOrg(m[cc])
		}
		intl = slices.Delete(intl, j, j+1)
	}
	need := uint64(p.Sites)*64 + uint64(p.Nodes)*128
	for tries := 0; tries < 100*nOrgs && (len(order) < nOrgs || realCapacity(cands, order) < need); tries++ {
		takeOrg(r.intn(len(cands)))
		if budget >= realBudget-realMinAlloc {
			break
		}
	}

	// World organisations and blocks.
	orgOf := map[string]*org{}
	var leaves []*block
	var leafLocs []int
	for _, i := range order {
		c := cands[i]
		key := c.key
		if key == "" {
			key = "alloc:" + c.rng.String()
		}
		a := g.realAllocBlock(r, t, c, key, orgOf)
		g.realAllocs = append(g.realAllocs, a)
		if len(a.kids) == 0 {
			leaves = append(leaves, a)
			leafLocs = append(leafLocs, a.org.home)
			continue
		}
		for _, k := range a.kids {
			loc := k.loc
			if loc < 0 {
				loc = a.org.home
			}
			leaves = append(leaves, k)
			leafLocs = append(leafLocs, loc)
		}
	}
	if err := g.realPlace(r, leaves, leafLocs, nodeLocs); err != nil {
		return nil, err
	}
	return files, g.allocate(r)
}

// countriesFar reports whether two of the countries are at least FarRTT
// apart (between their first cities).
func (g *gen) countriesFar(m map[string]int) bool {
	var ls []int
	for cc := range m {
		ls = append(ls, g.lat.byCountry[cc][0])
	}
	slices.Sort(ls)
	for i := range ls {
		for j := i + 1; j < len(ls); j++ {
			if g.lat.at(ls[i], ls[j]) >= g.p.FarRTT {
				return true
			}
		}
	}
	return false
}

// realNodeLocs returns the nodes' locations, in countries that have real
// allocations.
func (g *gen) realNodeLocs(r *rng, byCC map[string][]int) []int {
	return g.nodeLocs(r, func(cc string) bool { return len(byCC[cc]) > 0 })
}

// realCapacity estimates the addresses the chosen allocations offer to
// synthetic assignments: the largest aligned block of each leaf.
func realCapacity(cands []realAlloc, order []int) uint64 {
	var n uint64
	for _, i := range order {
		n += uint64(alignedCapacity(cands[i].rng))
	}
	return n
}

// alignedCapacity returns the size of the largest CIDR block inside r.
func alignedCapacity(r subnet.Range) uint32 {
	s, _ := addrU32(r.Start)
	e, _ := addrU32(r.End)
	for k := uint32(16); ; k-- {
		sz := uint32(1) << k
		a := (uint64(s) + uint64(sz) - 1) / uint64(sz) * uint64(sz)
		if a+uint64(sz)-1 <= uint64(e) {
			return sz
		}
		if k == 0 {
			return 0
		}
	}
}

// realOrg returns the world organisation of a real organisation key.
func (g *gen) realOrg(r *rng, key, name, cc, reg string, orgOf map[string]*org) *org {
	if o, ok := orgOf[key]; ok {
		return o
	}
	cities := g.lat.byCountry[cc]
	home := cities[int(mix(g.seed, "realhome:"+key)%uint64(len(cities)))]
	o := &org{idx: len(g.orgs), kind: orgReal, name: name, registry: reg, country: cc, home: home, date: randomDate(r, 1995, 2020), weight: 1}
	o.stem = netnameOf(name)
	o.handle = fmt.Sprintf("ORG-R%d-%s", o.idx+1, rpslSource(reg))
	g.orgs = append(g.orgs, o)
	orgOf[key] = o
	return o
}

// netnameOf derives an RPSL netname stem from an organisation name.
func netnameOf(name string) string {
	var b strings.Builder
	for _, c := range strings.ToUpper(name) {
		switch {
		case c >= 'A' && c <= 'Z' || c >= '0' && c <= '9':
			b.WriteRune(c)
		case (c == ' ' || c == '-' || c == '.') && b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
		if b.Len() >= 16 {
			break
		}
	}
	s := strings.Trim(b.String(), "-")
	if len(s) < 2 {
		s = "NET" + s
	}
	return s
}

// realAllocBlock remaps one real allocation: a block whose slot keeps its
// real alignment, with the routed ranges inside at their real offsets.
func (g *gen) realAllocBlock(r *rng, t *subnet.Tree, c realAlloc, key string, orgOf map[string]*org) *block {
	s, _ := addrU32(c.rng.Start)
	n := uint32(c.rng.NumAddrs())
	slot := nextPow2(n)
	for uint64(s%slot)+uint64(n) > uint64(slot) {
		slot *= 2
	}
	type sub struct {
		rg   subnet.Range
		key  string
		name string
	}
	var subs []sub
	name := ""
	for d := range t.Subtree(c.id) {
		if d == c.id {
			continue
		}
		nd := t.Node(d)
		if nd.Layer != subnet.LayerASN || !strings.HasPrefix(nd.Org, "as-org:") {
			continue
		}
		if nd.Range == c.rng {
			name = nd.OrgName
			continue
		}
		if name == "" || len(subs) == 0 {
			name = nd.OrgName
		}
		subs = append(subs, sub{nd.Range, nd.Org, nd.OrgName})
	}
	if name == "" && strings.HasPrefix(c.key, "as-org:") {
		name = t.OrgName(c.key)
	}
	if name == "" {
		// The registry files name no holder: use the registry's words.
		id, ok := strings.CutPrefix(c.key, c.reg+":")
		if !ok || id == "" {
			id = fmt.Sprintf("%08x", mix(g.seed, "realname:"+key)>>32)
		}
		name = fmt.Sprintf("%s member %s", rpslSource(c.reg), id[:min(8, len(id))])
	}
	o := g.realOrg(r, key, name, c.cc, c.reg, orgOf)
	if o.opaque == "" {
		// The registry's own opaque-id when the file has one; the tree
		// may instead carry the routing data's organisation (merged into
		// an allocation of a file without opaque-ids).
		if id, ok := strings.CutPrefix(c.key, c.reg+":"); ok && id != "" {
			o.opaque = id
		} else {
			o.opaque = opaqueID(c.reg, mix(g.seed, "opaque", uint64(o.idx)))
		}
		o.asn = 4_200_000_000 + uint32(o.idx)
	}
	a := &block{kind: bAlloc, org: o, loc: -1, rel: -1, registry: c.reg, country: c.cc, status: c.status,
		date: o.date, size: n, slot: slot, slotOff: s % slot, fixed: true, real: c.rng.String()}
	for _, sb := range subs {
		ss, _ := addrU32(sb.rg.Start)
		so := g.realOrg(r, sb.key, sb.name, c.cc, c.reg, orgOf)
		k := g.newBlock(bReal, so, -1)
		k.rel = int64(ss - s)
		k.size = uint32(sb.rg.NumAddrs())
		k.fixed = true
		k.real = sb.rg.String()
		k.netname = fmt.Sprintf("%s-%d", so.stem, len(a.kids)+1)
		k.descr = sb.name
		k.status = "ASSIGNED PA"
		k.country = c.cc
		k.lastMile = r.logUniform(0.3, 3)
		k.bw = r.logUniform(50, 1000) * mbit
		// An allocation's routed ranges serve several cities of its
		// country, as the real ones do.
		if r.chance(g.p.OtherCity) {
			if c, ok := g.otherCity(r, o.home); ok {
				k.loc = c
			}
		}
		a.kids = append(a.kids, k)
	}
	return a
}

// realPlace gives sites and nodes synthetic assignments inside the real
// leaves that have room; locs are the leaves' locations.
func (g *gen) realPlace(r *rng, leaves []*block, locs []int, nodeLocs []int) error {
	p := g.p
	room := make([]uint32, len(leaves))
	byOrg := map[*org][]int{}
	for i, l := range leaves {
		room[i] = alignedCapacity(subnet.Range{Start: u32addr(uint32(l.rel)), End: u32addr(uint32(l.rel) + l.size - 1)})
		if l.kind == bAlloc {
			room[i] = alignedCapacity(subnet.Range{Start: u32addr(l.slotOff), End: u32addr(l.slotOff + l.size - 1)})
		}
		room[i] = room[i] / 2 // keep each real range a proper parent
		byOrg[l.org] = append(byOrg[l.org], i)
	}
	// leafFor returns a leaf of those in (all when nil) with room for
	// size addresses, in country cc when it is not "", and takes the room.
	leafFor := func(size uint32, cc string, in []int) (int, error) {
		var fit []int
		ok := func(i int) bool { return room[i] >= size && (cc == "" || leaves[i].country == cc) }
		if in == nil {
			for i := range leaves {
				if ok(i) {
					fit = append(fit, i)
				}
			}
		}
		for _, i := range in {
			if ok(i) {
				fit = append(fit, i)
			}
		}
		if len(fit) == 0 {
			return -1, fmt.Errorf("%w: the chosen real ranges have no room for a /%d; use fewer sites or nodes", ErrParams, 32-bitsOf(size))
		}
		i := fit[r.intn(len(fit))]
		room[i] -= size
		return i, nil
	}
	n := p.Sites
	nCDN := int(math.Round(float64(n) * p.CDN))
	nShared := int(math.Round(float64(n) * p.SharedHosting))
	if nCDN+nShared > n {
		nShared = n - nCDN
	}
	kinds := make([]SiteKind, 0, n)
	for i := 0; i < n; i++ {
		switch {
		case i < nCDN:
			kinds = append(kinds, CDNSite)
		case i < nCDN+nShared:
			kinds = append(kinds, Shared)
		default:
			kinds = append(kinds, RealHosted)
		}
	}
	r.shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	g.sites = make([]*siteRec, n)
	var cdn, shared []*siteRec
	for i := range g.sites {
		s := &siteRec{id: i, kind: kinds[i]}
		g.sites[i] = s
		switch s.kind {
		case CDNSite:
			cdn = append(cdn, s)
		case Shared:
			shared = append(shared, s)
		}
	}
	// Shared hosting: as in a synthetic world, providers of heavy-tailed
	// size run it, each in shared-hosting subnets under its
	// own ranges, wherever those are; a subnet may sit elsewhere than its
	// range, as customers do. International of them are real
	// organisations with ranges in far-apart places, the others the
	// holders of random leaves.
	var intl []*org
	for o, is := range byOrg {
		if g.spansFar(locs, is) {
			intl = append(intl, o)
		}
	}
	slices.SortFunc(intl, func(a, b *org) int { return a.idx - b.idx })
	var hosters []*org
	var weights []float64
	if len(shared) > 0 {
		groups := (len(shared) + p.SharedSize - 1) / p.SharedSize
		for k := (groups + 2) / 3; k > 0; k-- { // about three subnets each
			o := leaves[r.intn(len(leaves))].org
			if len(intl) > 0 && r.chance(p.International) {
				o = intl[r.intn(len(intl))]
			}
			if !slices.Contains(hosters, o) {
				hosters = append(hosters, o)
				weights = append(weights, r.pareto(1.2))
			}
		}
	}
	for i := 0; i < len(shared); i += p.SharedSize {
		group := shared[i:min(i+p.SharedSize, len(shared))]
		size := max(nextPow2(uint32((len(group)+p.SitesPerAddr-1)/p.SitesPerAddr)+2), 16)
		for size-2*max(1, size/256) < uint32(len(group)) {
			size *= 2
		}
		// A provider with room, or a new one when all are full.
		w := slices.Clone(weights)
		full := true
		for k, o := range hosters {
			if !slices.ContainsFunc(byOrg[o], func(i int) bool { return room[i] >= size }) {
				w[k] = 0
			} else {
				full = false
			}
		}
		var li int
		var err error
		if full {
			if li, err = leafFor(size, "", nil); err == nil {
				hosters = append(hosters, leaves[li].org)
				weights = append(weights, r.pareto(1.2))
			}
		} else {
			li, err = leafFor(size, "", byOrg[hosters[r.weighted(w)]])
		}
		if err != nil {
			return err
		}
		leaf := leaves[li]
		sb := leaf.add(g.newBlock(bShared, leaf.org, -1))
		sb.size = size
		sb.fixed = true
		sb.netname = g.netname(leaf.org, "SHARED")
		sb.descr = leaf.org.name + " shared web hosting"
		sb.status = "ASSIGNED PA"
		g.relocate(r, sb, locs[li])
		var h *host
		for j, s := range group {
			if j%p.SitesPerAddr == 0 {
				h = &host{}
				sb.hosts = append(sb.hosts, h)
			}
			h.sites = append(h.sites, s)
			s.hosts = append(s.hosts, h)
			s.org = leaf.org
		}
	}
	// Customers: half in a range that already serves customers, so
	// that busy ranges have many, as real providers' ranges do.
	var served []int
	for _, s := range g.sites {
		if s.kind != RealHosted {
			continue
		}
		size := uint32(1) << r.rangeInt(3, 5)
		li, err := -1, error(nil)
		if len(served) > 0 && r.chance(0.5) {
			li, err = leafFor(size, "", served)
		}
		if li < 0 {
			li, err = leafFor(size, "", nil)
		}
		if err != nil {
			return err
		}
		if !slices.Contains(served, li) {
			served = append(served, li)
		}
		leaf, loc := leaves[li], locs[li]
		cust := g.newCustomer(r, leaf.org, loc)
		cb := g.customerBlock(r, leaf, leaf.org, cust, loc)
		cb.size = size
		h := &host{sites: []*siteRec{s}}
		s.hosts = []*host{h}
		s.org = cust
		g.placeDeep(r, cb, h)
	}
	g.placeCDN(r, cdn)
	for i, loc := range nodeLocs {
		cc := g.lat.locs[loc].Country
		li, err := leafFor(16, cc, nil)
		if err != nil {
			return err
		}
		leaf := leaves[li]
		nd := &nodeRec{id: i, host: &host{}}
		g.nodes = append(g.nodes, nd)
		res := leaf.add(g.newBlock(bResidential, leaf.org, loc))
		res.size = 16
		res.lastMile = r.logUniform(5, 25)
		res.bw = r.logUniform(10, 150) * mbit
		res.netname = g.netname(leaf.org, "DYN")
		res.descr = leaf.org.name + " residential customers"
		res.status = "ASSIGNED PA"
		res.hosts = append(res.hosts, nd.host)
	}
	g.placeDNS()
	return nil
}

// spansFar reports whether two of the locations locs[i], i in is, are at
// least FarRTT apart.
func (g *gen) spansFar(locs []int, is []int) bool {
	for a, i := range is {
		for _, j := range is[a+1:] {
			if g.lat.at(locs[i], locs[j]) >= g.p.FarRTT {
				return true
			}
		}
	}
	return false
}

func bitsOf(size uint32) int {
	k := 0
	for size > 1 {
		size >>= 1
		k++
	}
	return k
}
