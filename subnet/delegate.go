package subnet

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Unreachable is the round-trip time of a probe that failed: it counts as
// infinitely far.
const Unreachable = time.Duration(1<<63 - 1)

// DefaultThreshold is IPMicra's probing threshold: the paper found 50 ms to
// give the best ratio of quality to probes.
const DefaultThreshold = 50 * time.Millisecond

// ErrNoNodes is returned when a search has no node to delegate to.
var ErrNoNodes = errors.New("no node can take the subnet")

// Prober measures round-trip times from nodes to an address. In the overlay
// a probe is a timed HTTP HEAD that the asked node runs from its own
// address. Implementations must be safe for concurrent use.
type Prober interface {
	// Probe asks node to probe addr. An error means the node could not
	// reach it; the search counts that as Unreachable.
	Probe(ctx context.Context, node string, addr netip.Addr) (time.Duration, error)
}

// Table is the delegation state a search reads. It is read only; callers
// record the decision themselves.
type Table interface {
	// Owned yields the delegated ranges whose IDs lie in [from, to], in ID
	// order, with their owners. Since IDs are in preorder, a subtree is
	// such an interval.
	Owned(from, to ID) iter.Seq2[ID, string]
	// Nodes returns every node that may take delegations, in a stable
	// order; the search's last resort probes them.
	Nodes() []string
}

// ProbeCache stores probe results so that a search asks a node about a
// subnet only once (thesis 7.6.1: probe results are kept and reused).
// Implementations must be safe for concurrent use.
type ProbeCache interface {
	Get(node string, subnet Range) (time.Duration, bool)
	Put(node string, subnet Range, rtt time.Duration)
}

// ProbeIndex is a ProbeCache that can also list what it stores by subnet,
// which the guided search uses to predict which node is nearest.
type ProbeIndex interface {
	ProbeCache
	// Within yields the stored probes of every subnet inside r (r
	// included), subnet by subnet in address order.
	Within(r Range) iter.Seq2[Range, []Probe]
}

// Step says which step of the search decided a delegation.
type Step uint8

// Steps of the IPMicra search (thesis 7.6.1) and of the baselines.
const (
	StepOwned        Step = iota + 1 // the subnet was already delegated
	StepOrganisation                 // a range of the same organisation was delegated
	StepHierarchy                    // a node found bottom-up answered under the threshold
	StepBest                         // nobody answered under the threshold: the best probe won
	StepBaseline                     // decided by a baseline strategy
	StepGuided                       // the guided search decided by probing
)

var stepNames = [...]string{"", "owned", "organisation", "hierarchy", "best", "baseline", "guided"}

// String returns the step's lowercase name.
func (s Step) String() string {
	if int(s) < len(stepNames) && s > 0 {
		return stepNames[s]
	}
	return fmt.Sprintf("step(%d)", s)
}

// Probe is one probe a search used.
type Probe struct {
	Node   string
	RTT    time.Duration // Unreachable when the probe failed
	Cached bool          // taken from the ProbeCache, not asked
}

// Decision is the outcome of a delegation search for one address.
type Decision struct {
	Subnet ID            // the range delegated: the smallest non-unary range of the address
	Node   string        // the node it goes to
	RTT    time.Duration // Node's probe, or Unreachable when none was needed
	Step   Step
	Probes []Probe // every probe consulted, in order
	Issued int     // probes actually asked of nodes (not from the cache)
}

// Strategy delegates the subnet of an address to a node. IPMicra, the
// baselines (random, brute force, HiMicra, oracle) and the overlay's
// coordinator all implement or use it.
type Strategy interface {
	Delegate(ctx context.Context, addr netip.Addr) (Decision, error)
}

