package evaluate

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/subnet"
)

// Strategy names, as accepted by Config.Strategies.
const (
	IPMicra   = "ipmicra"  // the paper's search (subnet.IPMicra)
	HiMicra   = "himicra"  // crawler hierarchy and best-first search (thesis ch. 6)
	Brute     = "brute"    // every node probes every new subnet (thesis 5.3)
	Random    = "random"   // location-unaware, as UCYMicra (thesis 5.2.2)
	OracleStr = "oracle"   // true RTTs, no probes
	Guided    = "ipmicra+" // IPMicra guided by neighbouring subnets' stored probes (subnet.SearchConfig.Guided)
)

// AllStrategies lists every strategy in report order.
var AllStrategies = []string{IPMicra, Guided, HiMicra, Brute, Random, OracleStr}

// Config describes an evaluation.
type Config struct {
	Seeds         []int64         // one repetition per seed: node subsets and site orders differ
	Nodes         []int           // node counts to evaluate, each ≤ the world's nodes
	Thresholds    []time.Duration // probing thresholds
	Strategies    []string        // strategies to evaluate (AllStrategies when empty)
	TrainFraction float64         // of sites delegated optimally before the split experiment (0.65)
	HiMicraSample int             // sites every node probes to build HiMicra's hierarchy (100)
	Branching     int             // HiMicra's branching factor (2, as in the thesis)
	Progressive   int             // sites in the progressive-learning run (1000; 0 skips it)
	// Split delegates parts of registry ranges apart (subnet.DelegatePart):
	// a site whose range's holder measures it more than Split slower than
	// the address the range was decided for (the crawl's own timings) has
	// the part holding it searched apart, by the strategies that can (the
	// paper's search, the guided search, brute force, oracle). 0 keeps
	// whole ranges, as the paper did.
	Split time.Duration
	// Map gives the guided search the latency map of the world's latency
	// data (subnet.SearchConfig.Places, world.LatencyMap): nodes know
	// their own locations and the public RTT matrix, and estimate their
	// access delays from the RTTs between them.
	Map bool
	// MapError, with Map, is the map's error: every RTT of the map is
	// multiplied by e^x, x drawn from N(0, MapError²) once per map. The
	// map of a world's own latency data is exact but for the sites' last
	// miles; the real Internet is not the matrix, and this measures how
	// much the search relies on the map being right.
	MapError float64
	// MeasuredMap, with Map, makes the map of nothing but the RTTs the
	// nodes measure between themselves (subnet.NodeMap: every node a
	// place), as a running network can: no locations, no public matrix.
	MeasuredMap bool
	// RTTNoise and RTTJitter are the noise of the inter-node RTTs the
	// guided search sees (its triangle bounds, the homes' profiles, the
	// measured map): each pair's RTT is multiplied by e^x, x drawn from
	// N(0, RTTNoise²), and |N(0, RTTJitter²)| is added, once per pair and
	// run. Zero: the world's exact RTTs.
	RTTNoise  float64
	RTTJitter time.Duration
	// RTTKnown is the share of the inter-node pairs the search knows at
	// all, drawn once per pair; the others are unknown to it, as pairs
	// nobody measured or announced are to a running coordinator. Zero
	// or one: every pair.
	RTTKnown float64
	// Tolerance is the guided search's (subnet.SearchConfig.Tolerance):
	// how much better than the best answer a node must be able to be to
	// be asked. Zero: a fifth of the threshold, or with Density the
	// density rule's.
	Tolerance time.Duration
	// Density has the guided search's tolerance follow how densely the
	// nodes cover their places (subnet.SearchConfig.Nearest), as the
	// nodes measure it (with RTTNoise and RTTJitter).
	Density bool
}

