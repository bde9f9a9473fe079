// Package scale measures micra's overlay at network sizes a machine cannot
// run in real time: hundreds to thousands of whole overlays (libp2p host,
// Kademlia DHT, gossipsub, sharded coordinators, the delegation procedure)
// on go-libp2p's simulated network in virtual time (a testing/synctest
// bubble; internal/virtual runs one outside go test). Links have the real
// latency matrix's RTTs between the nodes' locations in a generated world
// (internal/world), probes are answered by the world's latency model, and
// every figure is counted, not modelled: stream bytes from libp2p's
// bandwidth counter, requests and DHT queries from the overlays' counters,
// virtual time from the bubble's clock.
//
// scale is a rig: it imports overlay, bootstrap and internal packages, and
// is imported by cmd/micra (micra bench overlay) and tests.
package scale

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"net/url"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p"
	lpevent "github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"

	"github.com/micra-net/micra/bootstrap"
	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/internal/p2ptest"
	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/overlay/delegate"
	"github.com/micra-net/micra/subnet"
)

// Config is one run.
type Config struct {
	Nodes   int     // network size
	Subnets int     // distinct subnets delegated before the churn (a tenth as many after it)
	Churn   float64 // share of the nodes that leave without a word, replaced by as many joining
	Seed    int64   // the world (locations, sites), the nodes' keys and every choice
	Boot    int     // bootstrap peers every node joins through (default 3)
	// Liveness is the overlays' liveness timeout, heartbeats at a tenth of
	// it (default micra's, 5 min); Idle the span upkeep is measured over
	// (default 5 min).
	Liveness, Idle time.Duration
	// QUIC runs the hosts on go-libp2p's QUIC over simnet (x/simlibp2p)
	// instead of internal/memnet's in-memory transport: the protocols'
	// figures are the same, the cost to run them several times higher.
	QUIC bool
	// Stop, when closed, ends the run at the next phase or virtual
	// second with ErrStopped (nil: never). It may come from outside the
	// bubble (a command's interrupt).
	Stop <-chan struct{}
	// Log receives progress lines (nil: none).
	Log func(format string, args ...any)
	// HeapProfile, when set, receives a heap profile (pprof's format)
	// taken after the delegations, when the network holds the most.
	HeapProfile io.Writer
}

// Result is what a run measured. Times are virtual.
type Result struct {
	Nodes                 int     `json:"nodes"`
	ConvergeS             float64 `json:"converge_s"`              // from the first join to every node holding its own subnet
	Delegations           int     `json:"delegations"`             // distinct subnets delegated before the churn
	MessagesPerDelegation float64 `json:"messages_per_delegation"` // micra requests and DHT queries per delegation, upkeep subtracted (measureIdle)
	BytesPerDelegation    float64 `json:"bytes_per_delegation"`    // stream bytes per delegation, upkeep subtracted
	ProbesPerDelegation   float64 `json:"probes_per_delegation"`   // probe requests per delegation
	HopsP50               float64 `json:"hops_p50"`                // RESOLVE requests and shard-key DHT queries of a resolve that misses every cache, median
	HopsP90               float64 `json:"hops_p90"`
	IdleBytesPerHour      float64 `json:"idle_bytes_per_hour"` // per node, joined and idle (heartbeats, maintenance, announcements, DHT refresh)
	// IdleHeldBytesPerHour is the same after the delegations, every node
	// holding its share of them and the network their shards: a
	// volunteer's upkeep in service.
	IdleHeldBytesPerHour float64 `json:"idle_held_bytes_per_hour"`
	Failed               int     `json:"failed"`             // delegations that returned an error, before the churn
	FailedAfterChurn     int     `json:"failed_after_churn"` // new subnets after the churn whose delegation returned an error
	FailedAgain          int     `json:"failed_again"`       // subnets held before the churn, asked for again after it, whose delegation returned an error
	Left                 int     `json:"left"`               // nodes that left without a word (as many joined)
	Lost                 int     `json:"lost"`               // subnets delegated before the churn not held by a live node after it; a part whose node left, falling back to a live holder of the range around it, is not lost (logged apart)
	Doubled              int     `json:"doubled"`            // subnets held by two live nodes after the churn
	// ClaimsRejected counts the winning probes the coordinators' claim
	// checks rejected over the run: every node here answers its probes
	// truly, so each is a false rejection.
	ClaimsRejected   int64   `json:"claims_rejected"`
	HeapBytesPerNode float64 `json:"heap_bytes_per_node"` // Go heap in use over the nodes, after converging
	RealS            float64 `json:"real_s"`              // real time of the run
}

