package subnet

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/netip"
	"slices"
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

// ErrNotProbed is what a Prober returns (wrapped) when the node did not
// probe: it does not probe, refused, was overloaded, or could not be
// asked. Unlike a failed probe, that says nothing of its distance to the
// address, and the node is no candidate of the search: it never wins, not
// even the subnet nobody reaches (a search whose every node did not probe
// returns ErrNoNodes).
var ErrNotProbed = errors.New("the node did not probe")

// Prober measures round-trip times from nodes to an address. In the overlay
// a probe is a timed HTTP HEAD that the asked node runs from its own
// address. Implementations must be safe for concurrent use.
type Prober interface {
	// Probe asks node to probe addr. An error means the node could not
	// reach it; the search counts that as Unreachable, unless it wraps
	// ErrNotProbed.
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

// PlaceIndex is a ProbeIndex that can also find stored probes by the
// registry country of their subnets: the guided search's catalogue of
// places beyond S's neighbourhood in the hierarchy. On the real Internet a
// subnet's neighbours in the hierarchy are often far apart (a registry
// block's allocations spread over a region), while its registry country
// names where most of its addresses are.
type PlaceIndex interface {
	ProbeIndex
	// Country yields the stored probes of the subnets whose registry
	// country (Tree.Country) is cc, nearest to near in address order
	// first.
	Country(cc string, near Range) iter.Seq2[Range, []Probe]
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
	Part   Range         // the part of Subnet delegated apart (DelegatePart) or holding the address (StepOwned); zero for the whole range
	Node   string        // the node it goes to
	RTT    time.Duration // Node's probe, or Unreachable when none was needed
	Step   Step
	Probes []Probe // every probe consulted, in order
	Issued int     // probes actually asked of nodes (not from the cache)
	// Rejected lists the winning claims SearchConfig.Claims found
	// impossible, in order; each rejected node was left out of the
	// search that followed.
	Rejected []Rejection
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
	// pruning, in the manner of AESA for metric spaces, guided by stored
	// probes (which needs a Cache that is a ProbeIndex). Each subnet with
	// stored probes near S in the hierarchy, of S's organisation, or (with
	// a PlaceIndex) of S's registry country is a profile of a place,
	// weighted by how often subnets so related to S share its place on the
	// real Internet (relation); by the model of network coordinates with
	// heights (Vivaldi), S at that place sees every node at the profile's
	// RTT plus one constant, its access delay's difference. Nodes are asked
	// in the order the profiles vote for (the weight of those that put a
	// node nearest), then of their predictions (the weighted median over
	// the profiles that fit the answers so far), then of the lower bound
	// below, then in the paper's order; each profile counts with its fit to
	// the answers. The best answer under the threshold wins unless the
	// profiles still give another node a chance above 1 − confidence of
	// beating it by the Tolerance, or no profile that may model S knows a
	// node that the triangle inequality leaves room to beat it by the
	// Tolerance (stored probes are those of the nodes asked before: silence
	// is no prediction). A node that cannot beat the best answer by the
	// Tolerance is never asked, and the search ends when nobody is left: by
	// the predictions, when, by Bayes over the places S may be at, the
	// profiles that rule it out (their prediction less its error) hold S
	// with probability at least 0.95 (prunable: a profile's prior is its
	// share of the profiles' weight, with one count for an unseen place;
	// another profile that fits the answers and gives the node a chance
	// counts against; places the answers refuted count for nothing, an
	// unseen place with the chance that the answers fit by chance, about
	// one in ten per answer, less evidence from nodes close to an earlier
	// one, by Between); or by the triangle inequality over inter-node RTTs
	// (|r − d(n, m)|, with the Margin), unless the profiles, which measure
	// the node's path, give it a chance. S's own stored probes are answers,
	// never a profile. When no profile fits, the neighbourhood widens one
	// level up; at the top, the search falls back to the triangle
	// inequality. The organisation's nodes are asked first, and a single
	// one is kept without probing when the stored probes predict it
	// nearest, under the threshold.
	Guided bool
	// Margin is the relative error the guided search allows, as a
	// fraction: to triangle-inequality bounds (a node is pruned when its
	// bound, reduced by the Margin, still exceeds the best answer), to the
	// fit of a profile (plus 5 ms) and to predictions extrapolated from the
	// answers. It absorbs triangle-inequality violations of real RTTs,
	// jitter and prediction error. Zero means 0.1.
	Margin float64
	// Between returns the RTT between two nodes when known (the overlay
	// measures it between peers). Without it the guided search prunes by
	// predictions only.
	Between func(a, b string) (time.Duration, bool)
	// Home returns the range of a node's own subnet, which it was
	// delegated on joining (paper III.D): a place where the node is known
	// to be. The guided search takes every home in the neighbourhood (not
	// S) as the profile of a place whose probes are Between: a subnet there
	// sees node m at about d(n, m) from n's home, and n at about nothing.
	// At a cold start, when no neighbour has stored probes yet, homes are
	// the only evidence of where nodes are. Nil: no homes (nor without
	// Between).
	Home func(node string) (Range, bool)
	// Places, when set, is a latency map: places where a server may be
	// (such as the cities of a measured RTT matrix) with the RTT each node
	// would measure to a server there, less the server's own access delay
	// (the profiles' shift absorbs it). The guided search takes every
	// place as the profile of a place, those of S's registry country
	// sharing a prior of MapCountryWeight and the others one of
	// MapOtherWeight, so that from a cold start the answers locate S on
	// the map and pick the next node. Nodes the map does not name are
	// unknown to its places. The slice is read, never changed.
	Places []MapPlace
	// Trace, when set, receives the guided search's reasoning, one line a
	// step (the profiles, each node asked and why, the nodes left out and
	// why), for debugging. It is called from the search's goroutine.
	Trace func(line string)
	// Tolerance is how much better than the best answer a node must be
	// able to be for the guided search to still ask it: an approximate
	// nearest-neighbour search that never delegates more than Tolerance
	// from the best node it could have found (modulo prediction error and
	// triangle-inequality violations). Zero means a fifth of the
	// threshold, or with Nearest set the density tolerance (see Nearest);
	// a negative value means none.
	Tolerance time.Duration
	// Nearest, when set, is how densely the nodes cover their places: the
	// median RTT from a node to its nearest other node, as the network
	// measures it (NearestRTT). A zero Tolerance is then an eighth of it,
	// within MinTolerance and a fifth of the threshold: the more nodes
	// sit near each other, the more of them are near ties for a server,
	// and the less a search that stops at the first near tie gives away;
	// never below what timed probes can tell apart.
	Nearest time.Duration
	// Claims, when set, checks the winner's probe before it wins (see
	// ClaimCheck): a node whose claim the triangle inequality refutes is
	// left out and the search runs again.
	Claims *ClaimCheck
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
	case c.Tolerance == 0 && c.Nearest > 0:
		c.Tolerance = min(max(c.Nearest/8, MinTolerance), c.Threshold/5)
	case c.Tolerance == 0:
		c.Tolerance = c.Threshold / 5
	case c.Tolerance < 0:
		c.Tolerance = 0
	}
	return c
}

