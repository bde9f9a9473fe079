package evaluate

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/netip"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/subnet"
)

// Lies a liar tells (LiarConfig.Lie).
const (
	// LieFixed answers every probe with 1 ms.
	LieFixed = "fixed"
	// LieScaled answers every probe with LiarConfig.Fraction of the truth.
	LieScaled = "scaled"
	// LieMimic pretends to be at a decoy node's place: it answers every
	// probe with the decoy's true RTT and delays its answers to every
	// other node's pings so that they measure at least their RTT to the
	// decoy (a node can lengthen its RTTs, never shorten them). It is
	// the strongest liar the triangle inequality can face: it knows the
	// true RTTs.
	LieMimic = "mimic"
)

// LieNone runs honest nodes only (LiarConfig.Liars is ignored).
const LieNone = "none"

// Lies lists the lies LiarConfig.Lie takes, LieNone first.
var Lies = []string{LieNone, LieFixed, LieScaled, LieMimic}

// LiarConfig describes a run of honest nodes and liars.
type LiarConfig struct {
	Nodes     int           // nodes in the run
	Liars     int           // of them liars
	Lie       string        // one of Lies
	Fraction  float64       // LieScaled's share of the truth (default 0.5)
	Seed      int64         // nodes, liars, decoys and site order
	Sites     int           // sites delegated, in a seeded order (0: all)
	Threshold time.Duration // the search's threshold (default 50 ms)
	MaxProbes int           // per search (default 16, the overlay's)
	// Check is the claim check; nil runs without one.
	Check *subnet.ClaimCheck
}

// LiarResult is the outcome of one run.
type LiarResult struct {
	Lie      string  `json:"lie"`
	Fraction float64 `json:"fraction,omitempty"`
	Nodes    int     `json:"nodes"`
	Liars    int     `json:"liars"`
	Seed     int64   `json:"seed"`
	Check    bool    `json:"check"`
	Subnets  int     `json:"subnets"` // new subnets delegated
	// LiarsWon is the subnets liars won; LiarsNearest those a liar is
	// truly nearest to among the run's nodes: the liars' honest share.
	LiarsWon     int `json:"liars_won"`
	LiarsNearest int `json:"liars_nearest"`
	// LiarsFar is the subnets liars won at more than twice the best
	// node's RTT plus 20 ms: beyond what the check's default bounds
	// allow, the wins it exists to prevent.
	LiarsFar int `json:"liars_far"`
	// LiarsRejected and HonestRejected count the claims the check
	// rejected, of liars and of honest nodes (false rejections);
	// HonestLost the subnets whose honest winner was rejected and that
	// went to a node farther from it.
	LiarsRejected  int `json:"liars_rejected"`
	HonestRejected int `json:"honest_rejected"`
	HonestLost     int `json:"honest_lost"`
	Barred         int `json:"barred"` // nodes the tally bars at the end
	// Optimal is the share of subnets delegated to the truly nearest
	// node; ProbesPerNew the probes asked per new subnet.
	Optimal      float64 `json:"optimal"`
	ProbesPerNew float64 `json:"probes_per_new"`
	Failed       int     `json:"failed"` // decisions that found no node
}

// Liars delegates the sites of w from a cold start (every node owning its
// own subnet) with the guided search and probes with the world's jitter,
// cfg.Liars of the nodes lying, and reports who won what.
func Liars(ctx context.Context, w World, tree *subnet.Tree, cfg LiarConfig) (LiarResult, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return LiarResult{}, err
	}
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x11a25))
	r, err := newLiarRun(w, tree, cfg, rng)
	if err != nil {
		return LiarResult{}, err
	}
	sites := evalSites(w)
	if len(sites) == 0 {
		return LiarResult{}, errNoSites
	}
	rng.Shuffle(len(sites), func(i, j int) { sites[i], sites[j] = sites[j], sites[i] })
	if cfg.Sites > 0 && cfg.Sites < len(sites) {
		sites = sites[:cfg.Sites]
	}
	res := LiarResult{Lie: cfg.Lie, Nodes: cfg.Nodes, Liars: cfg.Liars, Seed: cfg.Seed, Check: cfg.Check != nil}
	if cfg.Lie == LieScaled {
		res.Fraction = cfg.Fraction
	}
	optimal := 0
	for _, s := range sites {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if r.delegate(ctx, s, &res) {
			optimal++
		}
	}
	if res.Subnets > 0 {
		res.Optimal = float64(optimal) / float64(res.Subnets)
		res.ProbesPerNew = float64(r.e.issued) / float64(res.Subnets)
	}
	if r.tally != nil {
		res.Barred = len(r.tally.BarredNodes())
	}
	return res, nil
}

