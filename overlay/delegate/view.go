package delegate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/subnet"
)

// view is what one decision's search sees: a subnet.Table, ProbeIndex and
// Prober over the coordinator's shard and what it learns of the
// neighbouring shards. It lives for one Delegate call and is used by one
// goroutine; ctx is that call's.
type view struct {
	d        *Delegator
	ctx      context.Context // the decision's
	budget   context.Context // ends searchMargin before ctx: probing stops
	env      overlay.DelegationEnv
	tree     *subnet.Tree
	req      overlay.DelegateRequest
	addr     netip.Addr // the address searched for
	url      string
	anchor   subnet.ID
	excluded map[peer.ID]bool
	peers    []overlay.PeerInfo
	pages    int64 // the new subnet's expected load

	homes   map[string]subnet.Range // nodes' own subnets known, by node
	owners  []owner                 // delegations known, sorted by ID
	known   map[subnet.ID]bool      // IDs in owners
	blocks  map[subnet.ID]bool      // blocks merged in
	probes  map[subnet.Range]map[string]probe
	issued  int
	dirtyIx bool // owners need sorting
}

type owner struct {
	id   subnet.ID
	node string
}

type probe struct {
	rtt time.Duration // subnet.Unreachable for a failed probe
	at  time.Time
}

func (d *Delegator) newView(ctx, budget context.Context, env overlay.DelegationEnv, req overlay.DelegateRequest, addr netip.Addr, excluded map[peer.ID]bool) *view {
	t := env.Tree()
	v := &view{
		d: d, ctx: ctx, budget: budget, env: env, tree: t, req: req, addr: addr, url: req.URL, anchor: env.Anchor(),
		excluded: excluded, peers: env.Peers(),
		known: map[subnet.ID]bool{}, blocks: map[subnet.ID]bool{}, probes: map[subnet.Range]map[string]probe{},
	}
	if v.url == "" {
		v.url = "http://" + netip.AddrPortFrom(addr, 80).String() + "/"
	}
	v.pages = d.subnetLoad(v.peers)
	// The shard's own delegations and probe results: authoritative.
	for _, dl := range env.Delegations() {
		v.addOwner(dl)
	}
	for _, p := range env.ProbesWithin(t.Range(v.anchor)) {
		v.addProbe(p)
	}
	// The organisation's delegations elsewhere (the search's step 2), when
	// it has other ranges.
	if org := t.Org(req.Subnet); org != "" && len(t.ByOrg(org)) > 1 {
		if ds, err := d.cache.org(ctx, env, org); err == nil {
			for _, dl := range ds {
				v.addOwner(dl)
			}
		} else {
			d.cfg.log.Debug("organisation delegations unavailable", "org", org, "error", err)
		}
	}
	return v
}

// addOwner records that range r is delegated to n, unless it is the subnet
// being decided (a re-decision must not stop at step 1) or n is excluded.
// The first source wins: the shard's store before other shards' copies.
// An own-subnet claim also records the node's home (subnet.SearchConfig.Home).
func (v *view) addOwner(dl overlay.Delegation) {
	r, n := dl.Subnet, dl.Node
	id, ok := v.tree.Find(r)
	if !ok || v.excluded[n] {
		return
	}
	if dl.Own {
		if v.homes == nil {
			v.homes = map[string]subnet.Range{}
		}
		v.homes[string(n)] = r
	}
	if id == v.req.Subnet || v.known[id] {
		return
	}
	v.known[id] = true
	v.owners = append(v.owners, owner{id, string(n)})
	v.dirtyIx = true
}

// addProbe records a stored probe result unless it is void for this
// decision: an excluded node's, older than MaxProbeAge, a failure older
// than the retry time, or the decided subnet's from before req.Fresh.
func (v *view) addProbe(p overlay.ProbeResult) {
	rtt, ok := v.usable(p)
	if !ok {
		return
	}
	m := v.probes[p.Subnet]
	if m == nil {
		m = map[string]probe{}
		v.probes[p.Subnet] = m
	}
	if old, ok := m[string(p.Peer)]; !ok || !p.At.Before(old.at) {
		m[string(p.Peer)] = probe{rtt, p.At}
	}
}

// usable returns the RTT of a stored probe for the search (subnet.Unreachable
// for a failure), false when it is void for this decision (addProbe).
func (v *view) usable(p overlay.ProbeResult) (time.Duration, bool) {
	if v.excluded[p.Peer] {
		return 0, false
	}
	age := time.Since(p.At)
	rtt := p.RTT
	if rtt < 0 {
		rtt = subnet.Unreachable
		if age > v.d.cfg.probeFailed {
			return 0, false
		}
	}
	if age > v.d.cfg.maxAge {
		return 0, false
	}
	if !v.req.Fresh.IsZero() && p.At.Before(v.req.Fresh) && p.Subnet == v.tree.Range(v.req.Subnet) {
		return 0, false
	}
	return rtt, true
}