// DefaultConfig returns the paper's setup: 6 and 12 nodes (and 25, 50 for
// scaling), thresholds 25, 50, 75 and 100 ms, five seeds.
func DefaultConfig() Config {
	return Config{
		Seeds:         []int64{1, 2, 3, 4, 5},
		Nodes:         []int{6, 12, 25, 50},
		Thresholds:    []time.Duration{25 * time.Millisecond, 50 * time.Millisecond, 75 * time.Millisecond, 100 * time.Millisecond},
		Strategies:    AllStrategies,
		TrainFraction: 0.65,
		HiMicraSample: 100,
		Branching:     2,
		Progressive:   1000,
		Split:         10 * time.Millisecond,
	}
}

// World is what an evaluation runs on: sites, nodes and the true RTTs
// between them. A generated emulated Internet (*world.World) and a
// real-geo world (*world.Geo: real addresses at their real places, in the
// real hierarchy) implement it.
type World interface {
	Sites() []world.Site
	Nodes() []world.Node
	// RTT returns the true mean RTT from a node's address to a site.
	RTT(from netip.Addr, s world.Site) time.Duration
	// RTTAddr returns the true mean RTT between two nodes' addresses.
	RTTAddr(a, b netip.Addr) time.Duration
	// SampleRTT returns one RTT sample from a node's address to a site:
	// the mean plus z standard deviations of the pair's jitter.
	SampleRTT(from netip.Addr, s world.Site, z float64) time.Duration
	// Locations and LocRTT are the latency data: for the latency map.
	world.LocRTTer
}

var (
	_ World = (*world.World)(nil)
	_ World = (*world.Geo)(nil)
)

// Prober answers probes for an evaluation: the RTT from a node address to
// a site, unscaled.
type Prober interface {
	Probe(ctx context.Context, node netip.Addr, site world.Site) (time.Duration, error)
}

// ModelProber answers probes from the world's latency model: the true mean
// RTT, as a perfect probe would measure it.
type ModelProber struct{ World World }

// Probe implements Prober.
func (m ModelProber) Probe(_ context.Context, node netip.Addr, site world.Site) (time.Duration, error) {
	return m.World.RTT(node, site), nil
}

// JitterProber answers probes as micra's timed probe (crawl's
// Fetcher.Probe) measures them on the emulated Internet: the least of
// Attempts round-trip times (0 means 3, crawl.DefaultProbeAttempts; at
// most 9), each a sample of the world's per-request jitter around the true
// mean (World.SampleRTT). It leaves out what the machine adds to a real
// probe, delays that only lengthen a sample and that the least of three
// mostly removes (README, "Delegation in the overlay"). A probe's samples
// are a function of Seed, the node and the site, so every strategy of a
// run sees the same measurement of a pair, and a run is reproducible.
type JitterProber struct {
	World    World
	Attempts int
	Seed     uint64
}

// Probe implements Prober.
func (j JitterProber) Probe(_ context.Context, node netip.Addr, site world.Site) (time.Duration, error) {
	h := fnv.New64a()
	h.Write(node.AsSlice())
	rng := rand.New(rand.NewPCG(j.Seed^h.Sum64(), uint64(site.ID)))
	n := j.Attempts
	if n <= 0 {
		n = 3
	}
	least := subnet.Unreachable
	for range min(n, 9) {
		least = min(least, j.World.SampleRTT(node, site, rng.NormFloat64()))
	}
	return least, nil
}

// Outcome is one site delegated by one strategy.
type Outcome struct {
	Site    int           // world site ID
	Node    netip.Addr    // delegated node
	RTT     time.Duration // true RTT of the delegated node
	Optimal time.Duration // true RTT of the best node
	Probes  int           // probe requests issued
	New     bool          // the site's subnet was not delegated before, or a part of it was searched apart
	Split   bool          // a part of the site's delegated range was searched apart (Config.Split)
	Step    subnet.Step
}

// IsOptimal reports whether the delegated node is (one of) the nearest.
func (o Outcome) IsOptimal() bool { return o.RTT <= o.Optimal+10*time.Microsecond }

