package delegate

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/internal/check"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/subnet"
)

// Option configures New.
type Option func(*config) error

type config struct {
	threshold   time.Duration
	tolerance   time.Duration // 0: the density rule (SearchConfig.Nearest)
	guided      bool
	between     func(a, b peer.ID) (time.Duration, bool)
	latencyMap  func(nodes []peer.ID) []subnet.MapPlace
	maxProbes   int
	probeTO     time.Duration
	cacheTTL    time.Duration
	maxAge      time.Duration
	newLoad     uint64
	pendingTTL  time.Duration
	balance     bool
	log         *slog.Logger
	probeFailed time.Duration
	claims      *subnet.ClaimCheck // nil: claims are not checked
}

func defaultConfig() config {
	return config{
		threshold:   subnet.DefaultThreshold, // the paper's best ratio of quality to probes
		guided:      true,                    // micra's pruned search: fewer probes, same quality (README)
		maxProbes:   16,                      // bounds a decision's time under the coordinator's deadline; 12 nodes need 12 at worst
		probeTO:     25 * time.Second,        // a probe waits up to 20 s for the node's window, then a few HEADs
		cacheTTL:    10 * time.Second,        // neighbouring delegations change slowly; a burst of decisions shares one lookup
		maxAge:      7 * 24 * time.Hour,      // stored probes older than this are asked again
		newLoad:     100,                     // pages/day of a new subnet when no peer declares its load
		pendingTTL:  time.Hour,               // how long a crawler takes to declare the load of a subnet it was given
		balance:     true,
		log:         slog.Default().With("subsystem", "delegate"),
		probeFailed: 10 * time.Minute,     // a failed probe is retried after this
		claims:      &subnet.ClaimCheck{}, // subnet's defaults: no honest claim rejected in micra bench liars
	}
}

// Threshold sets the probing threshold (default 50 ms, the paper's).
func Threshold(d time.Duration) Option {
	return func(c *config) error { return check.Set(&c.threshold, d, check.Positive("threshold", d)) }
}

// Tolerance fixes the guided search's tolerance (subnet.SearchConfig.Tolerance:
// how much better than the best answer a node must be able to be to be
// asked). By default the tolerance follows the network's density, an
// eighth of the median RTT from a peer to its nearest other peer within 2
// ms and a fifth of the threshold (SearchConfig.Nearest), measured over
// the decision's peers by the RTTs the guided search's bounds use
// (Between) at most once a minute or when the number of peers moves by
// more than a tenth.
func Tolerance(d time.Duration) Option {
	return func(c *config) error { return check.Set(&c.tolerance, d, check.Positive("tolerance", d)) }
}

// Pure runs the paper's IPMicra search instead of micra's guided one
// (subnet.SearchConfig.Guided, the default).
func Pure() Option {
	return func(c *config) error { c.guided = false; return nil }
}

// Between replaces the overlay's inter-node RTTs in the guided search's
// bounds. On the emulated Internet libp2p's own traffic does not see the
// world's latencies, so tests pass the world's model here.
func Between(f func(a, b peer.ID) (time.Duration, bool)) Option {
	return func(c *config) error { return check.Set(&c.between, f, check.NotNil("Between", f)) }
}

// ClaimCheck sets how the winner's probe is checked against witnesses'
// measurements before it wins (subnet.ClaimCheck: the triangle
// inequality over RTTs the witnesses measured themselves, by
// DelegationEnv.MeasuredBy, or by the Between option's model when set);
// nil switches the check off. Default: subnet's defaults. Its Measured and
// Tally are the Delegator's own.
func ClaimCheck(c *subnet.ClaimCheck) Option {
	return func(cfg *config) error {
		if c == nil {
			cfg.claims = nil
			return nil
		}
		if c.Factor < 0 || c.Slack < 0 || c.Agree < 0 || c.Extra < 0 {
			return fmt.Errorf("claim check %+v: negative setting", *c)
		}
		cc := *c
		cfg.claims = &cc
		return nil
	}
}