// block merges the block index of x, a strict ancestor of the anchor, once
// per decision (the Delegator caches it across decisions).
func (v *view) block(x subnet.ID) {
	if v.blocks[x] || !v.above(x) {
		return
	}
	v.blocks[x] = true
	ixs, err := v.d.cache.block(v.ctx, v.env, x, v.anchor)
	if err != nil {
		v.d.cfg.log.Debug("block index unavailable", "block", v.tree.Range(x).String(), "error", err)
		return
	}
	for _, ix := range ixs {
		v.addOwner(ix.Delegation)
		for _, p := range ix.Probes {
			v.addProbe(p)
		}
		v.d.places.add(v.tree, ix)
	}
}

// above reports whether x is a strict ancestor of the shard's anchor.
func (v *view) above(x subnet.ID) bool {
	for n := v.tree.Parent(v.anchor); n != subnet.None; n = v.tree.Parent(n) {
		if n == x {
			return true
		}
	}
	return false
}

// Owned implements subnet.Table. The search asks for the subtree of a
// range x as (x+1, end of x): for x above the shard's anchor, x's block
// index is merged in first.
func (v *view) Owned(from, to subnet.ID) iter.Seq2[subnet.ID, string] {
	if from > 0 && from < to {
		v.block(from - 1)
	}
	if v.dirtyIx {
		slices.SortFunc(v.owners, func(a, b owner) int { return int(a.id) - int(b.id) })
		v.dirtyIx = false
	}
	return func(yield func(subnet.ID, string) bool) {
		i, _ := slices.BinarySearchFunc(v.owners, from, func(o owner, id subnet.ID) int { return int(o.id) - int(id) })
		for ; i < len(v.owners) && v.owners[i].id <= to; i++ {
			if !yield(v.owners[i].id, v.owners[i].node) {
				return
			}
		}
	}
}

// Nodes implements subnet.Table: the live peers the coordinator knows,
// and the nodes named in the stored probes the decision read or the
// Delegator's places hold that may crawl (DelegationEnv.MayCrawl), excluded
// ones left out, in peer-id order. A coordinator's peers are its
// neighbours, a few hundred at most, while the probes it reads were
// answered by nodes anywhere: the guided search's predictions point at
// them, and the nearest node to a site is often one of them.
func (v *view) Nodes() []string {
	seen := make(map[peer.ID]bool, len(v.peers))
	out := make([]string, 0, len(v.peers))
	add := func(p peer.ID, check bool) {
		if seen[p] || v.excluded[p] || check && !v.env.MayCrawl(p) {
			return
		}
		seen[p] = true
		out = append(out, string(p))
	}
	for _, p := range v.peers {
		add(p.ID, false)
	}
	for _, m := range v.probes {
		for n := range m {
			add(peer.ID(n), true)
		}
	}
	for _, p := range v.d.places.named() {
		add(p, true)
	}
	slices.Sort(out)
	return out
}

// home returns the own subnet of node, when one is known so far: the
// shard's, the organisation's and the block indexes merged in (the search
// widens through Within, which merges the blocks it reaches first).
func (v *view) home(node string) (subnet.Range, bool) {
	r, ok := v.homes[node]
	return r, ok
}

// Get implements subnet.ProbeCache.
func (v *view) Get(node string, r subnet.Range) (time.Duration, bool) {
	p, ok := v.probes[r][node]
	return p.rtt, ok
}

// Put implements subnet.ProbeCache: the result is stored in the shard by
// the probe itself; the view keeps it for the rest of the search.
func (v *view) Put(node string, r subnet.Range, rtt time.Duration) {
	if v.excluded[peer.ID(node)] {
		return
	}
	m := v.probes[r]
	if m == nil {
		m = map[string]probe{}
		v.probes[r] = m
	}
	m[node] = probe{rtt, time.Now()}
}

// Within implements subnet.ProbeIndex: the decision's probes, then the
// Delegator's places (places.go) of subnets it has none of. For r above
// the shard's anchor the block index of r is merged in first.
func (v *view) Within(r subnet.Range) iter.Seq2[subnet.Range, []subnet.Probe] {
	if id, ok := v.tree.Find(r); ok {
		v.block(id)
	}
	var rs []subnet.Range
	for sr := range v.probes {
		if r.ContainsRange(sr) && len(v.probes[sr]) > 0 {
			rs = append(rs, sr)
		}
	}
	more := map[subnet.Range][]subnet.Probe{}
	for _, e := range v.d.places.within(r) {
		if _, ok := v.probes[e.r]; !ok {
			if ps := v.placeProbes(e); len(ps) > 0 {
				rs = append(rs, e.r)
				more[e.r] = ps
			}
		}
	}
	slices.SortFunc(rs, compareRanges)
	return v.yieldProbes(rs, more)
}