// SearchConfig tunes the IPMicra search.
type SearchConfig struct {
	// Threshold is the probing threshold: the first node that answers
	// under it wins. Zero means DefaultThreshold.
	Threshold time.Duration
	// Below is how many levels below each sibling are searched: 1, the
	// paper's "siblings and their children". Zero means 1.
	Below int
	// NoFallback disables the last resort of probing every node from
	// Table.Nodes when the hierarchy yields nobody under the threshold.
	NoFallback bool
	// MaxProbes bounds the probes asked per search (0: no bound); when it
	// is reached, the best probe so far wins.
	MaxProbes int

	// Guided turns on micra's improvement over the paper (the pure
	// IPMicra search runs without it): a nearest-neighbour search with
	// pruning, in the manner of AESA for metric spaces. Nodes are asked
	// in order of their predicted RTT to S — the median of their probes
	// stored for the subnets nearest to S in the hierarchy (which needs a
	// Cache that is a ProbeIndex), then the lower bound below, then the
	// paper's order — and the first under the threshold wins, as in the
	// paper. Once a node m has answered r, every node n with a known RTT
	// d(n, m) to m (see Between) is at least |r − d(n, m)| from S by the
	// triangle inequality; a node whose bound, or whose most optimistic
	// prediction, exceeds the best answer by the Margin is never asked, and
	// the search ends when no node is left. A probe far from its
	// prediction (a subnet placed away from its neighbours) makes the
	// search drop the predictions. The organisation's nodes are asked
	// first, and a single one is kept only under the threshold.
	Guided bool
	// Margin is the tolerance of the guided search's pruning, as a
	// fraction: a node is pruned when its bound or optimistic prediction,
	// reduced by the Margin, still exceeds the best answer. It absorbs
	// triangle-inequality violations of real RTTs and prediction error.
	// Zero means 0.1.
	Margin float64
	// Between returns the RTT between two nodes when known (the overlay
	// measures it between peers). Without it the guided search prunes by
	// predictions only.
	Between func(a, b string) (time.Duration, bool)
	// Tolerance is how much better than the best answer a node must be
	// able to be for the guided search to still ask it: an approximate
	// nearest-neighbour search that never delegates more than Tolerance
	// from the best node it could have found (modulo prediction error and
	// triangle-inequality violations). Zero means a fifth of the
	// threshold; a negative value means none.
	Tolerance time.Duration
}

func (c SearchConfig) withDefaults() SearchConfig {
	if c.Threshold <= 0 {
		c.Threshold = DefaultThreshold
	}
	if c.Below <= 0 {
		c.Below = 1
	}
	if c.Margin <= 0 {
		c.Margin = 0.1
	}
	switch {
	case c.Tolerance == 0:
		c.Tolerance = c.Threshold / 5
	case c.Tolerance < 0:
		c.Tolerance = 0
	}
	return c
}

// IPMicra is the IPMicra delegation search (paper III.E, thesis 7.6.1) over
// a tree. For an address A whose smallest non-unary range is S:
//
//  1. S delegated: its node, without probing.
//  2. Else ranges of S's organisation delegated: if to one node, that node
//     without probing; if to several, they probe A in turn and the first
//     under the threshold wins (otherwise the search goes on).
//  3. Else bottom-up: first the delegated ranges below S (its children and
//     their children), then for each ancestor X of S in turn, X itself and
//     the delegated ranges among X's other children and their children;
//     their nodes probe A in turn and the first under the threshold wins.
//  4. Nobody under the threshold: every node not yet asked is probed (the
//     paper's "all available crawlers probed"), and the best probe wins.
//
// A node is asked at most once per search, and never when the ProbeCache
// already holds its result for S.
type IPMicra struct {
	Tree   *Tree
	Table  Table
	Prober Prober
	Cache  ProbeCache // may be nil
	Config SearchConfig
}

var _ Strategy = (*IPMicra)(nil)