// LatencyMap gives the guided search a latency map of the nodes it may
// ask (subnet.SearchConfig.Places): f returns, for the live peers of a
// decision, the places where a server may be with the RTT each peer would
// measure there. It needs the peers' locations, which the overlay does
// not exchange; the demo passes the emulated Internet's.
func LatencyMap(f func(nodes []peer.ID) []subnet.MapPlace) Option {
	return func(c *config) error { return check.Set(&c.latencyMap, f, check.NotNil("LatencyMap", f)) }
}

// MaxProbes bounds the probes asked per decision (default 16; at the
// bound the best answer so far wins).
func MaxProbes(n int) Option {
	return func(c *config) error { return check.Set(&c.maxProbes, n, check.AtLeast("max probes", n, 1)) }
}

// ProbeTimeout bounds one probe request (default 25 s: a node may wait up
// to 20 s for its probing window).
func ProbeTimeout(d time.Duration) Option {
	return func(c *config) error { return check.Set(&c.probeTO, d, check.Positive("probe timeout", d)) }
}

// CacheTTL sets how long answers from other shards (organisation
// delegations, block indexes) are reused (default 10 s).
func CacheTTL(d time.Duration) Option {
	return func(c *config) error { return check.Set(&c.cacheTTL, d, check.AtLeast("cache TTL", d, 0)) }
}

// MaxProbeAge sets how long a stored probe result is reused (default 7
// days; the thesis saw probe results stable over three months, and
// calibration catches changes sooner).
func MaxProbeAge(d time.Duration) Option {
	return func(c *config) error { return check.Set(&c.maxAge, d, check.Positive("probe age", d)) }
}

// LoadBalancing turns load balancing on or off (default on) and sets the
// load assumed for a new subnet when no peer declares its load per subnet
// (pages per day, default 100) and how long a delegation counts towards a
// node's load before the node's own declaration includes it (default 1 h).
func LoadBalancing(on bool, newSubnetLoad uint64, pending time.Duration) Option {
	return func(c *config) error {
		if newSubnetLoad == 0 || pending < 0 {
			return fmt.Errorf("load balancing needs a positive subnet load and a non-negative pending time, got %d and %v", newSubnetLoad, pending)
		}
		c.balance, c.newLoad, c.pendingTTL = on, newSubnetLoad, pending
		return nil
	}
}

// Logger sets the logger (default slog.Default with subsystem=delegate).
func Logger(l *slog.Logger) Option {
	return func(c *config) error { return check.Set(&c.log, l, check.NotNil("logger", l)) }
}

// Delegator is the production delegation procedure: subnet.IPMicra over
// the coordinator's DelegationEnv, then load balancing. It is safe for
// concurrent use (the coordinator runs decisions for different subnets at
// once) and holds only caches, so it needs no Close.
type Delegator struct {
	cfg     config
	cache   *cache
	places  *places
	pending *pending
	stats   counters
	tally   *subnet.ClaimTally // claims checked, by node
	density density            // the network's density, for the tolerance
}

var _ overlay.Delegator = (*Delegator)(nil)

type counters struct {
	decisions, probes, handOffs, second, reruns, over, own atomic.Int64
	nearest, tolerance                                     atomic.Int64 // of the last guided search, in ns
}

// Stats are cumulative counters of one Delegator.
type Stats struct {
	Decisions  int64 // searches run (re-delegations and orphans included)
	Probes     int64 // probe requests issued to nodes, the claim check's witnesses included
	HandOffs   int64 // load balancing: the chosen node handed a subnet on
	SecondBest int64 // load balancing: the subnet went to the second-best node
	Reruns     int64 // load balancing: searched again without the full nodes
	Over       int64 // load balancing: a node was given a subnet beyond its capacity
	// ClaimsRejected counts winning probes the claim check found
	// impossible (subnet.ClaimCheck); Barred lists the nodes whose
	// claims failed often enough that this Delegator asks them no more.
	ClaimsRejected int64
	Barred         []peer.ID
	// Nearest is the network's density the last guided search saw (the
	// median RTT from a peer to its nearest other peer; zero when
	// unmeasured or with a fixed Tolerance), Tolerance that search's
	// tolerance (subnet.SearchConfig).
	Nearest, Tolerance time.Duration
}

// New returns a Delegator.
func New(opts ...Option) (*Delegator, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	return &Delegator{cfg: cfg, cache: newCache(cfg.cacheTTL), places: &places{}, pending: &pending{}, tally: &subnet.ClaimTally{}}, nil
}

