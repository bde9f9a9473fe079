// Checks of probe claims by the triangle inequality (SearchConfig.Claims).

package subnet

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// ClaimCheck checks the probe a search's winner answered before it wins. A
// probe answer is a claim: a node can make its round trips longer (delay
// its answers) but never shorter. For a claim x of node A to address s, a
// witness W that measured y = rtt(W, s) by its own probe and z = rtt(W, A)
// itself (a ping, never A's word) bounds it both ways: by the triangle
// inequality y ≤ z + x (A is no nearer s than W sees it) and z ≤ y + x (A
// is no farther from W than s and x allow). Real routes break the
// inequality, one side often twice the other (on the real RTT matrix of
// 246 cities, y > 2(z + x) + 20 ms holds for 1 triple in 11,000, and
// y > 2.5(z + x) + 20 ms for 1 in 54,000), so a witness finds the claim
// impossible only when
//
//	y > Factor·(z + x) + Slack   (A claims to be nearer s than it is), or
//	z > Factor·(y + x) + Slack   (A is farther from W than it says: it delays its answers).
//
// The second line catches a node that lies about its probes and delays
// its pings to hide where it is: to pass both it must look, from every
// witness, like a node at s, and it can only look farther than it is
// (constraint-based geolocation, Gueye et al. 2006). It assumes the
// address is in one place: an anycast address, or a CDN's, is answered
// near each prober, and a witness near one of its points of presence
// finds an honest claimant near another too far by it. So a claim the
// second line alone refutes is heard out: witnesses near the claimant
// are asked (up to Agree more), and when Agree of them (or a trusted one)
// see the site nearer the claimant than a refuting witness's bound
// allows, the site is in several places and the claim stands. Where
// none is near, such a rejection is tallied only when the search ends,
// and a second one in the same search switches the line off for the rest
// of it and hears those claimants again (IPMicra.Delegate). The first
// line holds for such addresses too. What no check of this kind catches
// is a lie within the Factor: a node that halves its RTTs passes, and wins
// where it is within twice the best node's RTT; the floor (Floor, off by
// default) takes a little of that back without rejecting anyone.
//
// Witnesses are the nodes whose probe of the subnet the search holds (its
// own or stored) and whose RTT to the claimant Measured gives. A witness
// whose two RTTs are within Factor of each other can refute no claim; when
// no witness at hand can, or when one refutes it and more must agree, the
// nodes nearest the claimant by Measured are asked to probe (their bounds
// are the tightest), at most Extra of them and within the search's
// MaxProbes; a witness that answers better than the claim makes the
// search decide again with its answer. A claim is rejected when at least
// Agree witnesses find it impossible, so that one lying witness cannot
// frame a node; a witness with a rejected claim of its own is not used.
// The rejected node is left out and the search runs again (at most
// MaxRejections times); Tally, when set, records each check, and a node
// it bars is not asked at all.
//
// A ClaimCheck is read only during searches; its Tally is safe for
// concurrent use.
type ClaimCheck struct {
	// Factor and Slack make a witness's bounds (above). Zero values take
	// 2.5 and 20 ms: with them no honest claim was rejected in micra
	// bench liars, on real addresses and on generated worlds, while at
	// 2 two witnesses agreed on a detour once in 1,372 decisions.
	Factor float64
	Slack  time.Duration
	// Agree is how many witnesses must find a claim impossible to reject
	// it, Extra how many nodes a check may ask to probe. Zero values take
	// 2 and 3.
	Agree, Extra int
	// Measured returns the RTT between witness by and node of as by
	// measured it itself (its ping or connection), never as of reported
	// it: the claimant's own word about its RTTs proves nothing. Nil: no
	// witness, no check.
	Measured func(by, of string) (time.Duration, bool)
	// Tally, when set, records checks and bars repeat liars.
	Tally *ClaimTally
	// Trusted, when set, names the witnesses whose probes are not in
	// doubt (the coordinator deciding, itself). The second bound is as
	// much a charge against the witness's probe y as against the claim
	// x, since y + x is what z exceeds: a liar that shortens its own
	// probes frames honest claimants by it (two liars agreed against an
	// honest node 5 times in 1,729 decisions of micra bench liars
	// --fraction 0.25 when every witness was trusted, and three did once
	// more). With Trusted set, a rejection that rests on the second
	// bound alone needs a trusted witness among those agreeing, asked
	// for it when none is. Nil trusts every witness.
	Trusted func(node string) bool
	// Floor switches the floor on (below; off by default). FloorSlack is
	// what a witness's plain triangle bound is lowered by; zero takes 10
	// ms.
	//
	// The floor: a claim the check lets pass still counts for no less
	// than the witnesses show the claimant's RTT to be by the plain
	// triangle inequality (factor 1): |y − z| − FloorSlack, the second
	// largest over the witnesses (the largest when a trusted witness
	// shows it), so that one witness lying about its RTTs cannot raise
	// another's. A claim below its floor is raised to it and the search
	// decides again: no node is rejected for it (routes that break the
	// inequality are common: an honest node loses at most a decision it
	// won narrowly), but a node that shortens its RTTs by less than
	// Factor wins only where the witnesses cannot see it. Off by
	// default: it took a few per cent of liars' wins in micra bench
	// liars, whose probes are the model's RTTs with their jitter, but
	// where probes time real requests (overlay/delegate's TestSwarmWorld)
	// their noise raised honest claims: 92–94 % optimal instead of 97–100
	// %, and more probes per subnet.
	Floor      bool
	FloorSlack time.Duration

	// lowerOnly switches the second bound off: the search found the
	// address in several places (IPMicra.Delegate).
	lowerOnly bool
}

