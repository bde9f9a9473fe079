package delegate_test

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/micra-net/micra/bootstrap"
	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/internal/evaluate"
	"github.com/micra-net/micra/internal/p2ptest"
	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/internal/world/worldtest"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/overlay/delegate"
	"github.com/micra-net/micra/overlay/overlaytest"
	"github.com/micra-net/micra/subnet"
)

// swarmNode is one volunteer of the test: a libp2p host bound to a world
// node's address, its overlay with the production Delegator, and a
// fetcher that probes (and fetches, for calibration) from that address.
type swarmNode struct {
	addr     netip.Addr
	o        *overlay.Overlay
	del      *delegate.Delegator
	fetch    *crawl.Fetcher
	capacity atomic.Uint64
	load     atomic.Uint64
}

// swarm is the world, its tree and the nodes.
type swarm struct {
	run    *world.Running
	w      *world.World
	tree   *subnet.Tree
	scale  float64
	nodes  []*swarmNode
	byPeer map[peer.ID]*swarmNode
	trace  *trace // MICRA_DEBUG only
	wraps  []*delegateWrapper
}

// trueRTT is the world's RTT from a node to a site, with the node's
// current extra RTT (SetExtraRTT) added.
func (s *swarm) trueRTT(n *swarmNode, site world.Site) time.Duration {
	return s.w.RTT(n.addr, site) + s.run.ExtraRTT(n.addr)
}

// optimal returns the lowest true RTT to site among the nodes.
func (s *swarm) optimal(site world.Site) time.Duration {
	best := subnet.Unreachable
	for _, n := range s.nodes {
		best = min(best, s.trueRTT(n, site))
	}
	return best
}

func (s *swarm) stats() delegate.Stats {
	var t delegate.Stats
	for _, n := range s.nodes {
		st := n.del.Stats()
		t.Decisions += st.Decisions
		t.Probes += st.Probes
		t.HandOffs += st.HandOffs
		t.SecondBest += st.SecondBest
		t.Reruns += st.Reruns
		t.Over += st.Over
	}
	return t
}