// env is one run's setting: a world, its tree, a node subset and the
// delegation table, with node names being their addresses.
type env struct {
	w       World
	tree    *subnet.Tree
	nodes   []netip.Addr
	names   []string
	table   *subnet.MemTable
	cache   *subnet.MemProbeCache
	prober  Prober
	byAddr  map[netip.Addr]world.Site
	issued  int                         // probes issued through probeAdapter
	split   time.Duration               // Config.Split; 0: no parts delegated apart
	useMap  bool                        // Config.Map
	mapErr  float64                     // Config.MapError
	nodeMap bool                        // Config.MeasuredMap
	noise   float64                     // Config.RTTNoise
	jitter  time.Duration               // Config.RTTJitter
	known   float64                     // Config.RTTKnown
	tol     time.Duration               // Config.Tolerance
	density bool                        // Config.Density
	seen    map[[2]string]time.Duration // the noisy inter-node RTTs drawn so far
	places  []subnet.MapPlace
	optimal map[int]time.Duration
}

func newEnv(w World, tree *subnet.Tree, nodes []netip.Addr, p Prober) (*env, error) {
	e := &env{w: w, tree: tree, nodes: nodes, prober: p, table: subnet.NewMemTable(), cache: &subnet.MemProbeCache{Tree: tree},
		byAddr: map[netip.Addr]world.Site{}, optimal: map[int]time.Duration{}}
	for _, s := range w.Sites() {
		for _, a := range s.Addrs {
			if _, ok := e.byAddr[a]; !ok {
				e.byAddr[a] = s
			}
		}
	}
	for _, n := range nodes {
		e.names = append(e.names, n.String())
		e.table.AddNode(n.String())
		// A node joining is delegated its own subnet at once.
		id := tree.SmallestNonUnary(n)
		if id == subnet.None || tree.Parent(id) == subnet.None {
			return nil, fmt.Errorf("node %s has no subnet in the world's hierarchy", n)
		}
		if _, owned := first(e.table.Owned(id, id)); !owned {
			e.table.SetAt(id, n.String(), n)
		}
	}
	return e, nil
}

// configure takes the searches' settings from cfg.
func (e *env) configure(cfg Config) {
	e.split, e.useMap, e.mapErr = cfg.Split, cfg.Map, cfg.MapError
	e.nodeMap, e.noise, e.jitter, e.known, e.tol, e.density = cfg.MeasuredMap, cfg.RTTNoise, cfg.RTTJitter, cfg.RTTKnown, cfg.Tolerance, cfg.Density
}

func first(seq func(func(subnet.ID, string) bool)) (string, bool) {
	for _, n := range seq {
		return n, true
	}
	return "", false
}

// Probe implements subnet.Prober for the strategies.
func (e *env) Probe(ctx context.Context, node string, addr netip.Addr) (time.Duration, error) {
	n, err := netip.ParseAddr(node)
	if err != nil {
		return 0, err
	}
	s, ok := e.byAddr[addr]
	if !ok {
		return 0, fmt.Errorf("no site at %s", addr)
	}
	e.issued++
	return e.prober.Probe(ctx, n, s)
}

// latencyMap returns the latency map of the env's nodes (Config.Map),
// built on first use.
func (e *env) latencyMap() []subnet.MapPlace {
	if e.places == nil {
		at := map[netip.Addr]world.Location{}
		for _, n := range e.w.Nodes() {
			at[n.Addr] = n.Loc
		}
		locs := make([]world.Location, len(e.nodes))
		for i, n := range e.nodes {
			locs[i] = at[n]
		}
		if e.nodeMap {
			e.places = subnet.NodeMap(e.names, e.measured, e.country)
		} else {
			e.places = world.LatencyMap(e.w, e.names, locs, e.measured)
		}
		if e.mapErr > 0 {
			rng := rand.New(rand.NewPCG(uint64(len(e.names)), uint64(len(e.places))))
			for _, p := range e.places {
				for _, n := range e.names { // in order: the same draws every run
					if d, ok := p.RTT[n]; ok {
						p.RTT[n] = time.Duration(float64(d) * math.Exp(e.mapErr*rng.NormFloat64()))
					}
				}
			}
		}
	}
	return e.places
}

