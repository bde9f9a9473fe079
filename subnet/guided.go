package subnet

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The guided search (SearchConfig.Guided) is a nearest-neighbour search
// with pruning. Its predictions rest on the model of network coordinates
// with heights (Vivaldi, Dabek et al. 2004): the RTT from node n to a
// subnet S is a core distance between their places plus the access delays
// ("heights") of both ends. Two subnets at the same place thus differ, seen
// from every node, by the same constant, the difference of their heights.
// The search takes the stored probes of each subnet near S in the hierarchy
// (a profile), and once some nodes have answered about S, fits each profile
// to the answers by that constant shift: a profile that fits is a model of
// S, and predicts every other node's RTT to S as its stored probe plus the
// shift. A profile that does not fit (S is not where that neighbour is) is
// dropped; when every profile that could be checked fails, the search falls
// back to the triangle inequality over inter-node RTTs alone. A node is
// pruned on the profiles' word only when, by Bayes over the places S may
// be at, the places that rule it out are S's with probability at least
// 0.95 (prunable).

// profile is the stored probes of one subnet near S, with its fit to the
// answers about S so far.
type profile struct {
	r   Range
	rtt map[string]time.Duration // node → stored probe; failed probes left out

	matched   int           // answers about S from nodes the profile knows
	shift     time.Duration // S's RTTs minus the profile's, fitted to the answers
	misfit    time.Duration // the largest error of the fit
	plausible bool          // S may be at the profile's place: the answers fit with a small shift
	chance    float64       // probability that the answers fit by chance, S being elsewhere
	prior     float64       // prior probability that S is at the profile's place
	place     int           // the profile's place (weigh): profiles at one place share it
}

// fitSlack is added to every tolerance, so that small RTTs (where a few ms
// of jitter dominate) do not read as contradictions.
const fitSlack = 5 * time.Millisecond

// fit fits p to the answers: the shift is the midpoint of the residuals
// (answer minus stored probe), which minimises the largest misfit. S may be
// at p's place (plausible) when the misfit and the shift are both within
// the tolerance of the RTTs concerned: access delays of servers are small
// beside the paths between places, so a large shift means another place.
// One answer fits any profile whose stored probe is near it, by chance as
// well as by place: chance is the probability of that (chanceOf), which
// prunable weighs against the profile's prior.
func (p *profile) fit(answers []Probe, margin float64, between func(a, b string) (time.Duration, bool)) {
	p.matched, p.shift, p.misfit, p.plausible, p.chance = 0, 0, 0, false, 1
	var lo, hi, least, stored time.Duration
	chance := 1.0 // that the answers fit a wrong place
	var prev []string
	for _, a := range answers {
		v, ok := p.rtt[a.Node]
		if !ok {
			continue
		}
		res := a.RTT - v
		if p.matched == 0 {
			lo, hi, least, stored = res, res, a.RTT, v
		} else {
			lo, hi, least, stored = min(lo, res), max(hi, res), min(least, a.RTT), min(stored, v)
		}
		chance *= chanceOf(a, prev, margin, between)
		prev = append(prev, a.Node)
		p.matched++
	}
	if p.matched == 0 {
		return
	}
	p.shift, p.misfit, p.chance = lo+(hi-lo)/2, (hi-lo)/2, chance
	p.plausible = p.misfit <= tolerance(least, margin) && abs(p.shift) <= tolerance(stored, margin)
}

// chanceFit is the probability that one answer fits the profile of a
// wrong place by chance: about the width of the tolerance against the
// spread of RTTs between places.
const chanceFit = 0.1

// chanceOf returns the probability that answer a fits a wrong place by
// chance, given the earlier answers from nodes prev: chanceFit for the
// first, but an answer from a node at d from an earlier one is bound by
// the triangle inequality to within d of that node's answer, so a wrong
// place fits it with a chance of the fit's width against that range's:
// answers from nodes close together are hardly independent evidence.
func chanceOf(a Probe, prev []string, margin float64, between func(a, b string) (time.Duration, bool)) float64 {
	d := Unreachable
	if between != nil {
		for _, n := range prev {
			if x, ok := between(a.Node, n); ok {
				d = min(d, x)
			}
		}
	}
	if d == Unreachable {
		return chanceFit
	}
	return min(1, max(chanceFit, float64(tolerance(a.RTT, margin))/float64(max(d, 1))))
}