// withDefaults returns cfg with its defaults set, or an error when it is
// not a run Liars can make.
func (cfg LiarConfig) withDefaults() (LiarConfig, error) {
	if !slices.Contains(Lies, cfg.Lie) {
		return cfg, fmt.Errorf("unknown lie %q", cfg.Lie)
	}
	if cfg.Lie == LieNone {
		cfg.Liars = 0
	}
	if cfg.Liars < 0 || cfg.Liars > cfg.Nodes {
		return cfg, fmt.Errorf("%d liars among %d nodes", cfg.Liars, cfg.Nodes)
	}
	if cfg.Fraction <= 0 {
		cfg.Fraction = 0.5
	}
	if cfg.Threshold <= 0 {
		cfg.Threshold = subnet.DefaultThreshold
	}
	if cfg.MaxProbes <= 0 {
		cfg.MaxProbes = 16
	}
	return cfg, nil
}

// liarRun is one Liars run's nodes, liars and search.
type liarRun struct {
	w     World
	tree  *subnet.Tree
	nodes []netip.Addr
	liar  map[netip.Addr]bool
	// honest are the nodes that do not lie: the subnets' coordinators,
	// trusted by the check as the overlay's coordinator trusts itself
	// (a lying coordinator can decide anything and is not this run's
	// subject).
	honest []netip.Addr
	coord  string // the coordinator of the subnet being delegated ("": none)
	e      *env
	st     *subnet.IPMicra
	tally  *subnet.ClaimTally // nil without a check
}

// newLiarRun draws cfg's nodes and liars, each liar's decoy, and sets up
// the guided search, with cfg's check when it has one.
func newLiarRun(w World, tree *subnet.Tree, cfg LiarConfig, rng *rand.Rand) (*liarRun, error) {
	nodes, err := pickNodes(w, cfg.Nodes, rng)
	if err != nil {
		return nil, err
	}
	liar, decoy := pickLiars(w, nodes, cfg.Liars, rng)
	honest := JitterProber{World: w, Seed: uint64(cfg.Seed)}
	lying := lyingProber{w: w, honest: honest, liar: liar, decoy: decoy, lie: cfg.Lie, fraction: cfg.Fraction}
	e, err := newEnv(w, tree, nodes, lying)
	if err != nil {
		return nil, err
	}
	r := &liarRun{w: w, tree: tree, nodes: nodes, liar: liar, e: e}
	measured := measuredRTT(w, cfg.Lie, liar, decoy)
	sc := subnet.SearchConfig{Threshold: cfg.Threshold, Guided: true, Between: measured, Home: e.home, MaxProbes: cfg.MaxProbes}
	for _, n := range nodes {
		if !liar[n] {
			r.honest = append(r.honest, n)
		}
	}
	if cfg.Check != nil {
		cc := *cfg.Check
		cc.Measured = measured
		r.tally = &subnet.ClaimTally{}
		cc.Tally = r.tally
		cc.Trusted = func(n string) bool { return n == r.coord }
		sc.Claims = &cc
	}
	r.st = &subnet.IPMicra{Tree: tree, Table: e.table, Prober: e, Cache: e.cache, Config: sc}
	return r, nil
}