// Country implements subnet.PlaceIndex: the stored probes of the subnets
// of registry country cc that the decision or the Delegator's places
// hold, nearest to near in address order first.
func (v *view) Country(cc string, near subnet.Range) iter.Seq2[subnet.Range, []subnet.Probe] {
	type cand struct {
		r subnet.Range
		d uint64
	}
	var cs []cand
	dist := func(r subnet.Range) uint64 {
		if r.Start.Less(near.Start) {
			return distance(r.Start, near.Start)
		}
		return distance(near.Start, r.Start)
	}
	for sr, m := range v.probes {
		if len(m) > 0 && v.tree.Country(v.tree.SmallestNonUnary(sr.Start)) == cc {
			cs = append(cs, cand{sr, dist(sr)})
		}
	}
	more := map[subnet.Range][]subnet.Probe{}
	for _, e := range v.d.places.country(cc, near.Start) {
		if len(cs) >= 4*placeCandidates {
			break
		}
		if _, ok := v.probes[e.r]; !ok {
			if ps := v.placeProbes(e); len(ps) > 0 {
				cs = append(cs, cand{e.r, dist(e.r)})
				more[e.r] = ps
			}
		}
	}
	slices.SortFunc(cs, func(a, b cand) int { return cmp.Or(cmp.Compare(a.d, b.d), compareRanges(a.r, b.r)) })
	rs := make([]subnet.Range, len(cs))
	for i, c := range cs {
		rs[i] = c.r
	}
	return v.yieldProbes(rs, more)
}

// placeCandidates bounds, in multiples of four, the Delegator's places a
// Country lookup reads: the search takes up to 32 of them.
const placeCandidates = 32

// placeProbes returns the usable probes of a place entry.
func (v *view) placeProbes(e placeEntry) []subnet.Probe {
	var ps []subnet.Probe
	for _, p := range e.probes {
		if rtt, ok := v.usable(p); ok {
			ps = append(ps, subnet.Probe{Node: string(p.Peer), RTT: rtt, Cached: true})
		}
	}
	return ps
}

// yieldProbes yields the probes of each range of rs in order: the
// decision's, or those in more.
func (v *view) yieldProbes(rs []subnet.Range, more map[subnet.Range][]subnet.Probe) iter.Seq2[subnet.Range, []subnet.Probe] {
	return func(yield func(subnet.Range, []subnet.Probe) bool) {
		for _, sr := range rs {
			ps, ok := more[sr]
			if !ok {
				ps = make([]subnet.Probe, 0, len(v.probes[sr]))
				for n, p := range v.probes[sr] {
					ps = append(ps, subnet.Probe{Node: n, RTT: p.rtt, Cached: true})
				}
			}
			slices.SortFunc(ps, func(a, b subnet.Probe) int { return strings.Compare(a.Node, b.Node) })
			if !yield(sr, ps) {
				return
			}
		}
	}
}

// errNoBudget refuses probes once the decision's time is nearly up; the
// search counts them as unreachable and the best answer so far wins.
var errNoBudget = errors.New("decision out of time")

// Probe implements subnet.Prober: node probes the decision's URL, and the
// result is stored in the shard.
func (v *view) Probe(_ context.Context, node string, _ netip.Addr) (time.Duration, error) {
	p := peer.ID(node)
	if v.excluded[p] {
		return 0, overlay.ErrNoCandidate
	}
	if v.budget.Err() != nil {
		return 0, errNoBudget
	}
	ctx, cancel := context.WithTimeout(v.budget, v.d.cfg.probeTO)
	defer cancel()
	v.issued++
	v.d.stats.probes.Add(1)
	rtt, err := v.env.Probe(ctx, p, v.url, v.target())
	if err != nil && !errors.Is(err, overlay.ErrProbeFailed) && ctx.Err() == nil {
		return 0, fmt.Errorf("%w: %w", subnet.ErrNotProbed, err)
	}
	return rtt, err
}

// target is the range decided: the subnet, or the part of it searched
// apart.
func (v *view) target() subnet.Range {
	if v.req.IsPart() {
		return v.req.Part
	}
	return v.tree.Range(v.req.Subnet)
}

var (
	_ subnet.Table      = (*view)(nil)
	_ subnet.ProbeIndex = (*view)(nil)
	_ subnet.Prober     = (*view)(nil)
)
var _ subnet.PlaceIndex = (*view)(nil)