// tolerance is the error allowed to an RTT of d.
func tolerance(d time.Duration, margin float64) time.Duration {
	return time.Duration(margin*float64(d)) + fitSlack
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// samePlace reports whether profiles a and b are at the same place: over
// the nodes both know (at least two), b fits a's probes.
func samePlace(a, b *profile, margin float64) bool {
	answers := make([]Probe, 0, len(a.rtt))
	for n, v := range a.rtt {
		if _, ok := b.rtt[n]; ok {
			answers = append(answers, Probe{Node: n, RTT: v})
		}
	}
	f := profile{rtt: b.rtt}
	f.fit(answers, margin, nil)
	return f.plausible && f.matched >= 2
}

// confidence is the posterior probability that S is at a place that rules
// a node out above which the node is pruned (prunable).
const confidence = 0.95

// weigh groups the profiles that know at least two nodes by place,
// greedily, and gives each its place's prior: the share of those profiles
// at the place, with one more count for a place not seen yet (S's place may
// be none of its neighbours'). Profiles that know one node get the prior of
// a place of their own. It numbers the places in the profiles' place.
func weigh(ps []*profile, margin float64) {
	var reps []*profile
	count := map[*profile]int{}
	of := make([]*profile, len(ps))
	n := 0
	for i, p := range ps {
		if len(p.rtt) < 2 {
			continue
		}
		n++
		j := slices.IndexFunc(reps, func(r *profile) bool { return samePlace(r, p, margin) })
		if j < 0 {
			reps = append(reps, p)
			j = len(reps) - 1
		}
		of[i] = reps[j]
		count[reps[j]]++
	}
	for i, p := range ps {
		p.prior, p.place = 1/float64(n+1), len(reps)+i
		if of[i] != nil {
			p.prior, p.place = float64(count[of[i]])/float64(n+1), slices.Index(reps, of[i])
		}
	}
}

// place is a place S may be at, given the answers: some of its profiles
// are plausible.
type place struct {
	prior  float64       // the place's prior (weigh)
	chance float64       // the least chance among its plausible profiles that the answers fit by chance
	low    time.Duration // its lowest prediction for the candidate at hand, less the error; -1 when it has none
}

// prunable decides by Bayes whether a candidate cannot beat target (the
// best answer less the tolerance), given the places S may be at (nil
// entries are none), each with its lowest prediction for the candidate
// less the error. S is at one of them, or at a place with no plausible
// profile (one not seen, or one whose profiles the answers refuted) where
// the answers fit a profile only by chance. The places that rule the
// candidate out (their prediction is not below target) are weighed
// against those that give it a chance (their prediction is below it):
// both explain the answers, so each counts with its prior; and against the
// rest, the places with no plausible profile and those that know nothing
// of the candidate, which count with the chance that the answers fit the
// ruling places by chance. The candidate is pruned when the ruling places
// hold S with probability at least confidence; with one plausible place
// that is prior / (prior + (1 − prior) · chance). It returns the ruling
// places' lowest prediction, or -1 when the candidate stays.
//
// Weighing only the place that rules a node out against chance (the
// search before) let a rare place that fitted the answers prune a node
// that another place, fitting them as well, put nearest: README's Orlando
// site, whose neighbours' place the first answer refuted, fitted a Dubai
// place on five answers from European nodes (which see both alike), and
// the node in Caracas was pruned although a Central American place fitted
// too.
func prunable(places []*place, target time.Duration) time.Duration {
	low, rule, give, chance := time.Duration(-1), 0.0, 0.0, 1.0
	for _, pl := range places {
		switch {
		case pl == nil || pl.low < 0:
		case pl.low < target:
			give += pl.prior
		default:
			rule += pl.prior
			chance = min(chance, pl.chance)
			if low < 0 || pl.low < low {
				low = pl.low
			}
		}
	}
	if rule == 0 {
		return -1
	}
	against := give + max(0, 1-rule-give)*chance
	if rule/(rule+against) < confidence {
		return -1
	}
	return low
}

// candidate is a node in the guided search.
type candidate struct {
	node  string
	order int           // position in the paper's order
	pred  time.Duration // predicted RTT to S: the median over the plausible profiles; -1 when unknown
	low   time.Duration // the lowest prediction of the places that rule it out (prunable); -1 when none do
	lb    time.Duration // lower bound on its RTT to S from the triangle inequality

	bounded bool    // lb rests on some answer (Between knew the RTT to its node)
	chance  float64 // probability that it beats the best answer by more than the tolerance
}

// guide holds the guided search's model of S: the profiles of the subnets
// under x, the lowest range above S (the root excluded) with stored
// probes, widened up the hierarchy while no profile models S.
type guide struct {
	tree      *Tree
	nodes     []string                   // the candidates, for homes' profiles
	home      func(string) (Range, bool) // SearchConfig.Home, nil without Between
	idx       ProbeIndex                 // nil: no profiles
	self      Range                      // S: its stored probes are answers, not a profile
	x         ID
	margin    float64
	tolerance time.Duration // SearchConfig.Tolerance
	between   func(a, b string) (time.Duration, bool)
	profiles  []*profile
	seen      map[Range]bool
	answers   []Probe // the answers about S so far, failures left out
	trusted   bool    // some profile may model S
}

func newGuide(t *Tree, idx ProbeIndex, s ID, cfg SearchConfig, nodes []string) *guide {
	g := &guide{tree: t, idx: idx, self: t.Range(s), x: s, margin: cfg.Margin, tolerance: cfg.Tolerance, seen: map[Range]bool{}, nodes: nodes}
	if cfg.Between != nil {
		memo := map[[2]string]time.Duration{}
		g.between = func(a, b string) (time.Duration, bool) {
			k := [2]string{min(a, b), max(a, b)}
			if d, ok := memo[k]; ok {
				return d, d >= 0
			}
			d, ok := cfg.Between(a, b)
			if !ok {
				d = -1
			}
			memo[k] = d
			return d, ok
		}
		g.home = cfg.Home
	}
	if idx != nil {
		g.add(s)
		if len(g.profiles) == 0 {
			g.widen()
		}
	}
	return g
}

// add takes in the profiles under x not seen yet and reports whether there
// were any. S's own stored probes (a node asked before, or this search's
// answers once the neighbourhood widens over S) are answers, not a
// profile: as a profile S would fit itself, keep the neighbourhood trusted
// however the answers refute every neighbour, and stop it widening.
func (g *guide) add(x ID) bool {
	n := len(g.profiles)
	for sr, ps := range g.idx.Within(g.tree.Range(x)) {
		if g.seen[sr] || sr == g.self {
			continue
		}
		g.seen[sr] = true
		p := &profile{r: sr, rtt: make(map[string]time.Duration, len(ps))}
		for _, pr := range ps {
			if pr.RTT != Unreachable {
				p.rtt[pr.Node] = pr.RTT
			}
		}
		if len(p.rtt) > 0 {
			g.profiles = append(g.profiles, p)
		}
	}
	// Homes after the stored probes: a home that has stored probes of its
	// own (a subnet searched before its node claimed it) keeps those.
	if g.home != nil {
		xr := g.tree.Range(x)
		for _, n := range g.nodes {
			if h, ok := g.home(n); ok && xr.ContainsRange(h) && h != g.self && !g.seen[h] {
				g.seen[h] = true
				g.profiles = append(g.profiles, g.homeProfile(h, n))
			}
		}
	}
	if len(g.profiles) == n {
		return false
	}
	weigh(g.profiles, g.margin)
	return true
}

// homeProfile is the profile of node n's home h: every node at its RTT to
// n, n itself at Between(n, n) (the RTT within its place where Between
// models it, as the emulated Internet does; the overlay measures none and
// says 0). Each profile is one place, so homes are weighed like
// neighbours: a home of many nodes' place counts as often.
func (g *guide) homeProfile(h Range, n string) *profile {
	p := &profile{r: h, rtt: map[string]time.Duration{n: 0}}
	for _, m := range g.nodes {
		if d, ok := g.between(n, m); ok {
			p.rtt[m] = d
		}
	}
	return p
}

// widen moves x up to the next range with new profiles and reports whether
// it found one.
func (g *guide) widen() bool {
	if g.idx == nil {
		return false
	}
	for x := g.tree.Parent(g.x); x != None && g.tree.Parent(x) != None; x = g.tree.Parent(x) {
		g.x = x
		if g.add(x) {
			return true
		}
	}
	return false
}

// observe records an answer about S.
func (g *guide) observe(node string, rtt time.Duration) {
	if rtt != Unreachable {
		g.answers = append(g.answers, Probe{Node: node, RTT: rtt})
	}
}

// update refits the profiles to the answers, widening the neighbourhood
// while none is plausible, and recomputes the candidates' predictions;
// best is the best answer so far.
func (g *guide) update(cands []*candidate, best time.Duration) {
	matched := false
	for {
		plausible := false
		matched = false
		for _, p := range g.profiles {
			p.fit(g.answers, g.margin, g.between)
			matched = matched || p.matched > 0
			plausible = plausible || p.plausible
		}
		g.trusted = len(g.profiles) > 0 && (!matched || plausible)
		if g.trusted || !g.widen() {
			break
		}
	}
	// The places S may be at: those with a plausible profile, by number
	// (a slice, so that prunable sums in a fixed order).
	places := make([]*place, 2*len(g.profiles))
	if matched {
		for _, p := range g.profiles {
			if !p.plausible {
				continue
			}
			pl := places[p.place]
			if pl == nil {
				pl = &place{prior: p.prior, chance: 1}
				places[p.place] = pl
			}
			pl.chance = min(pl.chance, p.chance)
		}
	}
	target := best - g.tolerance
	var preds []time.Duration
	for _, c := range cands {
		c.pred, c.low, c.chance, preds = -1, -1, 0, preds[:0]
		if !g.trusted {
			continue
		}
		for _, pl := range places {
			if pl != nil {
				pl.low = -1
			}
		}
		for _, p := range g.profiles {
			v, ok := p.rtt[c.node]
			if !ok || (matched && !p.plausible) {
				continue
			}
			e := max(0, v+p.shift)
			preds = append(preds, e)
			if pl := places[p.place]; pl != nil {
				// The prediction extrapolates from the answers: its error
				// grows with the distance from the best one.
				lo := max(0, e-p.misfit-tolerance(abs(e-best), g.margin))
				if pl.low < 0 || lo < pl.low {
					pl.low = lo
				}
			}
		}
		c.low = prunable(places, target)
		if len(preds) > 0 {
			slices.Sort(preds)
			c.pred = preds[len(preds)/2]
			// The chance that c beats the best by more than the
			// tolerance: the share of the plausible profiles that say so.
			better, _ := slices.BinarySearch(preds, target)
			c.chance = float64(better) / float64(len(preds))
		}
	}
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
			c := &candidate{node: n, order: len(cands), pred: -1, low: -1}
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
	idx, _ := m.Cache.(ProbeIndex)
	nodes := make([]string, len(cands))
	for i, c := range cands {
		nodes[i] = c.node
	}
	g := newGuide(m.Tree, idx, s, cfg, nodes)
	g.update(cands, Unreachable)
	// The paper takes the organisation's only node without probing; so do
	// we when the stored probes agree: it is the node predicted nearest,
	// under the threshold.
	if len(orgNodes) == 1 && g.trusted {
		var top *candidate
		for _, c := range cands {
			if c.pred >= 0 && (top == nil || c.pred < top.pred) {
				top = c
			}
		}
		if top != nil && top.node == orgNodes[0] && top.pred < cfg.Threshold {
			r.d.Node, r.d.Step = top.node, StepOrganisation
			return *r.d, nil
		}
	}
	best := Unreachable
	for !r.capped() {
		// The most promising node that may still beat the best.
		var next *candidate
		for _, c := range cands {
			if r.asked[c.node] || r.pruned(c, best, g.trusted) {
				continue
			}
			// Once an answer is under the threshold, only a node that may
			// still beat it is worth asking.
			if best < cfg.Threshold && !c.mayBeat(g.trusted) {
				continue
			}
			if next == nil || c.before(next, g.trusted) {
				next = c
			}
		}
		if next == nil {
			break
		}
		if cfg.Trace != nil {
			cfg.Trace(fmt.Sprintf("ask %s: %s; %s", next.node, next, g))
		}
		rtt, err := r.probe(next.node)
		if err != nil {
			return *r.d, err
		}
		best = min(best, rtt)
		g.observe(next.node, rtt)
		r.bound(cands, next.node, rtt)
		g.update(cands, best)
	}
	if cfg.Trace != nil {
		for _, c := range cands {
			if !r.asked[c.node] {
				cfg.Trace(fmt.Sprintf("left %s: %s pruned=%v promising=%v", c.node, c, r.pruned(c, best, g.trusted), r.promising(c, best, g.trusted)))
			}
		}
		cfg.Trace(fmt.Sprintf("end: best %v; %s", best, g))
	}
	d, err := r.best()
	if err == nil {
		d.Step = StepGuided
	}
	return d, err
}

// String describes c for SearchConfig.Trace.
func (c *candidate) String() string {
	return fmt.Sprintf("pred %v low %v lb %v bounded %v chance %.2f", c.pred, c.low, c.lb, c.bounded, c.chance)
}

// String describes the guide for SearchConfig.Trace: its profiles.
func (g *guide) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "trusted %v at %s, %d answers, profiles:", g.trusted, g.tree.Range(g.x), len(g.answers))
	for _, p := range g.profiles {
		fmt.Fprintf(&b, " [%s n=%d matched=%d plausible=%v shift=%v misfit=%v prior=%.2f chance=%.2f place=%d]",
			p.r, len(p.rtt), p.matched, p.plausible, p.shift, p.misfit, p.prior, p.chance, p.place)
	}
	return b.String()
}