// between returns the RTT between two nodes, as the overlay measures it
// between peers (here: the world's model).
func (e *env) between(a, b string) (time.Duration, bool) {
	x, err1 := netip.ParseAddr(a)
	y, err2 := netip.ParseAddr(b)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return e.w.RTTAddr(x, y), true
}

// measured returns the RTT between nodes a and b as the nodes measured it:
// the world's, with the noise of Config.RTTNoise and RTTJitter drawn once
// per pair; false for the pairs Config.RTTKnown leaves unknown.
func (e *env) measured(a, b string) (time.Duration, bool) {
	d, ok := e.between(a, b)
	if !ok || a == b || (e.noise == 0 && e.jitter == 0 && (e.known == 0 || e.known == 1)) {
		return d, ok
	}
	k := [2]string{min(a, b), max(a, b)}
	h := fnv.New64a()
	h.Write([]byte(k[0] + " " + k[1]))
	if e.known > 0 && e.known < 1 && float64(h.Sum64()>>11)/(1<<53) >= e.known {
		return 0, false
	}
	if e.noise == 0 && e.jitter == 0 {
		return d, true
	}
	if m, ok := e.seen[k]; ok {
		return m, true
	}
	rng := rand.New(rand.NewPCG(h.Sum64(), uint64(len(e.names))))
	m := time.Duration(float64(d)*math.Exp(e.noise*rng.NormFloat64())) + time.Duration(math.Abs(rng.NormFloat64())*float64(e.jitter))
	if e.seen == nil {
		e.seen = map[[2]string]time.Duration{}
	}
	e.seen[k] = m
	return m, true
}

// home returns the range of a node's own subnet, delegated to it when it
// joined.
func (e *env) home(node string) (subnet.Range, bool) {
	n, err := netip.ParseAddr(node)
	if err != nil {
		return subnet.Range{}, false
	}
	id := e.tree.SmallestNonUnary(n)
	if id == subnet.None {
		return subnet.Range{}, false
	}
	return e.tree.Range(id), true
}

// country returns the registry country of a node's own subnet.
func (e *env) country(node string) string {
	n, err := netip.ParseAddr(node)
	if err != nil {
		return ""
	}
	return e.tree.Country(e.tree.SmallestNonUnary(n))
}

// rttTo returns the model's RTT from node to address a: a site's, or
// another node's.
func (e *env) rttTo(node string, a netip.Addr) time.Duration {
	if s, ok := e.byAddr[a]; ok {
		return e.trueRTT(node, s)
	}
	n, _ := netip.ParseAddr(node)
	return e.w.RTTAddr(n, a)
}

// trueRTT returns the model's RTT from node to s.
func (e *env) trueRTT(node string, s world.Site) time.Duration {
	n, _ := netip.ParseAddr(node)
	return e.w.RTT(n, s)
}

// optimalRTT returns the lowest true RTT from the run's nodes to s.
func (e *env) optimalRTT(s world.Site) time.Duration {
	if d, ok := e.optimal[s.ID]; ok {
		return d
	}
	d := subnet.Unreachable
	for _, n := range e.nodes {
		d = min(d, e.w.RTT(n, s))
	}
	e.optimal[s.ID] = d
	return d
}