// Stats returns the counters so far.
func (d *Delegator) Stats() Stats {
	st := Stats{
		Decisions: d.stats.decisions.Load(), Probes: d.stats.probes.Load(), HandOffs: d.stats.handOffs.Load(),
		SecondBest: d.stats.second.Load(), Reruns: d.stats.reruns.Load(), Over: d.stats.over.Load(),
		ClaimsRejected: d.tally.Rejected(),
		Nearest:        time.Duration(d.stats.nearest.Load()), Tolerance: time.Duration(d.stats.tolerance.Load()),
	}
	for _, n := range d.tally.BarredNodes() {
		st.Barred = append(st.Barred, peer.ID(n))
	}
	return st
}

// searchMargin is kept from a decision's deadline for writing the
// decision: probes stop this long before it.
const searchMargin = 5 * time.Second

// Delegate implements overlay.Delegator: it runs the search for
// req.Subnet, leaving out req.Exclude and, when req.Fresh is set, the
// subnet's older probe results; then, when the chosen node has no room
// for the subnet, load balancing picks between a hand-off and the
// second-best node (subnet.Balance), searching once more without the full
// nodes when no probed node has room. For a part (req.IsPart) it runs the
// part's search (subnet.IPMicra.DelegatePart, the holder's observation
// its first answer) without load balancing.
func (d *Delegator) Delegate(ctx context.Context, req overlay.DelegateRequest, env overlay.DelegationEnv) (peer.ID, error) {
	d.stats.decisions.Add(1)
	tree := env.Tree()
	addr := req.Addr
	if !addr.IsValid() {
		addr = tree.Range(req.Subnet).Start
	}
	if tree.SmallestNonUnary(addr) != req.Subnet {
		return "", fmt.Errorf("address %v is not in subnet %s", addr, tree.Range(req.Subnet))
	}
	if req.IsPart() && (!req.Part.Contains(addr) || !tree.Range(req.Subnet).ContainsRange(req.Part) || req.Holder == "") {
		return "", fmt.Errorf("part %s of %s for %v from %q: not a part holding the address", req.Part, tree.Range(req.Subnet), addr, req.Holder)
	}
	budget := ctx
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		budget, cancel = context.WithDeadline(ctx, dl.Add(-searchMargin))
		defer cancel()
	}
	excluded := map[peer.ID]bool{}
	for _, p := range req.Exclude {
		excluded[p] = true
	}
	v := d.newView(ctx, budget, env, req, addr, excluded)
	dec, err := d.search(ctx, v, addr)
	if err != nil {
		return "", err
	}
	node := peer.ID(dec.Node)
	if log := d.cfg.log; log.Enabled(ctx, slog.LevelDebug) {
		ps := make([]string, 0, len(dec.Probes))
		for _, p := range dec.Probes {
			ps = append(ps, fmt.Sprintf("%s=%v(cached=%v)", peer.ID(p.Node).ShortString(), p.RTT, p.Cached))
		}
		log.Debug("search decided", "subnet", v.target().String(), "step", dec.Step.String(), "peer", node,
			"issued", v.issued, "probes", ps, "reason", req.Reason)
	}
	for _, rj := range dec.Rejected {
		d.cfg.log.Info("probe claim rejected", "subnet", v.target().String(), "peer", peer.ID(rj.Node), "claim", rj.Claim,
			"beyond", rj.Bound, "witnesses", len(rj.Witnesses), "second_bound_only", rj.Upper)
	}
	if req.IsPart() {
		// A part is a small share of a range its holder already
		// carries: no load balancing, no pending load, and the block
		// caches index registry ranges only.
		return node, nil
	}
	if d.cfg.balance {
		node = d.balance(ctx, budget, v, dec, excluded)
	}
	d.pending.add(node, v.pages, time.Now(), d.cfg.pendingTTL)
	d.remember(v, node, addr)
	return node, nil
}