// Delegate runs the search for addr.
func (m *IPMicra) Delegate(ctx context.Context, addr netip.Addr) (Decision, error) {
	t, cfg := m.Tree, m.Config.withDefaults()
	s := t.SmallestNonUnary(addr)
	if s == None {
		return Decision{}, fmt.Errorf("invalid address %v", addr)
	}
	d := Decision{Subnet: s, RTT: Unreachable}
	if node, ok := owner(m.Table, s); ok {
		d.Node, d.Step = node, StepOwned
		return d, nil
	}
	r := &run{m: m, ctx: ctx, addr: addr, subnet: t.Range(s), cfg: cfg, d: &d, asked: map[string]bool{}}

	// 2. The organisation's nodes.
	if org := t.Org(s); org != "" {
		var nodes []string
		for _, id := range t.ByOrg(org) {
			if n, ok := owner(m.Table, id); ok && !slices.Contains(nodes, n) {
				nodes = append(nodes, n)
			}
		}
		if cfg.Guided {
			return r.guided(s, nodes)
		}
		if len(nodes) == 1 {
			d.Node, d.Step = nodes[0], StepOrganisation
			return d, nil
		}
		if won, err := r.tryAll(nodes, StepOrganisation); won || err != nil {
			return d, err
		}
	}

	if cfg.Guided {
		return r.guided(s, nil)
	}

	// 3. Bottom-up through the hierarchy.
	for nodes := range m.levels(s) {
		if won, err := r.tryAll(nodes, StepHierarchy); won || err != nil {
			return d, err
		}
		if r.capped() {
			break
		}
	}

	// 4. Everybody else, then the best.
	if !cfg.NoFallback && !r.capped() {
		if won, err := r.tryAll(m.Table.Nodes(), StepHierarchy); won || err != nil {
			return d, err
		}
	}
	return r.best()
}

// levels yields, level by level from S up to the root, the nodes the
// paper's bottom-up search asks: first the owners of the delegated ranges
// below S (its children and their children), then for each ancestor X, X's
// owner and the owners among X's other children and their children. A node
// appears once per level.
func (m *IPMicra) levels(s ID) iter.Seq[[]string] {
	t, below := m.Tree, m.Config.withDefaults().Below
	return func(yield func([]string) bool) {
		skip := None // the subtree searched at the level below
		for x := s; x != None; skip, x = x, t.Parent(x) {
			var nodes []string
			if x != s {
				if n, ok := owner(m.Table, x); ok {
					nodes = append(nodes, n)
				}
			}
			maxDepth := t.Depth(x) + 1 + below
			for id, n := range m.Table.Owned(x+1, ID(t.next[x]-1)) {
				if skip != None && id >= skip && id < ID(t.next[skip]) {
					continue
				}
				if t.Depth(id) <= maxDepth && !slices.Contains(nodes, n) {
					nodes = append(nodes, n)
				}
			}
			if !yield(nodes) {
				return
			}
		}
	}
}

// owner returns the owner of exactly id.
func owner(t Table, id ID) (string, bool) {
	for _, n := range t.Owned(id, id) {
		return n, true
	}
	return "", false
}

// run is the state of one search.
type run struct {
	m      *IPMicra
	ctx    context.Context
	addr   netip.Addr
	subnet Range
	cfg    SearchConfig
	d      *Decision
	asked  map[string]bool
}

func (r *run) capped() bool { return r.cfg.MaxProbes > 0 && r.d.Issued >= r.cfg.MaxProbes }

// tryAll probes nodes in turn (skipping those already asked) and stops at
// the first under the threshold, which wins the decision with step.
func (r *run) tryAll(nodes []string, step Step) (bool, error) {
	for _, n := range nodes {
		if r.asked[n] {
			continue
		}
		if r.capped() {
			return false, nil
		}
		rtt, err := r.probe(n)
		if err != nil {
			return false, err
		}
		if rtt < r.cfg.Threshold {
			r.d.Node, r.d.RTT, r.d.Step = n, rtt, step
			return true, nil
		}
	}
	return false, nil
}