// strategy builds the named strategy over the env.
func (e *env) strategy(ctx context.Context, name string, th time.Duration, rng *rand.Rand, sample []world.Site, branching int) (subnet.Strategy, int, error) {
	switch name {
	case IPMicra:
		return &subnet.IPMicra{Tree: e.tree, Table: e.table, Prober: e, Cache: e.cache, Config: subnet.SearchConfig{Threshold: th}}, 0, nil
	case Guided:
		cfg := subnet.SearchConfig{Threshold: th, Guided: true, Between: e.measured, Home: e.home, Tolerance: e.tol}
		if e.density {
			cfg.Nearest = subnet.NearestRTT(e.names, e.measured)
		}
		if e.useMap {
			cfg.Places = e.latencyMap()
		}
		return &subnet.IPMicra{Tree: e.tree, Table: e.table, Prober: e, Cache: e.cache, Config: cfg}, 0, nil
	case Brute:
		return &subnet.BruteForce{Tree: e.tree, Table: e.table, Prober: e, Cache: e.cache}, 0, nil
	case Random:
		return &subnet.Random{Tree: e.tree, Table: e.table, Rand: rng}, 0, nil
	case OracleStr:
		return &subnet.Oracle{Tree: e.tree, Table: e.table, RTT: func(node string, a netip.Addr) time.Duration {
			return e.trueRTT(node, e.byAddr[a])
		}}, 0, nil
	case HiMicra:
		// Every node probes the sample sites; these setup probes are
		// reported apart from the delegation probes, as in thesis 8.5.
		rtt := make([][]time.Duration, len(e.nodes))
		for i, n := range e.nodes {
			for _, s := range sample {
				d, err := e.prober.Probe(ctx, n, s)
				if err != nil {
					d = subnet.Unreachable
				}
				rtt[i] = append(rtt[i], d)
			}
		}
		h, err := subnet.BuildHiMicra(e.names, rtt, branching)
		if err != nil {
			return nil, 0, err
		}
		return &subnet.HiMicra{Tree: e.tree, Table: e.table, Prober: e, Cache: e.cache, Hierarchy: h, Threshold: th}, len(e.nodes) * len(sample), nil
	}
	return nil, 0, fmt.Errorf("unknown strategy %q", name)
}

// delegate runs one strategy on site s and records the decision. With
// splitting on (env.split), a site in a delegated range that its holder
// measures more than split slower than its stored probe of the range (the
// crawl's timing: no probe is counted) has the part holding it searched
// apart (subnet.DelegatePart), by the strategies that can.
func (e *env) delegate(ctx context.Context, st subnet.Strategy, s world.Site) (Outcome, error) {
	before := e.issued
	a := s.Addrs[0]
	d, err := st.Delegate(ctx, a)
	if err != nil {
		return Outcome{}, fmt.Errorf("site %s: %w", s.Name, err)
	}
	switch ps, ok := st.(subnet.PartStrategy); {
	case d.Step != subnet.StepOwned:
		e.table.SetAt(d.Subnet, d.Node, a)
	case ok && e.split > 0:
		h, _ := subnet.Holder(e.tree, e.table, a)
		observed := e.trueRTT(h.Node, s)
		if !h.Addr.IsValid() || observed <= e.rttTo(h.Node, h.Addr)+e.split {
			break
		}
		part, ok := subnet.SplitRange(h, a)
		if !ok {
			break
		}
		if d, err = ps.DelegatePart(ctx, a, part, h.Node, observed); err != nil {
			return Outcome{}, fmt.Errorf("site %s, part %s: %w", s.Name, part, err)
		}
		e.table.SetPart(d.Subnet, subnet.Part{Range: part, Node: d.Node, Addr: a})
	}
	n, _ := netip.ParseAddr(d.Node)
	return Outcome{
		Site: s.ID, Node: n, RTT: e.trueRTT(d.Node, s), Optimal: e.optimalRTT(s),
		Probes: e.issued - before, New: d.Step != subnet.StepOwned, Split: d.Part.Start.IsValid() && d.Step != subnet.StepOwned, Step: d.Step,
	}, nil
}

// train records the optimal delegation of s and keeps every node's probe
// of it, as the training of the split experiment did (thesis 8.6 steps
// 2-4: subset A was probed by all crawlers and delegated by the probes).
// With splitting on, a site in a delegated range whose holder is more than
// split slower than the best node has its part delegated apart to it. Its
// probes are not counted.
func (e *env) train(ctx context.Context, s world.Site) error {
	a := s.Addrs[0]
	id := e.tree.SmallestNonUnary(a)
	r := e.tree.Range(id)
	h, owned := subnet.Holder(e.tree, e.table, a)
	if owned {
		if e.split <= 0 {
			return nil
		}
		var ok bool
		if r, ok = subnet.SplitRange(h, a); !ok {
			return nil
		}
	}
	best, bestRTT := "", subnet.Unreachable
	var holderRTT time.Duration
	for i, n := range e.nodes {
		rtt, err := e.prober.Probe(ctx, n, s)
		if err != nil {
			rtt = subnet.Unreachable
		}
		e.cache.Put(e.names[i], r, rtt)
		if rtt < bestRTT {
			best, bestRTT = e.names[i], rtt
		}
		if owned && e.names[i] == h.Node {
			holderRTT = rtt
		}
	}
	switch {
	case best == "":
	case !owned:
		e.table.SetAt(id, best, a)
	case holderRTT > bestRTT+e.split:
		e.table.SetPart(id, subnet.Part{Range: r, Node: best, Addr: a})
	}
	return nil
}