// MaxRejections bounds the claims one search rejects; then it fails with
// ErrNoNodes.
const MaxRejections = 4

func (c ClaimCheck) withDefaults() ClaimCheck {
	if c.Factor <= 0 {
		c.Factor = 2.5
	}
	if c.Slack <= 0 {
		c.Slack = 20 * time.Millisecond
	}
	if c.Agree <= 0 {
		c.Agree = 2
	}
	if c.Extra <= 0 {
		c.Extra = 3
	}
	if c.FloorSlack <= 0 {
		c.FloorSlack = 10 * time.Millisecond
	}
	return c
}

// Rejection is one claim a check found impossible.
type Rejection struct {
	Node  string        // the claimant
	Claim time.Duration // its probe
	// Witnesses found it impossible; Bound is the largest margin by which
	// one of them did (how far the claim is off, beyond the slack).
	Witnesses []string
	Bound     time.Duration
	// Upper: it rests on the second bound alone (no witness found the
	// claimant nearer the address than it could be), which is also what
	// an address in several places looks like (IPMicra.Delegate).
	Upper bool
}

// witness is one witness's two measurements.
type witness struct {
	node            string
	toAddr, toClaim time.Duration
}

// bounds returns by how much w finds claim x impossible beyond the
// allowance, by the first bound (A nearer s than w sees it) and by the
// second (A farther from w than s and x allow); ≤ 0: possible.
func (c ClaimCheck) bounds(w witness, x time.Duration) (lower, upper time.Duration) {
	f := func(a, b time.Duration) time.Duration {
		return a - time.Duration(c.Factor*float64(b+x)) - c.Slack
	}
	if c.lowerOnly {
		return f(w.toAddr, w.toClaim), 0
	}
	return f(w.toAddr, w.toClaim), f(w.toClaim, w.toAddr)
}

// suspect reports whether n had a claim rejected: its probes are claims
// too, and a witness that lies about them could frame an honest node.
func (c ClaimCheck) suspect(n string) bool {
	if c.Tally == nil {
		return false
	}
	rejected, _ := c.Tally.Counts(n)
	return rejected > 0
}

// claimed reports whether d was won on a probe of its node: only such a
// decision has a claim to check.
func claimed(d Decision) bool {
	if d.Node == "" || d.RTT >= Unreachable || d.RTT < 0 {
		return false
	}
	for _, p := range d.Probes {
		if p.Node == d.Node && p.RTT == d.RTT {
			return true
		}
	}
	return false
}

// trusted reports whether n's word is trusted (ClaimCheck.Trusted).
func (c ClaimCheck) trusted(n string) bool { return c.Trusted == nil || c.Trusted(n) }

// informative reports whether w can refute some claim: one of its RTTs
// exceeds Factor times the other plus the Slack.
func (c ClaimCheck) informative(w witness) bool {
	lower, upper := c.bounds(w, 0)
	return max(lower, upper) > 0
}

// check checks the claim that won r's decision. It returns the rejection
// when the claim is impossible, and better when a witness it asked
// answered better than the claim: the decision is then made again with
// that answer.
func (r *run) check(c ClaimCheck) (rej Rejection, bad, better bool, err error) {
	d := r.d
	k := &claimCheck{r: r, c: &c, claimant: d.Node, x: d.RTT, seen: map[string]bool{d.Node: true}}
	k.rej = Rejection{Node: k.claimant, Claim: k.x}
	for _, p := range d.Probes {
		k.take(p.Node, p.RTT)
	}
	if idx, ok := r.m.Cache.(ProbeIndex); ok {
		for sr, ps := range idx.Within(r.subnet) {
			if sr != r.subnet {
				continue
			}
			for _, p := range ps {
				k.take(p.Node, p.RTT)
			}
		}
	}
	if better, err := k.askMore(); err != nil || better {
		return Rejection{}, false, better, err
	}
	k.rej.Upper = !k.byLower
	if !k.done() || k.byLower {
		if !k.done() {
			r.floor = c.floor(k.all)
		}
		return k.rej, k.done(), false, nil
	}
	return k.upperOnly()
}

