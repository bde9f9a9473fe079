package delegate

import (
	"context"
	"errors"
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
	if v.excluded[p.Peer] {
		return
	}
	age := time.Since(p.At)
	rtt := p.RTT
	if rtt < 0 {
		rtt = subnet.Unreachable
		if age > v.d.cfg.probeFailed {
			return
		}
	}
	if age > v.d.cfg.maxAge {
		return
	}
	if !v.req.Fresh.IsZero() && p.At.Before(v.req.Fresh) && p.Subnet == v.tree.Range(v.req.Subnet) {
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
// excluded ones left out, in peer-id order.
func (v *view) Nodes() []string {
	out := make([]string, 0, len(v.peers))
	for _, p := range v.peers {
		if !v.excluded[p.ID] {
			out = append(out, string(p.ID))
		}
	}
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

// Within implements subnet.ProbeIndex. For r above the shard's anchor the
// block index of r is merged in first.
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
	slices.SortFunc(rs, func(a, b subnet.Range) int {
		if c := a.Start.Compare(b.Start); c != 0 {
			return c
		}
		return b.End.Compare(a.End)
	})
	return func(yield func(subnet.Range, []subnet.Probe) bool) {
		for _, sr := range rs {
			ps := make([]subnet.Probe, 0, len(v.probes[sr]))
			for n, p := range v.probes[sr] {
				ps = append(ps, subnet.Probe{Node: n, RTT: p.rtt, Cached: true})
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
	return v.env.Probe(ctx, p, v.url, v.req.Subnet)
}

var (
	_ subnet.Table      = (*view)(nil)
	_ subnet.ProbeIndex = (*view)(nil)
	_ subnet.Prober     = (*view)(nil)
)