// EffectiveTolerance returns the tolerance a search with c runs with: the
// Tolerance, or when zero the density rule's with Nearest set, else a
// fifth of the threshold; zero for none.
func (c SearchConfig) EffectiveTolerance() time.Duration { return c.withDefaults().Tolerance }

// MinTolerance is the least tolerance the density rule gives
// (SearchConfig.Nearest): timed probes of nodes within about 2 ms of each
// other order them by chance (three samples of a request's jitter each,
// docs/delegation.md).
const MinTolerance = 2 * time.Millisecond

// MapPlace is a place of a latency map (SearchConfig.Places).
type MapPlace struct {
	Name    string                   // for traces
	Country string                   // ISO 3166 alpha-2
	RTT     map[string]time.Duration // node → the RTT it would measure to a server at the place, less the server's access delay
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
	if h, ok := Holder(t, m.Table, addr); ok {
		d.Node, d.Step = h.Node, StepOwned
		if h.Range != t.Range(s) {
			d.Part = h.Range
		}
		return d, nil
	}
	if cfg.Claims == nil || cfg.Claims.Measured == nil {
		r := &run{m: m, ctx: ctx, addr: addr, subnet: t.Range(s), cfg: cfg, d: &d, asked: map[string]bool{}}
		return r.search(s)
	}
	cc := cfg.Claims.withDefaults()
	banned, floored := map[string]bool{}, map[string]bool{}
	if cc.Tally != nil {
		for _, n := range m.Table.Nodes() {
			if cc.Tally.Barred(n) {
				banned[n] = true
			}
		}
	}
	var (
		issued   int
		rejected []Rejection
		kept     []Probe
		// upper: rejections of this search that rest on the second
		// bound alone, tallied when it ends. A second such rejection
		// means the address is in several places: an anycast address
		// or a CDN's, answered near each prober (the second bound says
		// the site is near the witness and near the claimant, which
		// only a liar delaying its pings makes false of a site in one
		// place). The second bound is then switched off for the rest
		// of the search and those claimants are heard again.
		upper []Rejection
	)
	defer func() {
		if cc.Tally != nil {
			for _, rj := range upper {
				cc.Tally.record(rj.Node, true)
			}
		}
	}()
	for runs := 1; ; runs++ {
		d := Decision{Subnet: s, RTT: Unreachable}
		r := &run{m: m, ctx: ctx, addr: addr, subnet: t.Range(s), cfg: cfg, d: &d, asked: map[string]bool{}, banned: banned, floored: floored}
		for n := range banned {
			r.asked[n] = true
		}
		// The probes of the runs before are answers the search was
		// given, but for the rejected nodes'.
		for _, p := range kept {
			if !banned[p.Node] {
				r.asked[p.Node] = true
				d.Probes = append(d.Probes, p)
			}
		}
		d, err := r.search(s)
		d.Issued += issued
		d.Rejected = rejected
		if err != nil || !claimed(d) {
			return d, err
		}
		rej, bad, better, err := r.check(cc)
		if err != nil {
			return d, err
		}
		if better && runs < 2*MaxRejections {
			// A witness beat the claim: decide again with its answer.
			issued, kept = d.Issued, d.Probes
			continue
		}
		if !bad && r.floor > d.RTT && runs < 2*MaxRejections {
			// The witnesses show the claimant farther than it says:
			// its answer counts for the floor, and the search decides
			// again.
			issued, kept = d.Issued, slices.Clone(d.Probes)
			for i, p := range kept {
				if p.Node == d.Node && p.RTT == d.RTT {
					kept[i].RTT = r.floor
				}
			}
			floored[d.Node] = true
			continue
		}
		if bad && rej.Upper && !cc.lowerOnly {
			if len(upper) > 0 {
				cc.lowerOnly = true
				kept = d.Probes
				for _, rj := range upper {
					delete(banned, rj.Node)
					rejected = slices.DeleteFunc(rejected, func(x Rejection) bool { return x.Node == rj.Node })
					kept = append(kept, Probe{Node: rj.Node, RTT: rj.Claim})
				}
				upper, issued = nil, d.Issued
				continue
			}
			upper = append(upper, rej)
		} else if cc.Tally != nil {
			cc.Tally.record(d.Node, bad)
		}
		if !bad {
			return d, nil
		}
		rejected = append(rejected, rej)
		d.Rejected = rejected
		if len(rejected) >= MaxRejections {
			return d, fmt.Errorf("%w: %d claims rejected", ErrNoNodes, len(rejected))
		}
		banned[d.Node] = true
		issued, kept = d.Issued, d.Probes
	}
}