// claimCheck is one check of a claim: the witnesses taken so far and what
// they say.
type claimCheck struct {
	r        *run
	c        *ClaimCheck
	claimant string
	x        time.Duration // the claim
	rej      Rejection
	// informed: some witness can refute some claim; confirmed: a trusted
	// witness refutes, or any by the first bound; byLower: one refutes by
	// the first bound.
	informed, confirmed, byLower bool
	seen                         map[string]bool
	all, upperOnes               []witness // every witness taken; those refuting by the second bound
}

func (k *claimCheck) done() bool { return len(k.rej.Witnesses) >= k.c.Agree && k.confirmed }

// take has node n, at rtt from the subnet, witness the claim, if it may
// and has measured the claimant.
func (k *claimCheck) take(n string, rtt time.Duration) {
	r, c := k.r, k.c
	if k.seen[n] || r.banned[n] || r.floored[n] || rtt <= 0 || rtt >= Unreachable || c.suspect(n) {
		return
	}
	k.seen[n] = true
	m, ok := c.Measured(n, k.claimant)
	if !ok || m <= 0 {
		return
	}
	w := witness{node: n, toAddr: rtt, toClaim: m}
	k.all = append(k.all, w)
	k.informed = k.informed || c.informative(w)
	lower, upper := c.bounds(w, k.x)
	if upper > 0 {
		k.upperOnes = append(k.upperOnes, w)
	}
	if e := max(lower, upper); e > 0 {
		k.rej.Witnesses = append(k.rej.Witnesses, n)
		k.rej.Bound = max(k.rej.Bound, e)
		k.confirmed = k.confirmed || lower > 0 || c.trusted(n)
		k.byLower = k.byLower || lower > 0
	}
}

// ask has n probe as one more witness; better: it answered better than
// the claim, and the search decides again with its answer.
func (k *claimCheck) ask(n string) (better bool, err error) {
	rtt, err := k.r.probe(n)
	if err != nil || rtt < k.x {
		return err == nil, err
	}
	k.take(n, rtt)
	return false, nil
}

// askMore asks more witnesses, up to Extra: one while none at hand can
// refute the claim; while some refute it, until Agree do and one
// refutation is confirmed. Asked in turn: the trusted nodes, the nodes
// nearest the claimant (for the first bound) and those whose stored probes
// put them nearest the subnet's neighbourhood (for the second).
func (k *claimCheck) askMore() (better bool, err error) {
	r, c := k.r, k.c
	var trusted, cands []string
	listed := false
	next := func(l *[]string) string {
		for len(*l) > 0 {
			n := (*l)[0]
			*l = (*l)[1:]
			if !r.asked[n] && !k.seen[n] {
				return n
			}
		}
		return ""
	}
	for asked := 0; asked < c.Extra && !k.done() && !r.capped(); asked++ {
		if len(k.rej.Witnesses) == 0 && (k.informed || asked > 0) {
			break
		}
		if !listed {
			// Only now: the list scans every node, and most checks end
			// with the witnesses at hand.
			trusted, cands = r.witnessCandidates(*c, k.claimant, k.seen)
			listed = true
		}
		n := ""
		if len(k.rej.Witnesses) > 0 && !k.confirmed {
			n = next(&trusted)
		}
		if n == "" {
			n = next(&cands)
		}
		if n == "" {
			break
		}
		if better, err := k.ask(n); err != nil || better {
			return better, err
		}
	}
	return false, nil
}