// startSwarm starts the world and one overlay node per world node, each
// with the production Delegator (threshold 50 ms; inter-node RTTs from the
// world's model, since libp2p's own loopback traffic does not see the
// world's latencies) and a prober timing HTTP HEADs from its address (the
// least of three, on fresh connections, turned back into unscaled RTTs;
// with MICRA_PROBES=model, the world's true mean RTT instead, which shows
// what the overlay itself adds to the search). Nodes join through node 0
// and claim their own subnets. With MICRA_DEBUG, every probe's samples and
// every decision are traced for the report of sub-optimal delegations.
func startSwarm(t *testing.T, p world.Params, scale float64) *swarm {
	t.Helper()
	run := worldtest.Start(t, p, world.TimeScale(scale))
	w := run.World()
	tree, err := w.Tree(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	s := &swarm{run: run, w: w, tree: tree, scale: scale, byPeer: map[peer.ID]*swarmNode{}}
	addrOf := func(p peer.ID) (netip.Addr, bool) {
		n, ok := s.byPeer[p]
		if !ok {
			return netip.Addr{}, false
		}
		return n.addr, true
	}
	between := func(a, b peer.ID) (time.Duration, bool) {
		x, ok1 := addrOf(a)
		y, ok2 := addrOf(b)
		if !ok1 || !ok2 {
			return 0, false
		}
		return w.RTTAddr(x, y) + run.ExtraRTT(x) + run.ExtraRTT(y), true
	}
	quiet := slog.New(slog.DiscardHandler)
	if os.Getenv("MICRA_DEBUG") != "" {
		s.trace = newTrace()
	}
	for _, wn := range w.Nodes() {
		n := &swarmNode{addr: wn.Addr}
		sk, _, err := crypto.GenerateEd25519Key(nil)
		if err != nil {
			t.Fatal(err)
		}
		// TCP only: on loopback QUIC dials leave from 127.0.0.1, not the
		// node's address, which own-subnet claims check.
		h, err := overlay.NewHost(sk, overlay.ListenAddrs(ma.StringCast("/ip4/"+wn.Addr.String()+"/tcp/0")),
			overlay.Reachability(network.ReachabilityPublic), overlay.NoRelayService(), overlay.ConnLimits(200, 400))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		resolver, err := run.Resolver(wn.Addr)
		if err != nil {
			t.Fatal(err)
		}
		n.fetch, err = crawl.NewFetcher(crawl.SourceAddr(wn.Addr), crawl.DNS(resolver), crawl.AllowPrivateNetworks(uint16(run.Port())),
			crawl.Timeouts(5*time.Second, 10*time.Second, 15*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.fetch.Close() })
		dlog := quiet
		if s.trace != nil {
			dlog = slog.New(s.trace.handler(wn.Addr))
		}
		n.del, err = delegate.New(delegate.Between(between), delegate.Logger(dlog))
		if err != nil {
			t.Fatal(err)
		}
		var del overlay.Delegator = n.del
		prober := overlay.ProberFunc(func(ctx context.Context, u string) (time.Duration, error) {
			d, err := n.fetch.Probe(ctx, u, crawl.DefaultProbeAttempts)
			return time.Duration(float64(d) / scale), err
		})
		if s.trace != nil {
			w := &delegateWrapper{inner: n.del, peers: map[subnet.ID][]peer.ID{}}
			s.wraps = append(s.wraps, w)
			del = w
			// crawl.Probe's least of three, one attempt at a time, so that
			// the samples are kept.
			prober = func(ctx context.Context, u string) (time.Duration, error) {
				start := time.Now()
				others := s.trace.start()
				var samples []time.Duration
				var first error
				failed := 0
				least := subnet.Unreachable
				for range crawl.DefaultProbeAttempts {
					d, err := n.fetch.Probe(ctx, u, 1)
					if err != nil {
						first = cmp.Or(first, err)
						failed++
						samples = append(samples, subnet.Unreachable)
						continue
					}
					d = time.Duration(float64(d) / scale)
					samples = append(samples, d)
					least = min(least, d)
				}
				var err error
				if failed >= crawl.DefaultProbeAttempts-crawl.DefaultProbeAttempts/2 {
					least, err = 0, first
				}
				s.trace.done(n.addr, u, probeRun{rtt: least, samples: samples, took: time.Since(start), concurrent: others, err: err})
				return least, err
			}
		}
		if os.Getenv("MICRA_PROBES") == "model" {
			prober = func(ctx context.Context, u string) (time.Duration, error) {
				pu, err := url.Parse(u)
				if err != nil {
					return 0, err
				}
				site, ok := w.Site(pu.Hostname())
				if !ok {
					return 0, fmt.Errorf("no site %s", pu.Hostname())
				}
				return s.trueRTT(n, site), nil
			}
		}
		opts := append(overlaytest.Options(),
			overlay.Announce(time.Second), overlay.OwnAddress(wn.Addr), overlay.WithDelegator(del),
			overlay.WithProber(prober), overlay.RedelegateInterval(0),
			overlay.WithLoad(func() (uint64, uint64) { return n.capacity.Load(), n.load.Load() }))
		n.o, err = overlay.New(h, tree, overlaytest.DB(t), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.o.Close() })
		s.nodes = append(s.nodes, n)
		s.byPeer[h.ID()] = n
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	boot := []peer.AddrInfo{{ID: s.nodes[0].o.Host().ID(), Addrs: s.nodes[0].o.Host().Addrs()}}
	for _, n := range s.nodes[1:] {
		if _, err := bootstrap.Join(ctx, n.o.Host(), n.o.Host().ID(), boot, bootstrap.Backoff(50*time.Millisecond, 200*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for _, n := range s.nodes {
		wg.Go(func() {
			if err := n.o.Bootstrap(ctx); err != nil {
				t.Errorf("bootstrap %s: %v", n.addr, err)
			}
		})
	}
	wg.Wait()
	// Every node is delegated its own subnet at once; where two nodes share
	// one, the first claimer holds it.
	for _, n := range s.nodes {
		own := tree.Range(tree.SmallestNonUnary(n.addr))
		p2ptest.WaitFor(t, 30*time.Second, func() error {
			for _, m := range s.nodes {
				if tree.Range(tree.SmallestNonUnary(m.addr)) != own {
					continue
				}
				for _, d := range m.o.Owned() {
					if d.Subnet == own && d.Own {
						return nil
					}
				}
			}
			return fmt.Errorf("no node holds %s, the own subnet of %s", own, n.addr)
		})
	}
	return s
}

// resolveAll checks that every site's subnet has exactly one node: three
// nodes, caches dropped, resolve it to the same node of the swarm. It
// returns the node per site.
func (s *swarm) resolveAll(t *testing.T, ctx context.Context, sites []world.Site) map[int]*swarmNode {
	t.Helper()
	out := map[int]*swarmNode{}
	for i, site := range sites {
		r := s.tree.Range(s.tree.SmallestNonUnary(site.Addrs[0]))
		var first peer.ID
		for k := range 3 {
			asker := s.nodes[(i+k)%len(s.nodes)]
			asker.o.Invalidate(r)
			d, ok, err := asker.o.Resolve(ctx, site.Addrs[0])
			if err != nil || !ok {
				t.Fatalf("%s resolves %s (%s): ok=%v, %v", asker.addr, site.Name, r, ok, err)
			}
			if k == 0 {
				first = d.Node
			}
			if d.Node != first {
				t.Fatalf("%s: %s resolves to %s at one node and %s at another", site.Name, r, first, d.Node)
			}
		}
		n, ok := s.byPeer[first]
		if !ok {
			t.Fatalf("%s delegated to %s, not a node of the swarm", site.Name, first)
		}
		out[site.ID] = n
	}
	return out
}

// modelResult is a delegation run's quality: the optimal fraction, the
// probes per new subnet and the mean excess RTT of the sub-optimal ones.
type modelResult struct {
	optimal, probesPerNew float64
	excess                time.Duration
}

// add returns r plus o/n: the mean of n results, summed.
func (r modelResult) add(o modelResult, n int) modelResult {
	return modelResult{r.optimal + o.optimal/float64(n), r.probesPerNew + o.probesPerNew/float64(n), r.excess + o.excess/time.Duration(n)}
}

func (r modelResult) String() string {
	return fmt.Sprintf("%.1f%% optimal, %.2f probes per new subnet, mean excess %v", 100*r.optimal, r.probesPerNew, r.excess.Round(100*time.Microsecond))
}

// modelRun delegates sites in order with the same search as the overlay
// (or brute force), from the same start (every node owning its own
// subnet), without the overlay: probes answered by probe, as micra bench
// delegation answers them. With the world's exact RTTs it is the reference
// for the overlay's figures; with its jitter, what a timed probe's
// measurement alone costs.
func modelRun(s *swarm, sites []world.Site, probe func(node netip.Addr, site world.Site) time.Duration, brute bool) modelResult {
	tab := subnet.NewMemTable()
	for _, n := range s.nodes {
		tab.AddNode(n.addr.String())
		tab.Set(s.tree.SmallestNonUnary(n.addr), n.addr.String())
	}
	bySite := map[netip.Addr]world.Site{}
	for _, site := range sites {
		bySite[site.Addrs[0]] = site
	}
	issued := 0
	prober := proberFunc(func(_ context.Context, node string, a netip.Addr) (time.Duration, error) {
		issued++
		return probe(netip.MustParseAddr(node), bySite[a]), nil
	})
	cfg := subnet.SearchConfig{Guided: true, Between: func(a, b string) (time.Duration, bool) {
		return s.w.RTTAddr(netip.MustParseAddr(a), netip.MustParseAddr(b)), true
	}}
	cfg.Nearest = subnet.NearestRTT(tab.Nodes(), cfg.Between) // the overlay's tolerance: the density rule
	var st subnet.Strategy = &subnet.IPMicra{Tree: s.tree, Table: tab, Prober: prober, Cache: &subnet.MemProbeCache{}, Config: cfg}
	if brute {
		st = &subnet.BruteForce{Tree: s.tree, Table: tab, Prober: prober, Cache: &subnet.MemProbeCache{}}
	}
	good, newSubnets := 0, 0
	var excess time.Duration
	for _, site := range sites {
		d, err := st.Delegate(context.Background(), site.Addrs[0])
		if err != nil {
			continue
		}
		if d.Step != subnet.StepOwned {
			tab.Set(d.Subnet, d.Node)
			newSubnets++
		}
		if x := s.w.RTT(netip.MustParseAddr(d.Node), site) - s.optimal(site); x <= 10*time.Microsecond {
			good++
		} else {
			excess += x
		}
	}
	r := modelResult{optimal: float64(good) / float64(len(sites)), probesPerNew: float64(issued) / float64(max(newSubnets, 1))}
	if bad := len(sites) - good; bad > 0 {
		r.excess = excess / time.Duration(bad)
	}
	return r
}

type proberFunc func(ctx context.Context, node string, a netip.Addr) (time.Duration, error)

func (f proberFunc) Probe(ctx context.Context, node string, a netip.Addr) (time.Duration, error) {
	return f(ctx, node, a)
}

// TestSwarmWorld runs the delegation procedure in the overlay on the
// emulated Internet: real libp2p hosts bound to the world's node
// addresses, real HTTP HEAD probes through the world. It checks that every
// site's subnet ends with exactly one node, reports how many delegations
// are optimal and the probes per new subnet beside the same search on the
// world's model (exact RTTs, and RTTs with the world's jitter as a probe
// samples it, with brute force on those samples beside), then changes the
// world: calibration moves a subnet whose node became slow, and load
// balancing keeps a full node from growing. MICRA_LONG=1 runs 12 nodes and
// 150 sites; MICRA_DEBUG=1 explains every sub-optimal delegation;
// MICRA_JITTER sets the world's jitter multiplier (default 1);
// MICRA_PROBES=model answers probes with the true RTTs.
func TestSwarmWorld(t *testing.T) {
	nNodes, nSites := 5, 40
	if os.Getenv("MICRA_LONG") != "" {
		nNodes, nSites = 12, 150
	}
	// At time scale 0.5 a scheduling delay of a few milliseconds on a
	// loaded machine shifts an unscaled probe by twice that, not five times.
	const scale = 0.5
	wp := worldtest.Params(11, nSites, nNodes)
	if j := os.Getenv("MICRA_JITTER"); j != "" {
		var err error
		if wp.Jitter, err = strconv.ParseFloat(j, 64); err != nil {
			t.Fatalf("MICRA_JITTER: %v", err)
		}
	}
	s := startSwarm(t, wp, scale)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()

	// Sites to delegate: one address each, no CDN (its probes reach the
	// nearest point of presence, not the delegated address), not in a
	// node's own subnet. The node optimal for most of them is the one
	// whose capacity runs out later: a few of its sites wait for phase 3.
	own := map[subnet.Range]bool{}
	for _, n := range s.nodes {
		own[s.tree.Range(s.tree.SmallestNonUnary(n.addr))] = true
	}
	var sites []world.Site
	for _, site := range s.w.Sites() {
		if site.Kind != world.CDNSite && !own[s.tree.Range(s.tree.SmallestNonUnary(site.Addrs[0]))] {
			sites = append(sites, site)
		}
	}
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(sites), func(i, j int) { sites[i], sites[j] = sites[j], sites[i] })
	bestOf := func(site world.Site) *swarmNode {
		var best *swarmNode
		for _, n := range s.nodes {
			if best == nil || s.trueRTT(n, site) < s.trueRTT(best, site) {
				best = n
			}
		}
		return best
	}
	count := map[*swarmNode]int{}
	for _, site := range sites {
		count[bestOf(site)]++
	}
	full := s.nodes[0]
	for _, n := range s.nodes {
		if count[n] > count[full] {
			full = n
		}
	}
	var phase1, phase3 []world.Site
	subnetCount := map[subnet.Range]int{}
	for _, site := range sites {
		subnetCount[s.tree.Range(s.tree.SmallestNonUnary(site.Addrs[0]))]++
	}
	for _, site := range sites {
		r := s.tree.Range(s.tree.SmallestNonUnary(site.Addrs[0]))
		if len(phase3) < 3 && bestOf(site) == full && subnetCount[r] == 1 && count[full] > 4 {
			phase3 = append(phase3, site)
			continue
		}
		phase1 = append(phase1, site)
	}

	// Phase 1: delegate, each site asked by another node in turn.
	before := s.stats()
	start := time.Now()
	seen := maps.Clone(own)
	newSubnets := 0
	for i, site := range phase1 {
		asker := s.nodes[i%len(s.nodes)]
		r := s.tree.Range(s.tree.SmallestNonUnary(site.Addrs[0]))
		if !seen[r] {
			seen[r] = true
			newSubnets++
		}
		if _, err := asker.o.Delegate(ctx, s.run.URL(site), site.Addrs[0]); err != nil {
			t.Fatalf("delegate %s from %s: %v", site.Name, asker.addr, err)
		}
	}
	took := time.Since(start)
	after := s.stats()
	got := s.resolveAll(t, ctx, phase1)
	good := 0
	var excess time.Duration
	for _, site := range phase1 {
		if d := s.trueRTT(got[site.ID], site) - s.optimal(site); d <= 10*time.Microsecond {
			good++
		} else {
			excess += d
			if s.trace != nil {
				r := s.tree.Range(s.tree.SmallestNonUnary(site.Addrs[0]))
				t.Logf("sub-optimal: %s (%s) to %s at %v, optimal %s at %v\n%s", site.Name, r,
					got[site.ID].addr, s.trueRTT(got[site.ID], site), bestOf(site).addr, s.optimal(site),
					s.explain(s.trace, s.wraps, r, s.run.URL(site), func(n *swarmNode) time.Duration { return s.trueRTT(n, site) }, got[site.ID], bestOf(site)))
			}
		}
	}
	optPct := 100 * float64(good) / float64(len(phase1))
	probes := float64(after.Probes-before.Probes) / float64(max(newSubnets, 1))
	meanExcess := time.Duration(0)
	if bad := len(phase1) - good; bad > 0 {
		meanExcess = excess / time.Duration(bad)
	}
	exact := modelRun(s, phase1, s.w.RTT, false)
	// With the world's jitter, over five draws of it.
	var noisy, ceiling modelResult
	lo, hi := 1.0, 0.0 // the guided search's optimal fraction, over the draws
	const draws = 5
	for seed := range uint64(draws) {
		jitter := evaluate.JitterProber{World: s.w, Seed: seed}
		sampled := func(n netip.Addr, site world.Site) time.Duration {
			d, _ := jitter.Probe(context.Background(), n, site)
			return d
		}
		r := modelRun(s, phase1, sampled, false)
		lo, hi = min(lo, r.optimal), max(hi, r.optimal)
		noisy = noisy.add(r, draws)
		ceiling = ceiling.add(modelRun(s, phase1, sampled, true), draws)
	}
	if s.trace != nil {
		t.Logf("probe errors against the true RTT:\n%s", s.trace.errors(func(node netip.Addr, u string) (time.Duration, bool) {
			pu, err := url.Parse(u)
			if err != nil {
				return 0, false
			}
			site, ok := s.w.Site(pu.Hostname())
			if !ok {
				return 0, false
			}
			return s.w.RTT(node, site), true
		}))
	}
	t.Logf("overlay: %d nodes, %d sites (%d new subnets) in %v: %.1f%% optimal, %.2f probes per new subnet, mean excess %v of the sub-optimal",
		len(s.nodes), len(phase1), newSubnets, took.Round(time.Millisecond), optPct, probes, meanExcess.Round(100*time.Microsecond))
	t.Logf("model (same world, nodes, order and search; probes: the true RTTs): %v", exact)
	t.Logf("model, probes the least of 3 samples of the world's jitter (mean of %d draws, optimal %.1f–%.1f%%): %v; brute force: %v",
		draws, 100*lo, 100*hi, noisy, ceiling)
	// Bounds, loose where timing enters. The model's run is a function of
	// the world, the nodes and the order, up to the random peer IDs, which
	// order candidates the stored probes do not (97–100 % optimal at 1.4–2.3
	// probes per new subnet with 5 nodes). The overlay's probes time real
	// requests, and on a loaded machine (the whole suite, -race) scheduling
	// delays become part of every RTT measured; with 5 nodes it is also
	// bimodal by the peer IDs (97 % or, when a node under the threshold is
	// asked first for a cluster, 17–64 %). The bounds catch a search that
	// stopped working: the overlay at least half a random node's share
	// optimal, and both well under brute force's one probe per node.
	maxProbes := 0.7 * float64(len(s.nodes))
	if exact.optimal < 0.9 || exact.probesPerNew > maxProbes {
		t.Errorf("the model's search: %.1f%% optimal at %.2f probes per new subnet; want ≥ 90%% at ≤ %.1f", 100*exact.optimal, exact.probesPerNew, maxProbes)
	}
	if floor := 50 / float64(len(s.nodes)); optPct < floor || probes > maxProbes {
		t.Errorf("the overlay's search: %.1f%% optimal at %.2f probes per new subnet; want ≥ %.0f%% at ≤ %.1f", optPct, probes, floor, maxProbes)
	}

	// Phase 2: calibration. A subnet delegated by search to a node, whose
	// access link then slows down: its crawler's fetches of a page get
	// slow, the calibrator signals, the node asks for a re-delegation, and
	// the coordinator moves the subnet with fresh probes.
	var victim world.Site
	var holder *swarmNode
	for _, site := range phase1 {
		n := got[site.ID]
		if site.Flaky || site.Hostile != world.NotHostile || site.Kind == world.CDNSite {
			continue
		}
		if n != s.nodes[0] { // node 0 holds the swarm together
			victim, holder = site, n
			break
		}
	}
	if holder == nil {
		t.Fatal("no subnet to calibrate")
	}
	cal, err := crawl.NewCalibrator(crawl.CalibrationConfig{})
	if err != nil {
		t.Fatal(err)
	}
	page, _ := url.Parse(s.run.URL(victim))
	fetch := func() (crawl.Slow, bool) {
		res, err := holder.fetch.Fetch(ctx, crawl.FetchRequest{URL: page})
		if err != nil {
			t.Fatalf("fetching %s from %s: %v", page, holder.addr, err)
		}
		return cal.Observe(page.String(), res.Timing.Remote.Addr(), res.Timing.RTT())
	}
	for range 3 {
		if _, slow := fetch(); slow {
			t.Fatal("calibration signalled before the world changed")
		}
	}
	s.run.SetExtraRTT(holder.addr, 500*time.Millisecond)
	var sig crawl.Slow
	for i := 0; ; i++ {
		var slow bool
		if sig, slow = fetch(); slow {
			break
		}
		if i == 5 {
			t.Fatal("calibration did not signal after the node's latency grew by 500 ms")
		}
	}
	r := s.tree.Range(s.tree.SmallestNonUnary(sig.Addr))
	moved, err := holder.o.Recalibrate(ctx, sig.Addr, fmt.Sprintf("calibration: %s took %v, was %v", sig.Page, sig.RTT, sig.Baseline))
	if err != nil {
		t.Fatalf("re-delegation: %v", err)
	}
	if moved.Node == holder.o.Host().ID() {
		t.Fatalf("calibration left %s with the slowed node %s", r, holder.addr)
	}
	newNode := s.byPeer[moved.Node]
	t.Logf("calibration: %s moved from %s (now %v) to %s (%v; optimal %v)", r, holder.addr,
		s.trueRTT(holder, victim), newNode.addr, s.trueRTT(newNode, victim), s.optimal(victim))
	s.run.SetExtraRTT(holder.addr, 0)

	// Phase 3: load balancing. The node nearest to the held-back sites
	// declares itself full; their subnets must not make it grow.
	if len(phase3) == 0 {
		t.Logf("load balancing: no held-back site (node %s is optimal for %d sites)", full.addr, count[full])
		return
	}
	countOn := func(n *swarmNode, sites []world.Site) int {
		c := 0
		for _, node := range s.resolveAll(t, ctx, sites) {
			if node == n {
				c++
			}
		}
		return c
	}
	all := append(slices.Clone(phase1), phase3...)
	heldBefore := countOn(full, phase1)
	full.capacity.Store(1000)
	full.load.Store(1000)
	p2ptest.WaitFor(t, 30*time.Second, func() error {
		for _, n := range s.nodes {
			if n == full {
				continue
			}
			if !slices.ContainsFunc(n.o.Peers(), func(pi overlay.PeerInfo) bool {
				return pi.ID == full.o.Host().ID() && pi.Capacity == 1000 && pi.Load == 1000
			}) {
				return fmt.Errorf("%s has not heard that %s is full", n.addr, full.addr)
			}
		}
		return nil
	})
	lbBefore := s.stats()
	for i, site := range phase3 {
		asker := s.nodes[(i+1)%len(s.nodes)]
		if _, err := asker.o.Delegate(ctx, s.run.URL(site), site.Addrs[0]); err != nil {
			t.Fatalf("delegate %s: %v", site.Name, err)
		}
	}
	lb := s.stats()
	heldAfter := countOn(full, all)
	t.Logf("load balancing: %s full; %d of its sites delegated: %d hand-offs, %d to the second-best, %d searched again, %d over capacity; it crawls %d → %d of the sites",
		full.addr, len(phase3), lb.HandOffs-lbBefore.HandOffs, lb.SecondBest-lbBefore.SecondBest, lb.Reruns-lbBefore.Reruns,
		lb.Over-lbBefore.Over, heldBefore, heldAfter)
	if heldAfter > heldBefore {
		t.Errorf("the full node went from %d to %d sites", heldBefore, heldAfter)
	}
	if moves := (lb.HandOffs + lb.SecondBest + lb.Reruns) - (lbBefore.HandOffs + lbBefore.SecondBest + lbBefore.Reruns); moves == 0 {
		t.Error("load balancing never acted for the full node's sites")
	}
	if lb.Over != lbBefore.Over {
		t.Error("a node was given a subnet beyond its capacity while others had room")
	}
}
