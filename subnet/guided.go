package subnet

import (
	"cmp"
	"fmt"
	"math"
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
	at  *MapPlace                // a place of the map (SearchConfig.Places), r being zero
	rtt map[string]time.Duration // node → stored probe; failed probes left out

	matched   int           // answers about S from nodes the profile knows
	shift     time.Duration // S's RTTs minus the profile's, fitted to the answers
	misfit    time.Duration // the largest error of the fit
	plausible bool          // S may be at the profile's place: the answers fit with a small shift
	like      float64       // how well the answers fit, relative to a perfect fit (1): the likelihood of S at the place
	chance    float64       // probability that the answers fit by chance, S being elsewhere
	prior     float64       // prior probability that S is at the profile's place (weigh)
	weight    float64       // how likely the profile's subnet is at S's place, by their relation (relation)
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
	p.matched, p.shift, p.misfit, p.plausible, p.chance, p.like = 0, 0, 0, false, 1, 1
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
	// The likelihood: each answer's residual from the fitted shift, as a
	// normal error of noiseSD; the fit's tolerance admits places whose
	// profiles miss by several of those, which the likelihood weighs down.
	sum := 0.0
	for _, a := range answers {
		if v, ok := p.rtt[a.Node]; ok {
			e := float64(a.RTT-v-p.shift) / float64(noiseSD(a.RTT))
			sum += e * e / 2
		}
	}
	p.like = math.Exp(-sum)
}