// Stats summarises outcomes.
type Stats struct {
	URLs         int     `json:"delegated"`
	New          int     `json:"new_subnets"`
	OptimalPct   float64 `json:"optimal_pct"`
	ProbesPerURL float64 `json:"probes_per_url"`
	ProbesPerNew float64 `json:"probes_per_new_subnet"`
	ExcessMS     float64 `json:"excess_ms"` // mean over the sub-optimal ones; 0 when none
	// ExcessPerURLMS is the mean excess RTT over every delegated URL, 0
	// for the optimal ones: what a user loses on average.
	ExcessPerURLMS float64 `json:"excess_per_url_ms"`
	Suboptimal     int     `json:"suboptimal"`
	Splits         int     `json:"splits"` // parts of delegated ranges searched apart (Config.Split), counted in New
	MeanRTTMS      float64 `json:"mean_rtt_ms"`
}

// Summarise computes the metrics of outcomes.
func Summarise(out []Outcome) Stats {
	var s Stats
	var excess, rtt float64
	subopt, probes := 0, 0
	for _, o := range out {
		s.URLs++
		probes += o.Probes
		rtt += ms(o.RTT)
		if o.New {
			s.New++
		}
		if o.Split {
			s.Splits++
		}
		if o.IsOptimal() {
			s.OptimalPct++
		} else {
			subopt++
			excess += ms(o.RTT - o.Optimal)
		}
	}
	if s.URLs == 0 {
		return s
	}
	s.OptimalPct = 100 * s.OptimalPct / float64(s.URLs)
	s.ProbesPerURL = float64(probes) / float64(s.URLs)
	if s.New > 0 {
		s.ProbesPerNew = float64(probes) / float64(s.New)
	}
	if subopt > 0 {
		s.ExcessMS = excess / float64(subopt)
	}
	s.Suboptimal = subopt
	s.ExcessPerURLMS = excess / float64(s.URLs)
	s.MeanRTTMS = rtt / float64(s.URLs)
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pickNodes returns k node addresses of the world, a different subset per
// seed, spread over distinct locations when the world has enough.
func pickNodes(w World, k int, rng *rand.Rand) ([]netip.Addr, error) {
	all := w.Nodes()
	if k > len(all) {
		return nil, fmt.Errorf("%d nodes asked, the world has %d", k, len(all))
	}
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	// Prefer one node per city, as the paper's crawlers were spread over
	// the Internet; fill up with the rest.
	seen := map[int]bool{}
	var out, rest []netip.Addr
	for _, n := range all {
		if !seen[n.Loc.ID] && len(out) < k {
			seen[n.Loc.ID] = true
			out = append(out, n.Addr)
		} else {
			rest = append(rest, n.Addr)
		}
	}
	for _, n := range rest {
		if len(out) == k {
			break
		}
		out = append(out, n)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

// evalSites returns the sites that take part: every site but the hostile
// ones, which serve no real pages.
func evalSites(w World) []world.Site {
	var out []world.Site
	for _, s := range w.Sites() {
		if s.Hostile == world.NotHostile && len(s.Addrs) > 0 {
			out = append(out, s)
		}
	}
	return out
}

// errNoSites is returned when the world has no site to evaluate.
var errNoSites = errors.New("the world has no sites to delegate")

// meanStd returns the mean and sample standard deviation of xs.
func meanStd(xs []float64) (mean, std float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	for _, x := range xs {
		std += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(std / float64(len(xs)-1))
}