// search runs the search for r's address in subnet s, after the holder
// check.
func (r *run) search(s ID) (Decision, error) {
	m, t, cfg, d := r.m, r.m.Tree, r.cfg, r.d
	// 2. The organisation's nodes.
	if org := t.Org(s); org != "" {
		var nodes []string
		for _, id := range t.ByOrg(org) {
			if n, ok := owner(m.Table, id); ok && !slices.Contains(nodes, n) && !r.banned[n] {
				nodes = append(nodes, n)
			}
		}
		if cfg.Guided {
			return r.guided(s, nodes)
		}
		if len(nodes) == 1 {
			d.Node, d.Step = nodes[0], StepOrganisation
			return *d, nil
		}
		if won, err := r.tryAll(nodes, StepOrganisation); won || err != nil {
			return *d, err
		}
	}

	if cfg.Guided {
		return r.guided(s, nil)
	}

	return r.bottomUp(s)
}

// bottomUp runs the paper's steps 3 and 4 for S: bottom-up through the
// hierarchy, then everybody else; the first answer under the threshold
// wins, else the best.
func (r *run) bottomUp(s ID) (Decision, error) {
	for nodes := range r.m.levels(s) {
		if won, err := r.tryAll(nodes, StepHierarchy); won || err != nil {
			return *r.d, err
		}
		if r.capped() {
			break
		}
	}
	if !r.cfg.NoFallback && !r.capped() {
		if won, err := r.tryAll(r.m.Table.Nodes(), StepHierarchy); won || err != nil {
			return *r.d, err
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
	banned map[string]bool // nodes left out: claims rejected (ClaimCheck)
	floor  time.Duration   // what the check's witnesses show the winner's RTT to be at least (ClaimCheck.floor)
	// floored: nodes whose answers were raised to their floors in this
	// search; their probes are not their measurements, and they witness
	// nothing.
	floored map[string]bool
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
		if errors.Is(err, ErrNotProbed) {
			r.d.Issued++ // asked, but no answer to record or cache
			return Unreachable, nil
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