// bound raises the candidates' lower bounds after probed answered rtt: a
// node n at d(n, probed) from it is at least |rtt − d| from S.
func (r *run) bound(cands []*candidate, probed string, rtt time.Duration) {
	if r.cfg.Between == nil || rtt == Unreachable {
		return
	}
	for _, c := range cands {
		if d, ok := r.cfg.Between(c.node, probed); ok {
			c.lb, c.bounded = max(c.lb, rtt-d, d-rtt), true
		}
	}
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
// with the margin for error: by the places that rule it out while
// predictions hold (prunable), or by its lower bound from the triangle
// inequality, unless the profiles give it a chance (as promising counts
// one). Real RTTs violate the triangle inequality, at times by far more
// than the margin (a detour between two nodes: in the benchmark's world a
// node is 385 ms from another, and a site 18 ms from the first sees the
// second at 198 ms), while a stored probe measures the node's path to S's
// place: where the two disagree, the measurement wins.
func (r *run) pruned(c *candidate, best time.Duration, trusted bool) bool {
	if best == Unreachable {
		return false
	}
	target := best - r.cfg.Tolerance
	if trusted && c.low >= 0 && c.low >= target {
		return true
	}
	return float64(c.lb)*(1-r.cfg.Margin) >= float64(target) && !(trusted && c.chance > 1-confidence)
}

// promising reports whether c, not yet asked, may beat best by more than
// the tolerance: predicted to by the profiles, or unknown to them (none
// that may model S knows it, or none is trusted) while the triangle
// inequality over the answers leaves it room to. Stored probes are only
// those of the nodes asked before, so at a cold start the profiles know
// the first node under the threshold and nobody else: taking their
// silence for a prediction made that node the only one ever asked nearby
// (the demo's cold start: 40-60 % optimal). With Between unknown a node
// is never bounded and the paper's first answer under the threshold wins.
func (r *run) promising(c *candidate, best time.Duration, trusted bool) bool {
	return !r.asked[c.node] && !r.pruned(c, best, trusted) && c.mayBeat(trusted)
}

// mayBeat is promising for a node already known to be neither asked nor
// pruned.
func (c *candidate) mayBeat(trusted bool) bool {
	return trusted && c.chance > 1-confidence || c.bounded && (!trusted || c.pred < 0)
}