// noiseSD is the error expected of an answer of d against the prediction
// of a profile at S's place: 3 % of it plus 1.5 ms (jitter, the least of
// three samples' resolution, and the last miles of two subnets at one
// place).
func noiseSD(d time.Duration) time.Duration {
	return time.Duration(0.03*float64(d)) + 1500*time.Microsecond
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

// confidence is the posterior probability that S is at a place that rules
// a node out above which the node is pruned (prunable).
const confidence = 0.95

// weigh gives each profile its prior: the share of the profiles' weight
// that is its own, with one more count for a place not seen yet (S's
// place may be none of its neighbours'). Profiles that know one node are
// left out of the total: one probe tells nothing of a place.
func weigh(ps []*profile) (unseen float64) {
	n := 0.0
	for _, p := range ps {
		if len(p.rtt) >= 2 {
			n += p.weight
		}
	}
	for _, p := range ps {
		p.prior = p.weight / (n + 1)
	}
	return 1 / (n + 1)
}

// Weights of a profile by its relation to S (relation), from the real
// structure: of 1,000 real server addresses (DB-IP City Lite, sampled),
// two are at the same place (the same location of the latency data) with
// probability 0.010; 0.077 when their ranges' registry countries agree,
// 0.002 when they differ; 0.32 when they also share an allocation (their
// ranges meet below the registry's /8 block), 0.12 when they only share
// the block; 0.22 when they share an organisation. Weights are those
// odds relative to a subnet of the same country.
const (
	weightOtherCountry   = 0.05 // registry countries differ
	weightUnknownCountry = 0.3  // S names a country, the profile's subnet none
	weightSameBlock      = 1.6  // same country, and the ranges meet in a registry block
	weightSameAlloc      = 4    // same country, and the ranges meet below a registry block
	weightSameOrg        = 3    // same organisation, at least
)

// relation returns the weight of a profile of range r as a model of S's
// place.
func (g *guide) relation(r Range) float64 {
	// A range the hierarchy does not hold (a split part) counts as the
	// smallest range that holds it.
	id := g.holding(r)
	if id == None {
		return weightUnknownCountry
	}
	cc := g.tree.Country(id)
	w := 1.0
	switch {
	case g.cc == "":
		// Nothing to tell the profiles apart by: each counts one.
	case cc == "":
		w = weightUnknownCountry
	case cc != g.cc:
		w = weightOtherCountry
	default:
		switch d := g.tree.Depth(g.meet(id)); {
		case d >= 2:
			w = weightSameAlloc
		case d == 1:
			w = weightSameBlock
		}
	}
	if g.org != "" && g.tree.Org(id) == g.org {
		w = max(w, weightSameOrg)
	}
	return w
}

// meet returns the lowest common ancestor of S and id.
func (g *guide) meet(id ID) ID {
	sr := g.tree.Range(g.s)
	for x := id; x != None; x = g.tree.Parent(x) {
		if g.tree.Range(x).ContainsRange(sr) {
			return x
		}
	}
	return None
}

// evidence is what one plausible profile says of a candidate: its
// prediction for it, less the error, with the profile's prior and fit.
type evidence struct {
	prior  float64       // the profile's prior (weigh)
	like   float64       // its fit to the answers (profile.like)
	chance float64       // the chance that the answers fit it by chance
	low    time.Duration // its prediction for the candidate less the error; -1: it knows nothing of the candidate
}

// prunable decides by Bayes whether a candidate cannot beat target (the
// best answer less the tolerance), given the evidence of the plausible
// profiles: each one's prediction for the candidate less its error, or
// nothing when it does not know the candidate. S is at one of their
// places, or at a place no answer bears on (open: a place not seen, or one
// whose profiles know none of the nodes that answered), where the answers
// fit the profiles only by chance; not at a place whose profiles the
// answers refuted. The profiles that rule the candidate out (their
// prediction is not below target) are weighed against those that give it a
// chance (below it), each with its prior times its fit to the answers (a
// profile that fits worse explains them less), and against open, which
// counts with the chance that the answers fit the ruling profiles by
// chance. A plausible profile that does not know the candidate is neither:
// S may be at its place, where other profiles may know the candidate. The
// candidate is pruned when the ruling profiles hold S with probability at
// least confidence; with one plausible profile that fits perfectly that is
// prior / (prior + open · chance). It returns the ruling profiles' lowest
// prediction, or -1 when the candidate stays. Counting the refuted profiles' prior as open (the search before)
// kept a Los Angeles site's search going after its country's rarer
// western place was confirmed: most of the country's profiles were in the
// east and refuted.
//
// Weighing only the places that rule a node out against chance (the
// search before) let a rare place that fitted the answers prune a node
// that another place, fitting them as well, put nearest: an Orlando
// site, whose neighbours' place the first answer refuted, fitted a Dubai
// place on five answers from European nodes (which see both alike), and
// the node in Caracas was pruned although a Central American place fitted
// too. Grouping profiles into places and taking a place's lowest
// prediction from any of them (the search before) let one profile that
// fitted the answers badly give a node the chance of its whole place: a
// Sydney site, whose Australian place held a Canberra subnet 17.8 ms off
// the answers, had Minneapolis asked at 284 ms after Honolulu answered 216.
func prunable(ev []evidence, open float64, target time.Duration) time.Duration {
	low, rule, give, chance := time.Duration(-1), 0.0, 0.0, 1.0
	for _, e := range ev {
		if e.low < 0 {
			continue
		}
		if e.low < target {
			give += e.prior * e.like
			continue
		}
		rule += e.prior * e.like
		chance = min(chance, e.chance)
		if low < 0 || e.low < low {
			low = e.low
		}
	}
	if rule == 0 {
		return -1
	}
	against := give + open*chance
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

	vote    float64 // weight of the profiles that predict it nearest of all
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
	s         ID                         // S
	cc, org   string                     // S's registry country and organisation
	x         ID
	margin    float64
	tolerance time.Duration // SearchConfig.Tolerance
	between   func(a, b string) (time.Duration, bool)
	profiles  []*profile
	unseen    float64 // the prior that S is at a place no profile models (weigh)
	seen      map[Range]bool
	answers   []Probe // the answers about S so far, failures left out
	trusted   bool    // some profile may model S
}

func newGuide(t *Tree, idx ProbeIndex, s ID, self Range, cfg SearchConfig, nodes []string) *guide {
	g := &guide{tree: t, idx: idx, self: self, s: s, cc: t.Country(s), org: t.Org(s), x: s, margin: cfg.Margin, tolerance: cfg.Tolerance, seen: map[Range]bool{}, nodes: nodes}
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
		g.addPlaces(s)
	}
	g.addMap(cfg.Places)
	if idx != nil && len(g.profiles) == 0 {
		g.widen()
	}
	return g
}

// Prior weights of a latency map's places (SearchConfig.Places), shared
// by the places of S's registry country and by all the others: as much as
// a few subnets of S's country with stored probes, so that stored probes,
// which say where a country's servers are, soon outweigh the map's even
// spread. Of 1,000 sampled DB-IP addresses, 93 % are in their range's
// registry country.
const (
	MapCountryWeight = 2.0
	MapOtherWeight   = 0.15
)

// addMap takes in the map's places as profiles (SearchConfig.Places).
func (g *guide) addMap(places []MapPlace) {
	in := 0
	for i := range places {
		if places[i].Country == g.cc {
			in++
		}
	}
	out := len(places) - in
	n := len(g.profiles)
	for i := range places {
		mp := &places[i]
		if len(mp.RTT) == 0 {
			continue
		}
		w := MapOtherWeight / float64(out)
		if mp.Country == g.cc {
			w = MapCountryWeight / float64(in)
		}
		g.profiles = append(g.profiles, &profile{at: mp, rtt: mp.RTT, weight: w})
	}
	if len(g.profiles) > n {
		g.unseen = weigh(g.profiles)
	}
}