func (d *Delegator) search(ctx context.Context, v *view, addr netip.Addr) (subnet.Decision, error) {
	cfg := subnet.SearchConfig{Threshold: d.cfg.threshold, Guided: d.cfg.guided, MaxProbes: d.cfg.maxProbes, Tolerance: d.cfg.tolerance}
	between := d.cfg.between
	if between == nil {
		between = v.env.Between
	}
	if cfg.Guided && cfg.Tolerance == 0 {
		ids := make([]peer.ID, len(v.peers))
		for i, p := range v.peers {
			ids[i] = p.ID
		}
		cfg.Nearest = d.density.get(time.Now(), ids, between)
	}
	if cfg.Guided {
		d.stats.nearest.Store(int64(cfg.Nearest))
		d.stats.tolerance.Store(int64(cfg.EffectiveTolerance()))
	}
	cfg.Between = func(a, b string) (time.Duration, bool) { return between(peer.ID(a), peer.ID(b)) }
	cfg.Home = v.home
	if d.cfg.claims != nil {
		cc := *d.cfg.claims
		measured := v.env.MeasuredBy
		if d.cfg.between != nil {
			measured = d.cfg.between
		}
		cc.Measured = func(by, of string) (time.Duration, bool) { return measured(peer.ID(by), peer.ID(of)) }
		cc.Tally = d.tally
		self := string(v.env.Self())
		cc.Trusted = func(n string) bool { return n == self }
		cfg.Claims = &cc
	}
	if d.cfg.latencyMap != nil {
		ids := make([]peer.ID, 0, len(v.peers))
		for _, p := range v.peers {
			if !v.excluded[p.ID] {
				ids = append(ids, p.ID)
			}
		}
		cfg.Places = d.cfg.latencyMap(ids)
	}
	if log := d.cfg.log; log.Enabled(ctx, slog.LevelDebug) {
		r := v.target().String()
		cfg.Trace = func(line string) {
			for _, p := range v.peers { // node names are raw peer IDs
				line = strings.ReplaceAll(line, string(p.ID), p.ID.String())
			}
			log.Debug("search step", "subnet", r, "step", line)
		}
	}
	m := &subnet.IPMicra{Tree: v.tree, Table: v, Prober: v, Cache: v, Config: cfg}
	var (
		dec subnet.Decision
		err error
	)
	if v.req.IsPart() {
		dec, err = m.DelegatePart(ctx, addr, v.req.Part, string(v.req.Holder), v.req.Observed)
	} else {
		dec, err = m.Delegate(ctx, addr)
	}
	if err != nil {
		return dec, err
	}
	if dec.Node == "" {
		return dec, overlay.ErrNoCandidate
	}
	return dec, nil
}

// remember adds the decision to the block indexes this Delegator caches.
func (d *Delegator) remember(v *view, node peer.ID, addr netip.Addr) {
	r := v.tree.Range(v.req.Subnet)
	ix := overlay.IndexedDelegation{Delegation: overlay.Delegation{Subnet: r, Node: node, Decided: time.Now(), Addr: addr},
		Probes: v.env.Probes(v.req.Subnet)}
	d.cache.addToBlocks(v.tree, ix)
	d.places.add(v.tree, ix)
}

// pending counts the load of recent delegations a node has not declared
// yet. It is safe for concurrent use.
type pending struct {
	mu sync.Mutex
	m  map[peer.ID][]pendingLoad
}

type pendingLoad struct {
	pages int64
	exp   time.Time
}

func (p *pending) add(n peer.ID, pages int64, now time.Time, ttl time.Duration) {
	if ttl <= 0 || pages == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[peer.ID][]pendingLoad{}
	}
	p.m[n] = append(p.prune(n, now), pendingLoad{pages, now.Add(ttl)})
	if len(p.m) > 4096 {
		for k := range p.m {
			if len(p.prune(k, now)) == 0 {
				delete(p.m, k)
			}
		}
	}
}

func (p *pending) prune(n peer.ID, now time.Time) []pendingLoad {
	ls := slices.DeleteFunc(p.m[n], func(l pendingLoad) bool { return now.After(l.exp) })
	if len(ls) > 1024 {
		ls = ls[len(ls)-1024:]
	}
	p.m[n] = ls
	return ls
}

// sum returns the pending load of n.
func (p *pending) sum(n peer.ID, now time.Time) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		return 0
	}
	var s int64
	for _, l := range p.prune(n, now) {
		s += l.pages
	}
	return s
}
