package scale

import (
	"fmt"
	"net/netip"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	"github.com/micra-net/micra/internal/evaluate"
	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/subnet"
)

// pickSites draws the sites delegated: todo, cfg.Subnets of distinct
// subnets, before the churn, and later, a tenth as many others, after
// it.
func (s *sim) pickSites() (todo, later []world.Site) {
	order := s.w.Sites()
	s.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	seen := map[subnet.ID]bool{}
	for _, site := range order {
		id := s.tree.SmallestNonUnary(site.Addrs[0])
		if id == subnet.None || seen[id] {
			continue
		}
		seen[id] = true
		switch {
		case len(todo) < s.cfg.Subnets:
			todo = append(todo, site)
		case len(later) < s.cfg.Subnets/10:
			later = append(later, site)
		}
	}
	return todo, later
}

// delegateAll delegates the subnet of each of ss, each asked by a random
// node of from, inFlight at once, and returns how many failed and the
// address of the node each was delegated to (invalid where it failed).
func (s *sim) delegateAll(ss []world.Site, from []*simNode) (failed int, chosen []netip.Addr) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	sem := make(chan struct{}, inFlight)
	chosen = make([]netip.Addr, len(ss))
	picks := make([]*simNode, len(ss))
	for i := range ss {
		picks[i] = from[s.rng.IntN(len(from))]
	}
	for i, site := range ss {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if s.stopped() {
				return
			}
			d, err := picks[i].o.Delegate(s.ctx, "http://"+site.Addrs[0].String()+"/", site.Addrs[0])
			if err != nil {
				mu.Lock()
				if failed++; failed <= 3 {
					s.logf("delegation of %s by %s failed: %v", site.Addrs[0], picks[i].addr, err)
				}
				mu.Unlock()
				return
			}
			if a, ok := s.byPeer.Load(d.Node); ok {
				chosen[i] = a.(netip.Addr)
			}
		})
	}
	wg.Wait()
	return failed, chosen
}

// quality sets res's optimal share and excess per URL of the delegations
// of todo to chosen (delegateAll's), by internal/evaluate's definitions
// (evaluate.Outcome.IsOptimal, evaluate.Summarise): each site's chosen
// node's RTT in the world's latency model (what its probes answer)
// against the lowest of the nodes', over the delegations that succeeded.
// Every node is live in the delegation phase (the churn comes after).
func (s *sim) quality(res *Result, todo []world.Site, chosen []netip.Addr) {
	out := make([]evaluate.Outcome, 0, len(todo))
	own, nodes := 0, live(s.nodes)
	var seen, peers, unknown, asNear int // decisions with their peers recorded (known), peers summed, and as logged below
	for i, site := range todo {
		if !chosen[i].IsValid() {
			continue
		}
		best := subnet.Unreachable
		for _, n := range nodes {
			best = min(best, s.w.RTT(n.addr, site))
		}
		id := s.tree.SmallestNonUnary(site.Addrs[0])
		isOwn := id == s.tree.SmallestNonUnary(chosen[i])
		if isOwn {
			own++
		}
		if kb, n, ok := s.known.get(site.Addrs[0]); ok {
			seen, peers = seen+1, peers+n
			if kb-best > 10*time.Microsecond {
				unknown++
			}
			if s.w.RTT(chosen[i], site) <= kb+10*time.Microsecond {
				asNear++
			}
		}
		out = append(out, evaluate.Outcome{Site: site.ID, Node: chosen[i], RTT: s.w.RTT(chosen[i], site), Optimal: best, New: !isOwn})
	}
	st := evaluate.Summarise(out)
	// The coordinators' neighbours (DelegationEnv.Peers) against the
	// nodes their searches chose (view.Nodes adds the nodes named in
	// stored probes).
	if seen > 0 {
		s.logf("coordinators' peers: %.0f per decision; %d of %d decisions had no node of the lowest RTT among them; %d chose a node at least as near as their peers' nearest",
			float64(peers)/float64(seen), unknown, seen, asNear)
	}
	res.OptimalPct, res.ExcessPerURLMS = st.OptimalPct, st.ExcessPerURLMS
	var near, far int // sub-optimal ones within 5 ms of the best, and beyond 20 ms
	for _, o := range out {
		switch d := o.RTT - o.Optimal; {
		case o.IsOptimal():
		case d <= 5*time.Millisecond:
			near++
		case d > 20*time.Millisecond:
			far++
		}
	}
	s.logf("delegation quality: %.1f %% of %d optimal, %d sub-optimal (%d within 5 ms of the best, %d beyond 20 ms; %.2f ms excess each), %.2f ms excess per URL; %d in a node's own subnet",
		st.OptimalPct, st.URLs, st.Suboptimal, near, far, st.ExcessMS, st.ExcessPerURLMS, own)
}

// drain waits until the coordinators' notice queues are empty, at most
// drainLimit, and then settle; false when the run was stopped.
func (s *sim) drain() bool {
	answered := time.Now()
	for time.Since(answered) < drainLimit {
		var queued int64
		for _, n := range s.nodes {
			queued += n.o.Stats().Notices
		}
		if queued == 0 {
			break
		}
		if s.wait(10 * time.Second) {
			return false
		}
	}
	s.logf("notices sent %.0f s after the last answer", time.Since(answered).Seconds())
	return !s.wait(settle)
}

// tolerances describes the guided search's density rule as the
// coordinators last measured it: the nearest RTT and the tolerance, least
// and greatest over the coordinators that searched.
func (s *sim) tolerances() string {
	var near, tol []time.Duration
	for _, d := range s.dels {
		if st := d.Stats(); st.Nearest > 0 {
			near, tol = append(near, st.Nearest), append(tol, st.Tolerance)
		}
	}
	if len(near) == 0 {
		return "no density measured"
	}
	return fmt.Sprintf("density: nearest RTT %v–%v, tolerance %v–%v", slices.Min(near).Round(time.Millisecond/10), slices.Max(near).Round(time.Millisecond/10), slices.Min(tol).Round(time.Millisecond/10), slices.Max(tol).Round(time.Millisecond/10))
}