// placeProfiles bounds the profiles the guided search takes from S's
// organisation and from its country each: the nearest in address order,
// which are the likeliest to share S's place (an organisation numbers a
// site's ranges together; a registry allocates a country's neighbouring
// blocks to its ISPs' regions).
const placeProfiles = 32

// addPlaces takes in, beyond S's neighbourhood in the hierarchy, the stored
// probes of S's organisation's other ranges and of the subnets of S's
// registry country (when the index is a PlaceIndex): the places S is likely
// at. On real structure a subnet's neighbours in the hierarchy are often
// in other countries, while its organisation and country name where it
// is.
func (g *guide) addPlaces(s ID) {
	n := len(g.profiles)
	take := func(seq func(yield func(Range, []Probe) bool)) {
		k := 0
		for sr, ps := range seq {
			if k == placeProfiles {
				return
			}
			if g.takeProfile(sr, ps) {
				k++
			}
		}
	}
	t := g.tree
	if org := t.Org(s); org != "" {
		ids := t.ByOrg(org)
		i, _ := slices.BinarySearch(ids, s)
		lo, hi := i-1, i
		take(func(yield func(Range, []Probe) bool) {
			for lo >= 0 || hi < len(ids) {
				var id ID
				if hi >= len(ids) || lo >= 0 && s-ids[lo] <= ids[hi]-s {
					id, lo = ids[lo], lo-1
				} else {
					id, hi = ids[hi], hi+1
				}
				if id == s {
					continue
				}
				for sr, ps := range g.idx.Within(t.Range(id)) {
					if !yield(sr, ps) {
						return
					}
				}
			}
		})
	}
	if pi, ok := g.idx.(PlaceIndex); ok {
		if cc := t.Country(s); cc != "" {
			take(pi.Country(cc, g.self))
		}
	}
	if len(g.profiles) > n {
		g.unseen = weigh(g.profiles)
	}
}

// takeProfile adds the stored probes ps of sr as a profile, unless sr was
// seen or is S, and reports whether it did.
func (g *guide) takeProfile(sr Range, ps []Probe) bool {
	if g.seen[sr] || sr == g.self {
		return false
	}
	g.seen[sr] = true
	p := &profile{r: sr, rtt: make(map[string]time.Duration, len(ps)), weight: g.relation(sr)}
	for _, pr := range ps {
		if pr.RTT != Unreachable {
			p.rtt[pr.Node] = pr.RTT
		}
	}
	if len(p.rtt) == 0 {
		return false
	}
	g.profiles = append(g.profiles, p)
	return true
}