// upperOnly ends a check whose claim is refuted by the second bound alone:
// the claimant is farther from the refuting witnesses than the site and
// its claim allow — or the site is in several places (anycast, a CDN) and
// they are near another of them. A witness near the claimant that sees the
// site near tells the two apart: through it the claimant is within its two
// RTTs of the site, nearer than a refuting witness's bound allows, which a
// site in one place cannot be (a liar can lengthen the RTTs it is measured
// by, never shorten them). Up to Agree more are asked, the nearest the
// claimant first, within the probe budget.
func (k *claimCheck) upperOnly() (rej Rejection, bad, better bool, err error) {
	r, c := k.r, k.c
	for range c.Agree {
		if c.severalPlaces(k.all, k.upperOnes) || r.capped() {
			break
		}
		near := r.nearClaimant(*c, k.claimant, k.seen)
		if len(near) == 0 {
			break
		}
		if better, err := k.ask(near[0]); err != nil || better {
			return Rejection{}, false, better, err
		}
	}
	if k.byLower { // a witness asked found the claimant too near the site
		k.rej.Upper = false
		return k.rej, true, false, nil
	}
	if c.severalPlaces(k.all, k.upperOnes) {
		c.lowerOnly = true // in several places: the second bound says nothing
		r.floor = c.floor(k.all)
		return Rejection{Node: k.claimant, Claim: k.x}, false, false, nil
	}
	return k.rej, true, false, nil
}

// floor returns the least RTT the witnesses show the claimant to have
// (ClaimCheck.Floor): the second largest of their bounds, or a trusted
// witness's alone; 0 for none, or when the floor is off.
func (c ClaimCheck) floor(all []witness) time.Duration {
	if !c.Floor {
		return 0
	}
	var bs []time.Duration
	var trusted time.Duration
	for _, w := range all {
		b := w.toAddr - w.toClaim
		trust := c.Trusted != nil && c.Trusted(w.node)
		if !c.lowerOnly && (trust || c.Trusted == nil) {
			b = max(b, w.toClaim-w.toAddr)
		}
		if b -= c.FloorSlack; b <= 0 {
			continue
		}
		bs = append(bs, b)
		if trust {
			trusted = max(trusted, b)
		}
	}
	return max(trusted, largestBut(bs, 1))
}

// largestBut returns the (k+1)th largest of bs; 0 when there are not so
// many.
func largestBut(bs []time.Duration, k int) time.Duration {
	if len(bs) <= k {
		return 0
	}
	s := slices.Clone(bs)
	slices.SortFunc(s, func(a, b time.Duration) int { return cmp.Compare(b, a) })
	return s[k]
}

// severalPlaces reports whether the witnesses put the address in several
// places: a refuting witness w (second bound) sees the claimant farther
// than Factor times its own RTT to the site plus both RTTs of another
// witness v, which is near both the site and the claimant. Agree such
// witnesses v must say so (or a trusted one), so that one lying witness,
// shortening its probe, cannot clear a claimant.
func (c ClaimCheck) severalPlaces(all, refuting []witness) bool {
	near := map[string]bool{}
	for _, w := range refuting {
		for _, v := range all {
			if v.node != w.node && w.toClaim > time.Duration(c.Factor*float64(w.toAddr+v.toAddr+v.toClaim))+c.Slack {
				if c.Trusted != nil && c.Trusted(v.node) {
					return true
				}
				near[v.node] = true
			}
		}
	}
	return len(near) >= c.Agree
}

// mayWitness reports whether n may be asked to witness: not seen, banned,
// asked or suspect.
func (r *run) mayWitness(c ClaimCheck, n string, seen map[string]bool) bool {
	return !seen[n] && !r.banned[n] && !r.floored[n] && !r.asked[n] && !c.suspect(n)
}

// cand is a candidate witness and its RTT to what it is ranked by.
type cand struct {
	node string
	rtt  time.Duration
}

// sortedNodes returns the nodes of cs, nearest first (ties by name).
func sortedNodes(cs []cand) []string {
	slices.SortFunc(cs, func(a, b cand) int { return cmp.Or(cmp.Compare(a.rtt, b.rtt), cmp.Compare(a.node, b.node)) })
	out := make([]string, len(cs))
	for i, x := range cs {
		out[i] = x.node
	}
	return out
}

// nearClaimant returns the nodes that may witness, nearest claimant by
// Measured first.
func (r *run) nearClaimant(c ClaimCheck, claimant string, seen map[string]bool) []string {
	var near []cand
	for _, n := range r.m.Table.Nodes() {
		if !r.mayWitness(c, n, seen) {
			continue
		}
		if m, found := c.Measured(n, claimant); found && m > 0 {
			near = append(near, cand{n, m})
		}
	}
	return sortedNodes(near)
}