// delegations delegates todo, each asked by a random node, measures the
// upkeep of the network holding them, and sets res's figures per
// delegation: the phase's traffic less the upkeep, the mean of idle's
// rate before it and the held rate after it.
func (s *sim) delegations(res *Result, todo []world.Site, idle rate) error {
	cfg, nodes := s.cfg, s.nodes
	b0, m0, p0, d0, k0 := s.bytesNow(), counters(nodes), s.probesNow(), time.Now(), kinds(nodes)
	dec0, asked0 := s.searches()
	failed, chosen := s.delegateAll(todo, nodes)
	if s.stopped() {
		return ErrStopped
	}
	dec, asked := s.searches()
	s.logf("coordinators: %d searches, %d probes asked for (witnesses' included), %d answered; %s", dec-dec0, asked-asked0, s.probesNow()-p0, s.tolerances())
	s.quality(res, todo, chosen)
	// What decisions set off after their answer (notices, index updates,
	// organisation records put after coalescing, replica pushes) counts
	// too: the phase ends when the coordinators' notice queues are empty
	// (each sends its notices one at a time, and thousands of decisions
	// queue thousands of index updates), and a while after.
	if !s.drain() {
		return ErrStopped
	}
	span := time.Since(d0).Hours()
	s.logf("delegation messages by kind, per delegation (idle upkeep included):%s", perKind(k0, kinds(nodes), float64(len(todo))))
	res.Delegations, res.Failed = len(todo)-failed, failed
	if res.Delegations == 0 {
		return fmt.Errorf("scale: no delegation succeeded of %d", len(todo))
	}
	phaseBytes, phaseMsgs, phaseProbes := float64(s.bytesNow()-b0), float64(counters(nodes)-m0), s.probesNow()-p0
	// The upkeep during the phase grows with what it delegated, from the
	// idle rate before it to the rate of the network holding it all
	// (measured next); delegations arrive evenly, so the phase's upkeep is
	// the mean of the two rates over its span.
	held, ok := s.measureIdle("idle, holding the delegations")
	if !ok {
		return ErrStopped
	}
	res.IdleHeldBytesPerHour = held.bytes / float64(cfg.Nodes)
	if cfg.HeapProfile != nil {
		runtime.GC()
		if err := pprof.Lookup("heap").WriteTo(cfg.HeapProfile, 0); err != nil {
			return fmt.Errorf("scale: heap profile: %w", err)
		}
	}
	nd := float64(res.Delegations)
	res.BytesPerDelegation = (phaseBytes - (idle.bytes+held.bytes)/2*span) / nd
	res.MessagesPerDelegation = (phaseMsgs - (idle.msgs+held.msgs)/2*span) / nd
	res.ProbesPerDelegation = float64(phaseProbes) / nd
	s.logf("%d delegations (%d failed) in %.0f s: %.1f messages, %.0f bytes, %.2f probes each (%.1f messages, %.0f bytes with the upkeep of what they delegated)",
		res.Delegations, failed, span*3600, res.MessagesPerDelegation, res.BytesPerDelegation, res.ProbesPerDelegation,
		(phaseMsgs-idle.msgs*span)/nd, (phaseBytes-idle.bytes*span)/nd)
	return nil
}

// searches returns the searches the coordinators ran and the probes they
// asked for so far (a probe refused or timed out is asked for, not
// answered).
func (s *sim) searches() (decisions, probes int64) {
	for _, d := range s.dels {
		st := d.Stats()
		decisions, probes = decisions+st.Decisions, probes+st.Probes
	}
	return decisions, probes
}

// hops resolves a sample of todo's subnets that miss every cache, one at
// a time, from random nodes, and sets res's hop percentiles. A resolve's
// hops are the RESOLVE requests and DHT queries for shard keys its node
// sent (not its routing table's refresh, which may run in that moment,
// nor its heartbeats, which a node holding a hundred subnets sends
// several of a second).
func (s *sim) hops(res *Result, todo []world.Site) error {
	const resolveKind = "micra/RESOLVE"
	var hops []float64
	var long, longLookups, longRedirects int // resolves of more than 6 hops, and of them those with a lookup, a redirect
	for range min(hopSample, len(todo)) {
		if s.stopped() {
			return ErrStopped
		}
		n := s.nodes[s.rng.IntN(len(s.nodes))]
		site := todo[s.rng.IntN(len(todo))]
		n.o.Invalidate(s.tree.Range(s.tree.SmallestNonUnary(site.Addrs[0])))
		id := n.o.Host().ID()
		st0 := n.o.Stats()
		q0, r0 := s.sent(id), st0.Kinds[resolveKind]
		if _, _, err := n.o.Resolve(s.ctx, site.Addrs[0]); err == nil {
			st := n.o.Stats()
			h := float64(s.sent(id) - q0 + st.Kinds[resolveKind] - r0)
			hops = append(hops, h)
			if h > 6 {
				long++
				if st.Lookups > st0.Lookups {
					longLookups++
				}
				if st.Redirects > st0.Redirects {
					longRedirects++
				}
			}
		}
	}
	s.logf("hops: %d of %d resolves took more than 6, %d of them with a DHT lookup of the shard key, %d with a redirect", long, len(hops), longLookups, longRedirects)
	slices.Sort(hops)
	if len(hops) > 0 {
		res.HopsP50, res.HopsP90 = hops[len(hops)/2], hops[len(hops)*9/10]
	}
	return nil
}