// add takes in the profiles under x not seen yet and reports whether there
// were any. S's own stored probes (a node asked before, or this search's
// answers once the neighbourhood widens over S) are answers, not a
// profile: as a profile S would fit itself, keep the neighbourhood trusted
// however the answers refute every neighbour, and stop it widening.
func (g *guide) add(x ID) bool {
	n := len(g.profiles)
	for sr, ps := range g.idx.Within(g.tree.Range(x)) {
		g.takeProfile(sr, ps)
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
	g.unseen = weigh(g.profiles)
	return true
}

// minOrgProfiles is how many of the organisation's subnets with stored
// probes must put its node nearest before the guided search takes that
// node for another of its subnets without probing.
const minOrgProfiles = 3

// orgAt reports whether the stored probes of S's organisation place it at
// node n: at least minOrgProfiles of its subnets have n nearest, and none
// has another node nearer than n by more than the tolerance.
func (g *guide) orgAt(n string) bool {
	if g.org == "" {
		return false
	}
	agree := 0
	for _, p := range g.profiles {
		if p.at != nil || g.tree.Org(g.holding(p.r)) != g.org {
			continue
		}
		at, ok := p.rtt[n]
		if !ok {
			continue
		}
		nearest := at
		for _, d := range p.rtt {
			nearest = min(nearest, d)
		}
		if at-nearest > g.tolerance {
			return false
		}
		agree++
	}
	return agree >= minOrgProfiles
}

// holding returns the range of the hierarchy that is r, or the smallest
// that holds r (a part delegated apart), or None.
func (g *guide) holding(r Range) ID {
	id, ok := g.tree.Find(r)
	if ok {
		return id
	}
	for id = g.tree.Lookup(r.Start); id != None && !g.tree.Range(id).ContainsRange(r); id = g.tree.Parent(id) {
	}
	return id
}

// homeProfile is the profile of node n's home h: every node at its RTT to
// n, n itself at Between(n, n) (the RTT within its place where Between
// models it, as the emulated Internet does; the overlay measures none and
// says 0). Each profile is one place, so homes are weighed like
// neighbours: a home of many nodes' place counts as often.
func (g *guide) homeProfile(h Range, n string) *profile {
	p := &profile{r: h, rtt: map[string]time.Duration{n: 0}, weight: g.relation(h)}
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
	target := best - g.tolerance
	// Each profile that may model S votes, with its weight, for the node
	// it predicts nearest: the ask order's first key.
	byNode := make(map[string]*candidate, len(cands))
	for _, c := range cands {
		c.vote = 0
		byNode[c.node] = c
	}
	if g.trusted {
		for _, p := range g.profiles {
			if matched && !p.plausible {
				continue
			}
			var top *candidate
			var low time.Duration
			for n, v := range p.rtt {
				if c, ok := byNode[n]; ok && (top == nil || v < low || v == low && c.order < top.order) {
					top, low = c, v
				}
			}
			if top != nil {
				top.vote += p.weight * p.like
			}
		}
	}
	// The prior that no answer bears on: a place not seen, and profiles
	// that know none of the nodes that answered. Profiles the answers
	// refuted hold none of it: S is not at their places.
	open := g.unseen
	for _, p := range g.profiles {
		if p.matched == 0 {
			open += p.prior
		}
	}
	var preds []weighted
	var ev []evidence
	for _, c := range cands {
		c.pred, c.low, c.chance, preds, ev = -1, -1, 0, preds[:0], ev[:0]
		if !g.trusted {
			continue
		}
		for _, p := range g.profiles {
			if matched && p.plausible {
				if _, ok := p.rtt[c.node]; !ok {
					// S may be at its place, which other profiles may
					// know the candidate from: it is neither evidence
					// for nor against, nor a place nobody knows.
					ev = append(ev, evidence{prior: p.prior, low: -1})
				}
			}
			v, ok := p.rtt[c.node]
			if !ok || (matched && !p.plausible) {
				continue
			}
			e := max(0, v+p.shift)
			preds = append(preds, weighted{e, p.weight * p.like})
			if matched {
				// The prediction extrapolates from the answers: its error
				// grows with the distance from the best one.
				lo := max(0, e-p.misfit-tolerance(abs(e-best), g.margin))
				ev = append(ev, evidence{prior: p.prior, like: p.like, chance: p.chance, low: lo})
			}
		}
		c.low = prunable(ev, open, target)
		if len(preds) > 0 {
			// The prediction is the profiles' median, each counting with
			// its weight; the chance that c beats the best by more than
			// the tolerance is the weight of the plausible profiles that
			// say so.
			slices.SortFunc(preds, func(a, b weighted) int { return cmp.Compare(a.v, b.v) })
			total := 0.0
			for _, p := range preds {
				total += p.w
			}
			acc, better := 0.0, 0.0
			c.pred = preds[len(preds)-1].v
			for _, p := range preds {
				if p.v < target {
					better += p.w
				}
				if acc += p.w; acc >= total/2 && c.pred == preds[len(preds)-1].v {
					c.pred = p.v
				}
			}
			c.chance = better / total
		}
	}
}

// weighted is a prediction with the weight of its profile.
type weighted struct {
	v time.Duration
	w float64
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
	g := newGuide(m.Tree, idx, s, r.subnet, cfg, nodes)
	// Answers the search was given (DelegatePart's observation).
	best := Unreachable
	for _, p := range r.d.Probes {
		best = min(best, p.RTT)
		g.observe(p.Node, p.RTT)
		r.bound(cands, p.Node, p.RTT)
	}
	g.update(cands, best)
	// The paper takes the organisation's only node without probing; so do
	// we when the stored probes agree: it is the node predicted nearest,
	// under the threshold, and the organisation's own stored probes show
	// it in one place (a cloud's ranges are on every continent, and one
	// probed range of it says nothing of the next).
	if len(orgNodes) == 1 && g.trusted && len(r.d.Probes) == 0 && g.orgAt(orgNodes[0]) {
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
		fmt.Fprintf(&b, " [%s n=%d matched=%d plausible=%v shift=%v misfit=%v prior=%.3f like=%.3f chance=%.2f]",
			p.name(), len(p.rtt), p.matched, p.plausible, p.shift, p.misfit, p.prior, p.like, p.chance)
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
	if trusted && c.vote != o.vote {
		return c.vote > o.vote
	}
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

// name names p's place for SearchConfig.Trace.
func (p *profile) name() string {
	if p.at != nil {
		return "map:" + p.at.Name
	}
	return p.r.String()
}