// pickLiars draws n liars among nodes and a decoy for each: a world node
// outside the run, or one of the run's when there is none.
func pickLiars(w World, nodes []netip.Addr, n int, rng *rand.Rand) (liar map[netip.Addr]bool, decoy map[netip.Addr]netip.Addr) {
	liar = map[netip.Addr]bool{}
	decoy = map[netip.Addr]netip.Addr{}
	inRun := map[netip.Addr]bool{}
	for _, n := range nodes {
		inRun[n] = true
	}
	var others []netip.Addr // decoys: world nodes outside the run
	for _, n := range w.Nodes() {
		if !inRun[n.Addr] {
			others = append(others, n.Addr)
		}
	}
	for _, i := range rng.Perm(len(nodes))[:n] {
		liar[nodes[i]] = true
		if len(others) > 0 {
			decoy[nodes[i]] = others[rng.IntN(len(others))]
		} else {
			decoy[nodes[i]] = nodes[rng.IntN(len(nodes))]
		}
	}
	return liar, decoy
}

// measuredRTT returns what a node measures of another: the true RTT,
// lengthened by a mimic to its decoy's.
func measuredRTT(w World, lie string, liar map[netip.Addr]bool, decoy map[netip.Addr]netip.Addr) func(a, b string) (time.Duration, bool) {
	return func(a, b string) (time.Duration, bool) {
		x, err1 := netip.ParseAddr(a)
		y, err2 := netip.ParseAddr(b)
		if err1 != nil || err2 != nil {
			return 0, false
		}
		d := w.RTTAddr(x, y)
		if lie == LieMimic {
			switch {
			case liar[x]:
				// Its own word, consistent with its decoy's place.
				d = w.RTTAddr(decoy[x], y)
			case liar[y]:
				d = max(d, w.RTTAddr(x, decoy[y]))
			}
		}
		return d, true
	}
}

// delegate delegates s's subnet, its coordinator an honest node chosen by
// the subnet, counts the outcome into res, and reports whether the
// subnet went to the node truly nearest to s.
func (r *liarRun) delegate(ctx context.Context, s world.Site, res *LiarResult) (optimal bool) {
	a := s.Addrs[0]
	if len(r.honest) > 0 {
		h := fnv.New64a()
		h.Write([]byte(r.tree.Range(r.tree.SmallestNonUnary(a)).String()))
		r.coord = r.honest[h.Sum64()%uint64(len(r.honest))].String()
	}
	d, err := r.st.Delegate(ctx, a)
	for _, rej := range d.Rejected {
		if r.liar[netip.MustParseAddr(rej.Node)] {
			res.LiarsRejected++
		} else {
			res.HonestRejected++
			if n, perr := netip.ParseAddr(d.Node); err != nil || perr != nil || r.w.RTT(n, s) > r.w.RTT(netip.MustParseAddr(rej.Node), s) {
				res.HonestLost++
			}
		}
	}
	if err != nil {
		res.Failed++
		return false
	}
	if d.Step == subnet.StepOwned {
		return false
	}
	r.e.table.SetAt(d.Subnet, d.Node, a)
	res.Subnets++
	n := netip.MustParseAddr(d.Node)
	best, nearest := subnet.Unreachable, netip.Addr{}
	for _, m := range r.nodes {
		if rtt := r.w.RTT(m, s); rtt < best {
			best, nearest = rtt, m
		}
	}
	if r.liar[n] {
		res.LiarsWon++
		if t := r.w.RTT(n, s); t > 2*best+20*time.Millisecond {
			res.LiarsFar++
		}
	}
	if r.liar[nearest] {
		res.LiarsNearest++
	}
	return r.w.RTT(n, s) <= best+10*time.Microsecond
}

// lyingProber answers the honest nodes' probes with honest and the liars'
// with their lie.
type lyingProber struct {
	w        World
	honest   Prober
	liar     map[netip.Addr]bool
	decoy    map[netip.Addr]netip.Addr
	lie      string
	fraction float64
}