// witnessCandidates returns the nodes a check may ask to witness: the
// trusted ones, and the others, the nearest to the claimant by Measured
// and the nearest to the subnet's neighbourhood by stored probes in turn,
// without repeats.
func (r *run) witnessCandidates(c ClaimCheck, claimant string, seen map[string]bool) (trusted, others []string) {
	ok := func(n string) bool { return r.mayWitness(c, n, seen) }
	// The neighbourhood: the stored probes of the ranges under S's
	// ancestors, from the nearest ancestor up, until one has some.
	var site []cand
	if idx, isIdx := r.m.Cache.(ProbeIndex); isIdx {
		t := r.m.Tree
		id, found := t.Find(r.subnet)
		for level := 0; found && id != None && level < 3 && len(site) == 0; level++ {
			id = t.Parent(id)
			if id == None {
				break
			}
			best := map[string]time.Duration{}
			for _, ps := range idx.Within(t.Range(id)) {
				for _, p := range ps {
					if p.RTT > 0 && p.RTT < Unreachable && ok(p.Node) {
						if b, had := best[p.Node]; !had || p.RTT < b {
							best[p.Node] = p.RTT
						}
					}
				}
			}
			for n, d := range best {
				site = append(site, cand{n, d})
			}
		}
	}
	a, b := r.nearClaimant(c, claimant, seen), sortedNodes(site)
	in := map[string]bool{}
	if c.Trusted != nil {
		for _, n := range r.m.Table.Nodes() {
			if ok(n) && c.Trusted(n) {
				if _, found := c.Measured(n, claimant); found {
					in[n] = true
					trusted = append(trusted, n)
				}
			}
		}
	}
	for i := 0; i < max(len(a), len(b)); i++ {
		for _, l := range [][]string{b, a} {
			if i < len(l) && !in[l[i]] {
				in[l[i]] = true
				others = append(others, l[i])
			}
		}
	}
	return trusted, others
}

// ClaimTally counts, per node, the claims checks rejected and passed, and
// bars a node for BarFor after its rejections reach Strikes: a barred node
// is not asked at all. A rejection needs Agree witnesses beyond the
// Factor, and no honest claim met that in micra bench liars, so Strikes
// defaults to 1; the bar's end bounds what a false rejection costs (a
// liar is barred again at its next lie). It keeps at most MaxNodes nodes
// (default 65536), forgetting those with fewer rejections first. The zero
// value is ready: Strikes 1, BarFor 24 h. Safe for concurrent use.
type ClaimTally struct {
	Strikes  int
	BarFor   time.Duration
	MaxNodes int
	Now      func() time.Time // nil: time.Now

	mu       sync.Mutex
	nodes    map[string]*tallyEntry
	rejected int64
}

type tallyEntry struct {
	rejected, passed int64
	last             time.Time // of the last rejection
}

func (t *ClaimTally) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

// barred reports whether e bars its node at now; t.mu is held.
func (t *ClaimTally) barred(e *tallyEntry, now time.Time) bool {
	return e.rejected >= int64(cmp.Or(t.Strikes, 1)) && now.Sub(e.last) < cmp.Or(t.BarFor, 24*time.Hour)
}

func (t *ClaimTally) entry(n string) *tallyEntry {
	if t.nodes == nil {
		t.nodes = map[string]*tallyEntry{}
	}
	e, ok := t.nodes[n]
	if !ok {
		if limit := cmp.Or(t.MaxNodes, 65536); len(t.nodes) >= limit {
			t.evict()
		}
		e = &tallyEntry{}
		t.nodes[n] = e
	}
	return e
}

// evict drops the half of the nodes with the fewest rejections.
func (t *ClaimTally) evict() {
	type kv struct {
		n string
		r int64
	}
	all := make([]kv, 0, len(t.nodes))
	for n, e := range t.nodes {
		all = append(all, kv{n, e.rejected})
	}
	slices.SortFunc(all, func(a, b kv) int { return cmp.Or(cmp.Compare(a.r, b.r), cmp.Compare(a.n, b.n)) })
	for _, x := range all[:len(all)/2+1] {
		delete(t.nodes, x.n)
	}
}

// record counts one check of node n's claim.
func (t *ClaimTally) record(n string, rejected bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entry(n)
	if rejected {
		e.rejected++
		e.last = t.now()
		t.rejected++
	} else {
		e.passed++
	}
}

// Barred reports whether n's claims failed often enough that it is not
// asked.
func (t *ClaimTally) Barred(n string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.nodes[n]
	return ok && t.barred(e, t.now())
}

// Counts returns n's rejected and passed claims.
func (t *ClaimTally) Counts(n string) (rejected, passed int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.nodes[n]; ok {
		return e.rejected, e.passed
	}
	return 0, 0
}

// Rejected returns the claims rejected so far.
func (t *ClaimTally) Rejected() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rejected
}

// BarredNodes returns the nodes the tally bars, sorted.
func (t *ClaimTally) BarredNodes() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	now := t.now()
	for n, e := range t.nodes {
		if t.barred(e, now) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}