// Defaults: micra's upkeep timing (overlay's defaults), so that the idle
// figure is a volunteer's.
const (
	defaultLiveness = 5 * time.Minute
	defaultIdle     = 15 * time.Minute // an announcement round
	threshold       = 50 * time.Millisecond
	inFlight        = 64               // delegations at once
	drainLimit      = 30 * time.Minute // the longest wait for the notices of the delegations
	hopSample       = 200              // resolves timed for hops
	// settle is how long the delegation phase goes on after its last
	// answer: past the overlay's coalescing of organisation records (10 s)
	// and a maintenance round (15 s).
	settle = 30 * time.Second
)

// ErrStopped is Run's error when cfg.Stop closed before the run ended.
var ErrStopped = errors.New("scale: stopped")

type simNode struct {
	addr netip.Addr
	o    *overlay.Overlay
	gone bool
}

// Run runs cfg in t's synctest bubble (p2ptest.Bubble or virtual.Run):
// t's cleanups close the network.
func Run(t *testing.T, cfg Config) (Result, error) {
	if cfg.Boot <= 0 {
		cfg.Boot = 3
	}
	if cfg.Liveness <= 0 {
		cfg.Liveness = defaultLiveness
	}
	if cfg.Idle <= 0 {
		cfg.Idle = defaultIdle
	}
	liveness, heartbeat := cfg.Liveness, cfg.Liveness/10
	logf := cfg.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if cfg.Nodes < cfg.Boot+2 || cfg.Subnets < 1 || cfg.Churn < 0 || cfg.Churn >= 1 {
		return Result{}, fmt.Errorf("scale: want nodes ≥ %d, subnets ≥ 1, churn in [0,1): %+v", cfg.Boot+2, cfg)
	}
	stopped := func() bool {
		select {
		case <-cfg.Stop:
			return true
		default:
			return false
		}
	}
	// wait sleeps d of virtual time, a second at a time, and reports
	// whether the run was stopped meanwhile.
	wait := func(d time.Duration) bool {
		for end := time.Now().Add(d); time.Now().Before(end); {
			if stopped() {
				return true
			}
			time.Sleep(min(time.Second, time.Until(end)))
		}
		return stopped()
	}
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5ca1e))
	extra := int(float64(cfg.Nodes) * cfg.Churn)
	p := world.DefaultParams()
	p.Seed, p.Nodes, p.Sites, p.Port = cfg.Seed, cfg.Nodes+extra, 2*cfg.Subnets+cfg.Subnets/5, 0
	w, err := world.Generate(ctx, p)
	if err != nil {
		return Result{}, err
	}
	tree, err := w.Tree(ctx)
	if err != nil {
		return Result{}, err
	}
	addrs := w.NodeAddrs()
	if len(addrs) < cfg.Nodes+extra {
		return Result{}, fmt.Errorf("scale: the world has %d node addresses, want %d", len(addrs), cfg.Nodes+extra)
	}
	oneWay := func(a, b netip.Addr) time.Duration { return w.RTTAddr(a, b) / 2 }
	net := p2ptest.NewMemNet(t, oneWay)
	if cfg.QUIC {
		net = p2ptest.NewNetWith(t, oneWay)
	}
	sites := map[netip.Addr]world.Site{}
	for _, s := range w.Sites() {
		sites[s.Addrs[0]] = s
	}

	var byPeer sync.Map // peer.ID → netip.Addr
	between := func(a, b peer.ID) (time.Duration, bool) {
		x, ok1 := byPeer.Load(a)
		y, ok2 := byPeer.Load(b)
		if !ok1 || !ok2 {
			return 0, false
		}
		return w.RTTAddr(x.(netip.Addr), y.(netip.Addr)), true
	}
	var probes sync.Map // counts per node, read at the end
	// peer.ID → *atomic.Int64: DHT requests for shard keys (32 bytes) it
	// sent, answered by any node: its lookups and walks towards shards,
	// not its routing table's upkeep (peer IDs).
	var queries sync.Map
	onQuery := func(from peer.ID, key []byte) {
		if len(key) != 32 {
			return
		}
		v, ok := queries.Load(from)
		if !ok {
			v, _ = queries.LoadOrStore(from, new(atomic.Int64))
		}
		v.(*atomic.Int64).Add(1)
	}
	sent := func(p peer.ID) int64 {
		if v, ok := queries.Load(p); ok {
			return v.(*atomic.Int64).Load()
		}
		return 0
	}
	// The delegators' log: claim rejections only (every node answers its
	// probes truly here), the first ten.
	rejections := slog.New(&rejectionLog{logf: logf, n: new(atomic.Int64)})
	var evs events // ownership records from the churn on
	var dbs []*badger.DB
	var dels []*delegate.Delegator
	var opened atomic.Int64             // connections opened, counted at both ends
	var rtAdded, rtRemoved atomic.Int64 // routing-table changes, all nodes
	var addrChanges atomic.Int64        // hosts' address-change events (each starts a kad-dht refresh)
	connNotifee := &network.NotifyBundle{ConnectedF: func(network.Network, network.Conn) { opened.Add(1) }}
	start := func(a netip.Addr) (*simNode, error) {
		// A volunteer's connection manager (overlay.NewHost's), not
		// libp2p's default.
		cm, err := connmgr.NewConnManager(overlay.DefaultConnLow, overlay.DefaultConnHigh, connmgr.WithGracePeriod(overlay.DefaultConnGrace))
		if err != nil {
			return nil, err
		}
		h := net.Host(t, nil, a, libp2p.ConnectionManager(cm))
		h.Network().Notify(connNotifee)
		if sub, err := h.EventBus().Subscribe(new(lpevent.EvtLocalAddressesUpdated)); err == nil {
			go func() {
				for range sub.Out() {
					addrChanges.Add(1)
				}
			}()
			t.Cleanup(func() { sub.Close() })
		}
		byPeer.Store(h.ID(), a)
		del, err := delegate.New(delegate.Threshold(threshold), delegate.Between(between), delegate.Logger(rejections))
		if err != nil {
			return nil, err
		}
		prober := overlay.ProberFunc(func(ctx context.Context, raw string) (time.Duration, error) {
			u, err := url.Parse(raw)
			if err != nil {
				return 0, err
			}
			sa, err := netip.ParseAddr(u.Hostname())
			s, ok := sites[sa]
			if err != nil || !ok {
				return 0, fmt.Errorf("no site at %s", u.Hostname())
			}
			n, _ := probes.LoadOrStore(a, new(int64))
			*n.(*int64)++
			rtt := w.RTT(a, s)
			time.Sleep(rtt) // a HEAD takes a round trip
			return rtt, nil
		})
		db := p2ptest.SimDB(t)
		dbs = append(dbs, db)
		dels = append(dels, del)
		o, err := overlay.New(h, tree, db, overlay.WithDelegator(del), overlay.WithProber(prober),
			overlay.OwnAddress(a), overlay.Logger(evs.logger(a)), overlay.OnDHTRequest(onQuery), overlay.Liveness(heartbeat, liveness),
			// Every emulated address is in 127/8: a /16 group here stands
			// for many of the real Internet's, and private networks are
			// allowed.
			overlay.DiversityLimits(64, 1024), overlay.Egress(egress.Policy{AllowPrivate: true}))
		if err != nil {
			return nil, err
		}
		// Count routing-table changes, after kad-dht's own callbacks (set
		// once here, before the node joins and its table is used).
		rt := o.DHT().RoutingTable()
		added, removed := rt.PeerAdded, rt.PeerRemoved
		rt.PeerAdded = func(p peer.ID) { added(p); rtAdded.Add(1) }
		rt.PeerRemoved = func(p peer.ID) { removed(p); rtRemoved.Add(1) }
		t.Cleanup(func() { o.Close() })
		return &simNode{addr: a, o: o}, nil
	}
	join := func(nodes []*simNode, boot []peer.AddrInfo) error {
		var wg sync.WaitGroup
		errs := make(chan error, len(nodes))
		sem := make(chan struct{}, 50) // arrivals at once
		for _, n := range nodes {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				if _, err := bootstrap.Join(ctx, n.o.Host(), n.o.Host().ID(), boot); err != nil {
					errs <- fmt.Errorf("join %s: %w", n.addr, err)
					return
				}
				if err := n.o.Bootstrap(ctx); err != nil {
					errs <- fmt.Errorf("bootstrap %s: %w", n.addr, err)
				}
			})
		}
		wg.Wait()
		close(errs)
		return <-errs
	}
	// A node has converged when its own subnet's claim was answered: it,
	// or the node of its subnet that claimed first, holds the subnet.
	owns := func(n *simNode) bool {
		d, ok := n.o.Cached(n.addr)
		return ok && d.Own && !d.Orphaned
	}
	live := func(nodes []*simNode) []*simNode {
		var out []*simNode
		for _, n := range nodes {
			if !n.gone {
				out = append(out, n)
			}
		}
		return out
	}
	counters := func(nodes []*simNode) (msgs int64) {
		for _, n := range nodes {
			st := n.o.Stats()
			msgs += st.Requests + st.DHTServed
		}
		return msgs
	}
	bytesNow := func() int64 { b := net.Bandwidth(); return b.TotalIn }
	kinds := func(nodes []*simNode) map[string]int64 {
		out := map[string]int64{}
		for _, n := range nodes {
			st := n.o.Stats()
			for k, v := range st.Kinds {
				out[k] += v
			}
			out["(closest-peer lookups)"] += st.Lookups
		}
		return out
	}
	// perKind lists the messages of each kind since k0, per unit, largest first.
	perKind := func(k0, k1 map[string]int64, unit float64) string {
		type kv struct {
			k string
			v float64
		}
		var all []kv
		for k, v := range k1 {
			if d := float64(v - k0[k]); d > 0 {
				all = append(all, kv{k, d / unit})
			}
		}
		slices.SortFunc(all, func(a, b kv) int { return cmp.Compare(b.v, a.v) })
		var b strings.Builder
		for _, e := range all[:min(len(all), 40)] {
			fmt.Fprintf(&b, " %s %.1f", e.k, e.v)
		}
		return b.String()
	}

	// Join and converge.
	t0 := time.Now()
	nodes := make([]*simNode, cfg.Nodes)
	for i := range nodes {
		if nodes[i], err = start(addrs[i]); err != nil {
			return Result{}, err
		}
	}
	var boot []peer.AddrInfo
	for _, n := range nodes[:cfg.Boot] {
		boot = append(boot, peer.AddrInfo{ID: n.o.Host().ID(), Addrs: n.o.Host().Addrs()})
	}
	if err := join(nodes[1:cfg.Boot], boot[:1]); err != nil {
		return Result{}, err
	}
	if err := join(nodes[cfg.Boot:], boot); err != nil {
		return Result{}, err
	}
	if err := nodes[0].o.Bootstrap(ctx); err != nil { // the first node: its peers came to it
		return Result{}, err
	}
	for !allOf(nodes, owns) {
		if time.Since(t0) > 10*time.Minute {
			var bad []string
			for _, n := range nodes {
				if !owns(n) {
					d, ok := n.o.Cached(n.addr)
					bad = append(bad, fmt.Sprintf("%s (subnet %s: %v %+v)", n.addr, tree.Range(tree.SmallestNonUnary(n.addr)), ok, d))
				}
			}
			return Result{}, fmt.Errorf("scale: %d of %d nodes' own subnets not claimed after 10 minutes: %v", len(bad), len(nodes), bad)
		}
		if wait(time.Second) {
			return Result{}, ErrStopped
		}
	}
	res := Result{Nodes: cfg.Nodes, ConvergeS: time.Since(t0).Seconds()}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	res.HeapBytesPerNode = float64(ms.HeapInuse) / float64(cfg.Nodes)

	logf("%d nodes converged in %.1f s (virtual), %.1f MB heap per node", cfg.Nodes, res.ConvergeS, res.HeapBytesPerNode/(1<<20))

	// measureIdle waits cfg.Idle and returns the network's stream bytes
	// and messages per hour meanwhile, logging them split by protocol
	// and kind; false when the run was stopped.
	measureIdle := func(name string) (bytes, msgs float64, ok bool) {
		b0, m0, i0, pr0, k0, c0 := bytesNow(), counters(nodes), time.Now(), net.SentByProtocol(), kinds(nodes), opened.Load()
		a0, r0, e0 := rtAdded.Load(), rtRemoved.Load(), addrChanges.Load()
		if wait(cfg.Idle) {
			return 0, 0, false
		}
		hours := time.Since(i0).Hours()
		var open, most int
		for _, n := range live(nodes) {
			c := len(n.o.Host().Network().Conns())
			open, most = open+c, max(most, c)
		}
		perNodeHour := func(n int64) float64 { return float64(n) / hours / float64(cfg.Nodes) }
		logf("%s connections: %.1f open per node (at most %d), %.0f opened per node per hour; routing tables: %.1f peers added and %.1f removed per node per hour; %.1f address changes per node per hour; %.0f goroutines per node",
			name, float64(open)/float64(len(live(nodes))), most, perNodeHour(opened.Load()-c0)/2,
			perNodeHour(rtAdded.Load()-a0), perNodeHour(rtRemoved.Load()-r0), perNodeHour(addrChanges.Load()-e0),
			float64(runtime.NumGoroutine())/float64(len(live(nodes))))
		logf("%s messages per node per hour by kind:%s", name, perKind(k0, kinds(nodes), hours*float64(cfg.Nodes)))
		var split []string
		for p, b := range net.SentByProtocol() {
			split = append(split, fmt.Sprintf("%s %.0f kB", p, float64(b-pr0[p])/hours/float64(cfg.Nodes)/1000))
		}
		slices.Sort(split)
		logf("%s bytes sent per node per hour by protocol: %v", name, split)
		bytes, msgs = float64(bytesNow()-b0)/hours, float64(counters(nodes)-m0)/hours
		logf("%s: %.0f kB per node per hour, %.0f messages per node per hour", name, bytes/float64(cfg.Nodes)/1000, msgs/float64(cfg.Nodes))
		return bytes, msgs, true
	}

	// Idle upkeep.
	if wait(2 * heartbeat) { // past the joins' own traffic
		return res, ErrStopped
	}
	idleBytes, idleMsgs, ok := measureIdle("idle")
	if !ok {
		return res, ErrStopped
	}
	res.IdleBytesPerHour = idleBytes / float64(cfg.Nodes)

	// Delegations: distinct subnets, each asked by a random node.
	order := w.Sites()
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	seen := map[subnet.ID]bool{}
	var todo, later []world.Site
	for _, s := range order {
		id := tree.SmallestNonUnary(s.Addrs[0])
		if id == subnet.None || seen[id] {
			continue
		}
		seen[id] = true
		switch {
		case len(todo) < cfg.Subnets:
			todo = append(todo, s)
		case len(later) < cfg.Subnets/10:
			later = append(later, s)
		}
	}
	delegateAll := func(ss []world.Site, from []*simNode) (failed int) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		sem := make(chan struct{}, inFlight)
		picks := make([]*simNode, len(ss))
		for i := range ss {
			picks[i] = from[rng.IntN(len(from))]
		}
		for i, s := range ss {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				if stopped() {
					return
				}
				if _, err := picks[i].o.Delegate(ctx, "http://"+s.Addrs[0].String()+"/", s.Addrs[0]); err != nil {
					mu.Lock()
					if failed++; failed <= 3 {
						logf("delegation of %s by %s failed: %v", s.Addrs[0], picks[i].addr, err)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return failed
	}
	probesNow := func() (n int64) {
		probes.Range(func(_, v any) bool { n += *v.(*int64); return true })
		return n
	}
	b0, m0, p0, d0, k0 := bytesNow(), counters(nodes), probesNow(), time.Now(), kinds(nodes)
	failed := delegateAll(todo, nodes)
	if stopped() {
		return res, ErrStopped
	}
	// What decisions set off after their answer (notices, index updates,
	// organisation records put after coalescing, replica pushes) counts
	// too: the phase ends when the coordinators' notice queues are empty
	// (each sends its notices one at a time, and thousands of decisions
	// queue thousands of index updates), and a while after.
	answered := time.Now()
	for time.Since(answered) < drainLimit {
		var queued int64
		for _, n := range nodes {
			queued += n.o.Stats().Notices
		}
		if queued == 0 {
			break
		}
		if wait(10 * time.Second) {
			return res, ErrStopped
		}
	}
	logf("notices sent %.0f s after the last answer", time.Since(answered).Seconds())
	if wait(settle) {
		return res, ErrStopped
	}
	span := time.Since(d0).Hours()
	logf("delegation messages by kind, per delegation (idle upkeep included):%s", perKind(k0, kinds(nodes), float64(len(todo))))
	res.Delegations, res.Failed = len(todo)-failed, failed
	if res.Delegations == 0 {
		return res, fmt.Errorf("scale: no delegation succeeded of %d", len(todo))
	}
	phaseBytes, phaseMsgs, phaseProbes := float64(bytesNow()-b0), float64(counters(nodes)-m0), probesNow()-p0
	// The upkeep during the phase grows with what it delegated, from the
	// idle rate before it to the rate of the network holding it all
	// (measured next); delegations arrive evenly, so the phase's upkeep is
	// the mean of the two rates over its span.
	heldBytes, heldMsgs, ok := measureIdle("idle, holding the delegations")
	if !ok {
		return res, ErrStopped
	}
	res.IdleHeldBytesPerHour = heldBytes / float64(cfg.Nodes)
	if cfg.HeapProfile != nil {
		runtime.GC()
		if err := pprof.Lookup("heap").WriteTo(cfg.HeapProfile, 0); err != nil {
			return res, fmt.Errorf("scale: heap profile: %w", err)
		}
	}
	nd := float64(res.Delegations)
	res.BytesPerDelegation = (phaseBytes - (idleBytes+heldBytes)/2*span) / nd
	res.MessagesPerDelegation = (phaseMsgs - (idleMsgs+heldMsgs)/2*span) / nd
	res.ProbesPerDelegation = float64(phaseProbes) / nd
	logf("%d delegations (%d failed) in %.0f s: %.1f messages, %.0f bytes, %.2f probes each (%.1f messages, %.0f bytes with the upkeep of what they delegated)",
		res.Delegations, failed, span*3600, res.MessagesPerDelegation, res.BytesPerDelegation, res.ProbesPerDelegation,
		(phaseMsgs-idleMsgs*span)/nd, (phaseBytes-idleBytes*span)/nd)

	// Hops: resolves that miss every cache, one at a time; a resolve's
	// hops are the RESOLVE requests and DHT queries for shard keys its node
	// sent (not its routing table's refresh, which may run in that moment,
	// nor its heartbeats, which a node holding a hundred subnets sends
	// several of a second).
	const resolveKind = "micra/RESOLVE"
	var hops []float64
	var long, longLookups, longRedirects int // resolves of more than 6 hops, and of them those with a lookup, a redirect
	for range min(hopSample, len(todo)) {
		if stopped() {
			return res, ErrStopped
		}
		n := nodes[rng.IntN(len(nodes))]
		s := todo[rng.IntN(len(todo))]
		n.o.Invalidate(tree.Range(tree.SmallestNonUnary(s.Addrs[0])))
		id := n.o.Host().ID()
		st0 := n.o.Stats()
		q0, r0 := sent(id), st0.Kinds[resolveKind]
		if _, _, err := n.o.Resolve(ctx, s.Addrs[0]); err == nil {
			st := n.o.Stats()
			h := float64(sent(id) - q0 + st.Kinds[resolveKind] - r0)
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
	logf("hops: %d of %d resolves took more than 6, %d of them with a DHT lookup of the shard key, %d with a redirect", long, len(hops), longLookups, longRedirects)
	slices.Sort(hops)
	if len(hops) > 0 {
		res.HopsP50, res.HopsP90 = hops[len(hops)/2], hops[len(hops)*9/10]
	}

	// Churn: a share of the nodes (never the bootstrap peers) leaves
	// without a word; as many join. After the liveness timeout and the
	// coordinators' checks, every subnet delegated before must be held by
	// a live node (the orphans of the departed re-delegated when asked),
	// and none by two.
	if extra > 0 {
		held := map[subnet.Range]bool{}
		for _, n := range nodes {
			for _, d := range n.o.Owned() {
				if !d.Own {
					held[d.Subnet] = true
				}
			}
		}
		evs.armed.Store(true)
		churnAt := time.Now()
		for _, i := range rng.Perm(cfg.Nodes - cfg.Boot)[:extra] {
			n := nodes[cfg.Boot+i]
			n.gone = true
			net.Cut(n.addr)
		}
		res.Left = extra
		fresh := make([]*simNode, extra)
		for i := range fresh {
			if fresh[i], err = start(addrs[cfg.Nodes+i]); err != nil {
				return res, err
			}
		}
		if err := join(fresh, boot); err != nil {
			return res, err
		}
		nodes = append(nodes, fresh...)
		if wait(liveness + 2*time.Minute) {
			return res, ErrStopped
		}
		alive := live(nodes)
		if res.FailedAfterChurn = delegateAll(later, alive); res.FailedAfterChurn > 0 {
			logf("%d of %d delegations after the churn failed", res.FailedAfterChurn, len(later))
		}
		// Every subnet delegated before is asked for again, as a crawler
		// meeting its sites would: a held subnet answers with its node,
		// an orphan is decided afresh.
		var again []world.Site
		for _, s := range todo {
			if held[tree.Range(tree.SmallestNonUnary(s.Addrs[0]))] {
				again = append(again, s)
			}
		}
		if res.FailedAgain = delegateAll(again, alive); res.FailedAgain > 0 {
			logf("%d of %d subnets asked for again after the churn failed", res.FailedAgain, len(again))
		}
		if wait(2 * heartbeat) { // heartbeats settle who holds what
			return res, ErrStopped
		}
		holders := map[subnet.Range]int{}
		for _, n := range alive {
			for _, d := range n.o.Owned() {
				holders[d.Subnet]++
			}
		}
		gone := map[peer.ID]bool{}
		for _, n := range nodes {
			if n.gone {
				gone[n.o.Host().ID()] = true
			}
		}
		// A part whose node left is orphaned and not decided again (by
		// design): its sites fall back to the delegation around it.
		// It is lost only when no live node holds one.
		fellBack := 0
		covered := func(r subnet.Range) bool {
			for c, h := range holders {
				if h > 0 && c != r && c.ContainsRange(r) {
					return true
				}
			}
			return false
		}
		for r := range held {
			switch h := holders[r]; {
			case h == 0 && r != tree.Range(tree.SmallestNonUnary(r.Start)) && covered(r):
				fellBack++
			case h == 0:
				res.Lost++
				if res.Lost <= 10 { // what the shard says of it
					alive[0].o.Invalidate(r)
					d, ok, err := alive[0].o.Resolve(ctx, r.Start)
					at, _ := byPeer.Load(d.Node)
					logf("lost %s: resolves to %s on %s at %v (departed %v, orphaned %v, found %v, error %v); the churn at %s, its shard since:%s",
						r, d.Subnet, d.Node, at, gone[d.Node], d.Orphaned, ok, err, churnAt.Format("15:04:05.000"), evs.about(r.Start))
				}
			case h > 1:
				res.Doubled++
			}
		}
		for r, h := range holders {
			if h > 1 && !held[r] {
				res.Doubled++
			}
		}
		var adopted int64 // subnets taken up from heartbeat acks (lost ASSIGNs), over the whole run
		for _, n := range alive {
			adopted += n.o.Stats().Adopted
		}
		logf("churn: %d left, %d joined; %d subnets held before, %d lost, %d doubled; %d parts fell back to the range around them; %d taken up from heartbeat acks in the run",
			extra, extra, len(held), res.Lost, res.Doubled, fellBack, adopted)
	}
	for _, d := range dels {
		res.ClaimsRejected += d.Stats().ClaimsRejected
	}
	logf("probe claims rejected: %d (every node answers truly: false rejections)", res.ClaimsRejected)
	// The databases run without compaction (p2ptest.SimDB): how far
	// level 0 grew.
	var tables, most int
	var bytes int64
	for _, db := range dbs {
		n := len(db.Tables())
		tables, most = tables+n, max(most, n)
		lsm, _ := db.Size()
		bytes += lsm
	}
	logf("badger: %.1f tables and %.0f kB per node, at most %d tables", float64(tables)/float64(len(dbs)), float64(bytes)/float64(len(dbs))/1000, most)
	return res, nil
}

func allOf(nodes []*simNode, f func(*simNode) bool) bool {
	return count(nodes, f) == len(nodes)
}

func count(nodes []*simNode, f func(*simNode) bool) int {
	n := 0
	for _, x := range nodes {
		if f(x) {
			n++
		}
	}
	return n
}

// rejectionLog is a slog handler that passes the delegators' "probe claim
// rejected" records to logf, the first ten, and drops everything else.
type rejectionLog struct {
	logf func(format string, args ...any)
	n    *atomic.Int64
}

func (h *rejectionLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *rejectionLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "probe claim rejected" {
		return nil
	}
	if h.n.Add(1) > 10 {
		return nil
	}
	var b strings.Builder
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.logf("probe claim rejected:%s", b.String())
	return nil
}

func (h *rejectionLog) WithAttrs([]slog.Attr) slog.Handler { return h }

func (h *rejectionLog) WithGroup(string) slog.Handler { return h }