func (p lyingProber) Probe(ctx context.Context, node netip.Addr, s world.Site) (time.Duration, error) {
	if !p.liar[node] {
		return p.honest.Probe(ctx, node, s)
	}
	switch p.lie {
	case LieFixed:
		return time.Millisecond, nil
	case LieScaled:
		d, err := p.honest.Probe(ctx, node, s)
		return time.Duration(p.fraction * float64(d)), err
	default: // LieMimic
		return p.w.RTT(p.decoy[node], s), nil
	}
}

// LiarSweep describes micra bench liars: every lie of Lies, each without
// and with the check, on every seed.
type LiarSweep struct {
	Nodes, Liars int
	Seeds        []int64
	Sites        int
	Fraction     float64
	Check        subnet.ClaimCheck // the check's settings (zero: defaults)
}

// SweepLiars runs the sweep.
func SweepLiars(ctx context.Context, w World, tree *subnet.Tree, sw LiarSweep) ([]LiarResult, error) {
	var out []LiarResult
	for _, lie := range Lies {
		for _, check := range []bool{false, true} {
			for _, seed := range sw.Seeds {
				cfg := LiarConfig{Nodes: sw.Nodes, Liars: sw.Liars, Lie: lie, Fraction: sw.Fraction, Seed: seed, Sites: sw.Sites}
				if check {
					cc := sw.Check
					cfg.Check = &cc
				}
				r, err := Liars(ctx, w, tree, cfg)
				if err != nil {
					return out, fmt.Errorf("%s, seed %d: %w", lie, seed, err)
				}
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// LiarKey names a row of a sweep: one lie, without or with the check.
type LiarKey struct {
	Lie   string
	Check bool
}

// SumLiars sums a sweep's results over its seeds, one per LiarKey in the
// order they first come; Optimal and ProbesPerNew are means weighted by
// the subnets.
func SumLiars(rs []LiarResult) ([]LiarKey, map[LiarKey]*LiarResult) {
	var order []LiarKey
	sum := map[LiarKey]*LiarResult{}
	for _, r := range rs {
		k := LiarKey{r.Lie, r.Check}
		a, ok := sum[k]
		if !ok {
			a = &LiarResult{Lie: r.Lie, Check: r.Check, Fraction: r.Fraction, Nodes: r.Nodes, Liars: r.Liars}
			sum[k] = a
			order = append(order, k)
		}
		a.Subnets += r.Subnets
		a.LiarsWon += r.LiarsWon
		a.LiarsNearest += r.LiarsNearest
		a.LiarsFar += r.LiarsFar
		a.LiarsRejected += r.LiarsRejected
		a.HonestRejected += r.HonestRejected
		a.HonestLost += r.HonestLost
		a.Barred += r.Barred
		a.Failed += r.Failed
		a.Optimal += r.Optimal * float64(r.Subnets)
		a.ProbesPerNew += r.ProbesPerNew * float64(r.Subnets)
	}
	for _, a := range sum {
		n := float64(max(a.Subnets, 1))
		a.Optimal /= n
		a.ProbesPerNew /= n
	}
	return order, sum
}

// WriteLiarTable writes a sweep's results as a table, one row per lie
// and check, summed over the seeds.
func WriteLiarTable(out io.Writer, rs []LiarResult) error {
	order, sum := SumLiars(rs)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "lie\tcheck\tsubnets\tliars won\tliars nearest\tliars far\tliars rejected\tbarred\thonest rejected\thonest lost\toptimal %\tprobes/new\tfailed\t")
	for _, k := range order {
		a := sum[k]
		lie := a.Lie
		if lie == LieScaled {
			lie = fmt.Sprintf("%s %.2f", lie, a.Fraction)
		}
		check := "off"
		if k.Check {
			check = "on"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\t%.2f\t%d\t\n", lie, check, a.Subnets, a.LiarsWon, a.LiarsNearest, a.LiarsFar,
			a.LiarsRejected, a.Barred, a.HonestRejected, a.HonestLost, 100*a.Optimal, a.ProbesPerNew, a.Failed)
	}
	return tw.Flush()
}