// probe asks node about the address, through the cache.
func (r *run) probe(node string) (time.Duration, error) {
	r.asked[node] = true
	if c := r.m.Cache; c != nil {
		if rtt, ok := c.Get(node, r.subnet); ok {
			r.d.Probes = append(r.d.Probes, Probe{Node: node, RTT: rtt, Cached: true})
			return rtt, nil
		}
	}
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	rtt, err := r.m.Prober.Probe(r.ctx, node, r.addr)
	if err != nil {
		if ctxErr := r.ctx.Err(); ctxErr != nil {
			return 0, ctxErr
		}
		rtt = Unreachable
	}
	r.d.Issued++
	r.d.Probes = append(r.d.Probes, Probe{Node: node, RTT: rtt})
	if c := r.m.Cache; c != nil {
		c.Put(node, r.subnet, rtt)
	}
	return rtt, nil
}

// best ends a search nobody won: the best probe wins.
func (r *run) best() (Decision, error) {
	d := r.d
	for _, p := range d.Probes {
		if p.RTT < d.RTT {
			d.Node, d.RTT = p.Node, p.RTT
		}
	}
	if d.Node == "" {
		if len(d.Probes) > 0 {
			// Every probe failed: the first node asked takes it, so that a
			// subnet nobody reaches is still owned and retried by someone.
			d.Node = d.Probes[0].Node
		} else {
			return *d, ErrNoNodes
		}
	}
	d.Step = StepBest
	return *d, nil
}

// guided runs the guided search (SearchConfig.Guided) once S is known not
// to be delegated; orgNodes hold the ranges of S's organisation.
func (r *run) guided(s ID, orgNodes []string) (Decision, error) {
	m, cfg := r.m, r.cfg
	// The candidates: the organisation's nodes, the paper's order, then
	// everybody else.
	var cands []*candidate
	byNode := map[string]*candidate{}
	add := func(n string) {
		if _, ok := byNode[n]; !ok {
			c := &candidate{node: n, order: len(cands), pred: -1}
			byNode[n] = c
			cands = append(cands, c)
		}
	}
	for _, n := range orgNodes {
		add(n)
	}
	for nodes := range m.levels(s) {
		for _, n := range nodes {
			add(n)
		}
	}
	for _, n := range m.Table.Nodes() {
		add(n)
	}
	trusted := false
	var top *prediction
	if idx, ok := m.Cache.(ProbeIndex); ok {
		ps := predict(m.Tree, idx, s)
		for i, p := range ps {
			if c, ok := byNode[p.node]; ok {
				c.pred, c.low = p.pred, p.low
				trusted = true
				if top == nil {
					top = &ps[i]
				}
			}
		}
	}
	// The paper takes the organisation's only node without probing; so do
	// we when the stored probes agree: it is the node predicted nearest,
	// under the threshold.
	if len(orgNodes) == 1 && top != nil && top.node == orgNodes[0] && top.pred < cfg.Threshold {
		r.d.Node, r.d.Step = top.node, StepOrganisation
		return *r.d, nil
	}
	best := Unreachable
	bound := func(probed string, rtt time.Duration) {
		best = min(best, rtt)
		if cfg.Between == nil || rtt == Unreachable {
			return
		}
		for _, c := range cands {
			if d, ok := cfg.Between(c.node, probed); ok {
				c.lb = max(c.lb, rtt-d, d-rtt)
			}
		}
	}
	for !r.capped() {
		// The most promising node that may still beat the best.
		var next *candidate
		for _, c := range cands {
			if r.asked[c.node] || r.pruned(c, best, trusted) {
				continue
			}
			if next == nil || c.before(next, trusted) {
				next = c
			}
		}
		if next == nil {
			break
		}
		rtt, err := r.probe(next.node)
		if err != nil {
			return *r.d, err
		}
		if trusted && next.pred >= 0 && !near(rtt, next.pred, cfg.Margin) {
			trusted = false // S is not where its neighbours are
		}
		bound(next.node, rtt)
		// Under the threshold wins, unless a node is still predicted to
		// be clearly nearer.
		if rtt < cfg.Threshold && !r.promising(cands, best, trusted) {
			r.d.Node, r.d.RTT, r.d.Step = next.node, rtt, StepGuided
			return *r.d, nil
		}
	}
	d, err := r.best()
	if err == nil {
		d.Step = StepGuided
	}
	return d, err
}

// candidate is a node in the guided search.
type candidate struct {
	node  string
	order int           // position in the paper's order
	pred  time.Duration // median probe to the neighbour subnets; -1 when unknown
	low   time.Duration // lowest probe to them
	lb    time.Duration // lower bound on its RTT to S from the triangle inequality
}

// before orders candidates: by prediction while predictions are trusted
// (unknown ones last), then by lower bound, then in the paper's order.
func (c *candidate) before(o *candidate, trusted bool) bool {
	if trusted && (c.pred >= 0) != (o.pred >= 0) {
		return c.pred >= 0
	}
	if trusted && c.pred >= 0 && c.pred != o.pred {
		return c.pred < o.pred
	}
	if c.lb != o.lb {
		return c.lb < o.lb
	}
	return c.order < o.order
}

// pruned reports whether c cannot beat best by more than the tolerance,
// with the margin for error: by its lower bound, or by its most optimistic
// prediction while predictions hold.
func (r *run) pruned(c *candidate, best time.Duration, trusted bool) bool {
	if best == Unreachable {
		return false
	}
	keep, target := 1-r.cfg.Margin, float64(best-r.cfg.Tolerance)
	if float64(c.lb)*keep >= target {
		return true
	}
	return trusted && c.pred >= 0 && float64(c.low)*keep >= target
}

// promising reports whether a node not yet asked is predicted, even by its
// most pessimistic reading, to beat best by more than the tolerance.
func (r *run) promising(cands []*candidate, best time.Duration, trusted bool) bool {
	if !trusted {
		return false
	}
	for _, c := range cands {
		if !r.asked[c.node] && c.pred >= 0 && !r.pruned(c, best, trusted) && c.pred < best-r.cfg.Tolerance {
			return true
		}
	}
	return false
}

// near reports whether a measured RTT agrees with a prediction.
func near(rtt, pred time.Duration, margin float64) bool {
	dev := rtt - pred
	if dev < 0 {
		dev = -dev
	}
	return float64(dev) <= margin*float64(pred)+float64(guidedSlack)
}

// guidedSlack is added to the margin when checking a probe against its
// prediction, so that small RTTs (where a few ms of last mile dominate)
// do not read as contradictions.
const guidedSlack = 5 * time.Millisecond

type prediction struct {
	node string
	pred time.Duration // the median of the node's probes under the neighbourhood
	low  time.Duration // the lowest of them
	n    int
}

// predict ranks nodes by their predicted RTT to subnet s: for the lowest
// range X on the way from s up (the root excluded) under which some subnet
// has stored probes, a node's prediction is the median of its probes to
// the probed subnets under X. Ties go to the node with more probes, then
// to the smaller name.
func predict(t *Tree, idx ProbeIndex, s ID) []prediction {
	for x := s; x != None && t.Parent(x) != None; x = t.Parent(x) {
		samples := map[string][]time.Duration{}
		for _, ps := range idx.Within(t.Range(x)) {
			for _, p := range ps {
				samples[p.Node] = append(samples[p.Node], p.RTT)
			}
		}
		if len(samples) == 0 {
			continue
		}
		cs := make([]prediction, 0, len(samples))
		for node, rtts := range samples {
			slices.Sort(rtts)
			cs = append(cs, prediction{node, rtts[len(rtts)/2], rtts[0], len(rtts)})
		}

		slices.SortFunc(cs, func(a, b prediction) int {
			switch {
			case a.pred != b.pred:
				return cmpDur(a.pred, b.pred)
			case a.n != b.n:
				return b.n - a.n
			}
			return strings.Compare(a.node, b.node)
		})
		return cs
	}
	return nil
}

func cmpDur(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
