package scale

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p"
	lpevent "github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
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

type simNode struct {
	addr netip.Addr
	o    *overlay.Overlay
	gone bool
}

// sim is one run's network: the world, the simulated links, the nodes
// and the counters every phase reads. It lives in one synctest bubble.
type sim struct {
	t                   *testing.T
	ctx                 context.Context
	cfg                 Config
	logf                func(format string, args ...any)
	liveness, heartbeat time.Duration
	rng                 *rand.Rand
	extra               int // nodes that leave in the churn, and join

	w     *world.World
	tree  *subnet.Tree
	addrs []netip.Addr // the world's node addresses: the first cfg.Nodes start, the rest join in the churn
	net   *p2ptest.Net
	sites map[netip.Addr]world.Site // by their first address

	byPeer sync.Map // peer.ID → netip.Addr
	probes sync.Map // netip.Addr → *int64: probes each node answered, read at the end
	// peer.ID → *atomic.Int64: DHT requests for shard keys (32 bytes) it
	// sent, answered by any node: its lookups and walks towards shards,
	// not its routing table's upkeep (peer IDs).
	queries sync.Map
	// The delegators' log: claim rejections only (every node answers its
	// probes truly here), the first ten.
	rejections  *slog.Logger
	evs         events // ownership records from the churn on
	known       known  // what each decision's search could choose from
	dbs         []*badger.DB
	dels        []*delegate.Delegator
	opened      atomic.Int64 // connections opened, counted at both ends
	rtAdded     atomic.Int64 // routing-table changes, all nodes
	rtRemoved   atomic.Int64
	addrChanges atomic.Int64 // hosts' address-change events (each starts a kad-dht refresh)
	connNotifee network.Notifiee

	nodes []*simNode      // every node started, those gone included
	boot  []peer.AddrInfo // the bootstrap peers: the first cfg.Boot nodes
}

// newSim generates cfg's world and the simulated network its nodes run
// on; no node starts yet. cfg has its defaults set and is valid.
func newSim(t *testing.T, cfg Config) (*sim, error) {
	s := &sim{t: t, ctx: t.Context(), cfg: cfg, logf: cfg.Log, liveness: cfg.Liveness, heartbeat: cfg.Liveness / 10,
		rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5ca1e)), extra: int(float64(cfg.Nodes) * cfg.Churn)}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	p := world.DefaultParams()
	p.Seed, p.Nodes, p.Sites, p.Port = cfg.Seed, cfg.Nodes+s.extra, 2*cfg.Subnets+cfg.Subnets/5, 0
	var err error
	if s.w, err = world.Generate(s.ctx, p); err != nil {
		return nil, err
	}
	if s.tree, err = s.w.Tree(s.ctx); err != nil {
		return nil, err
	}
	s.addrs = s.w.NodeAddrs()
	if len(s.addrs) < cfg.Nodes+s.extra {
		return nil, fmt.Errorf("scale: the world has %d node addresses, want %d", len(s.addrs), cfg.Nodes+s.extra)
	}
	oneWay := func(a, b netip.Addr) time.Duration { return s.w.RTTAddr(a, b) / 2 }
	s.net = p2ptest.NewMemNet(t, oneWay)
	if cfg.QUIC {
		s.net = p2ptest.NewNetWith(t, oneWay)
	}
	s.sites = map[netip.Addr]world.Site{}
	for _, site := range s.w.Sites() {
		s.sites[site.Addrs[0]] = site
	}
	s.rejections = slog.New(&rejectionLog{logf: s.logf, n: new(atomic.Int64)})
	s.connNotifee = &network.NotifyBundle{ConnectedF: func(network.Network, network.Conn) { s.opened.Add(1) }}
	return s, nil
}

// stopped reports whether cfg.Stop has closed.
func (s *sim) stopped() bool {
	select {
	case <-s.cfg.Stop:
		return true
	default:
		return false
	}
}

// wait sleeps d of virtual time, a second at a time, and reports
// whether the run was stopped meanwhile.
func (s *sim) wait(d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); {
		if s.stopped() {
			return true
		}
		time.Sleep(min(time.Second, time.Until(end)))
	}
	return s.stopped()
}

// between is the delegators' RTT between two nodes with Config.WorldRTTs:
// their places' in the world.
func (s *sim) between(a, b peer.ID) (time.Duration, bool) {
	x, ok1 := s.byPeer.Load(a)
	y, ok2 := s.byPeer.Load(b)
	if !ok1 || !ok2 {
		return 0, false
	}
	return s.w.RTTAddr(x.(netip.Addr), y.(netip.Addr)), true
}

// onQuery counts a DHT request from for a shard key.
func (s *sim) onQuery(from peer.ID, key []byte) {
	if len(key) != 32 {
		return
	}
	v, ok := s.queries.Load(from)
	if !ok {
		v, _ = s.queries.LoadOrStore(from, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(1)
}

// sent returns the DHT requests for shard keys p sent so far.
func (s *sim) sent(p peer.ID) int64 {
	if v, ok := s.queries.Load(p); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

// host starts the libp2p host of the node at a, its connections, routing
// and address changes counted.
func (s *sim) host(a netip.Addr) (host.Host, error) {
	// A volunteer's connection manager (overlay.NewHost's), not
	// libp2p's default.
	cm, err := connmgr.NewConnManager(overlay.DefaultConnLow, overlay.DefaultConnHigh, connmgr.WithGracePeriod(overlay.DefaultConnGrace))
	if err != nil {
		return nil, err
	}
	h := s.net.Host(s.t, nil, a, libp2p.ConnectionManager(cm))
	h.Network().Notify(s.connNotifee)
	if sub, err := h.EventBus().Subscribe(new(lpevent.EvtLocalAddressesUpdated)); err == nil {
		go func() {
			for range sub.Out() {
				s.addrChanges.Add(1)
			}
		}()
		s.t.Cleanup(func() { sub.Close() })
	}
	s.byPeer.Store(h.ID(), a)
	return h, nil
}

// prober answers the probes of the node at a by the world's latency
// model, counting them.
func (s *sim) prober(a netip.Addr) overlay.ProberFunc {
	return func(ctx context.Context, raw string) (time.Duration, error) {
		u, err := url.Parse(raw)
		if err != nil {
			return 0, err
		}
		sa, err := netip.ParseAddr(u.Hostname())
		site, ok := s.sites[sa]
		if err != nil || !ok {
			return 0, fmt.Errorf("no site at %s", u.Hostname())
		}
		n, _ := s.probes.LoadOrStore(a, new(int64))
		*n.(*int64)++
		rtt := s.w.RTT(a, site)
		time.Sleep(rtt) // a HEAD takes a round trip
		return rtt, nil
	}
}

// start starts the overlay of a node at a; t's cleanups close it.
func (s *sim) start(a netip.Addr) (*simNode, error) {
	h, err := s.host(a)
	if err != nil {
		return nil, err
	}
	opts := []delegate.Option{delegate.Threshold(threshold), delegate.Logger(s.rejections)}
	if s.cfg.WorldRTTs {
		opts = append(opts, delegate.Between(s.between))
	}
	del, err := delegate.New(opts...)
	if err != nil {
		return nil, err
	}
	db := p2ptest.SimDB(s.t)
	s.dbs = append(s.dbs, db)
	s.dels = append(s.dels, del)
	o, err := overlay.New(h, s.tree, db, overlay.WithDelegator(candidates{del, s}), overlay.WithProber(s.prober(a)),
		overlay.OwnAddress(a), overlay.Logger(s.evs.logger(a)), overlay.OnDHTRequest(s.onQuery), overlay.Liveness(s.heartbeat, s.liveness),
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
	rt.PeerAdded = func(p peer.ID) { added(p); s.rtAdded.Add(1) }
	rt.PeerRemoved = func(p peer.ID) { removed(p); s.rtRemoved.Add(1) }
	s.t.Cleanup(func() { o.Close() })
	return &simNode{addr: a, o: o}, nil
}

// join joins nodes through boot, 50 at a time, and returns the first
// error.
func (s *sim) join(nodes []*simNode, boot []peer.AddrInfo) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(nodes))
	sem := make(chan struct{}, 50) // arrivals at once
	for _, n := range nodes {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := bootstrap.Join(s.ctx, n.o.Host(), n.o.Host().ID(), boot); err != nil {
				errs <- fmt.Errorf("join %s: %w", n.addr, err)
				return
			}
			if err := n.o.Bootstrap(s.ctx); err != nil {
				errs <- fmt.Errorf("bootstrap %s: %w", n.addr, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// owns reports whether n has converged: its own subnet's claim was
// answered, and it, or the node of its subnet that claimed first, holds
// the subnet.
func owns(n *simNode) bool {
	d, ok := n.o.Cached(n.addr)
	return ok && d.Own && !d.Orphaned
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

// live returns the nodes not gone.
func live(nodes []*simNode) []*simNode {
	var out []*simNode
	for _, n := range nodes {
		if !n.gone {
			out = append(out, n)
		}
	}
	return out
}

// converge starts cfg.Nodes nodes, joins them (the bootstrap peers
// first) and waits until every node owns its subnet; the result holds
// the time that took and the heap per node.
func (s *sim) converge() (Result, error) {
	cfg := s.cfg
	t0 := time.Now()
	s.nodes = make([]*simNode, cfg.Nodes)
	var err error
	for i := range s.nodes {
		if s.nodes[i], err = s.start(s.addrs[i]); err != nil {
			return Result{}, err
		}
	}
	for _, n := range s.nodes[:cfg.Boot] {
		s.boot = append(s.boot, peer.AddrInfo{ID: n.o.Host().ID(), Addrs: n.o.Host().Addrs()})
	}
	if err := s.join(s.nodes[1:cfg.Boot], s.boot[:1]); err != nil {
		return Result{}, err
	}
	if err := s.join(s.nodes[cfg.Boot:], s.boot); err != nil {
		return Result{}, err
	}
	if err := s.nodes[0].o.Bootstrap(s.ctx); err != nil { // the first node: its peers came to it
		return Result{}, err
	}
	for !allOf(s.nodes, owns) {
		if time.Since(t0) > 10*time.Minute {
			var bad []string
			for _, n := range s.nodes {
				if !owns(n) {
					d, ok := n.o.Cached(n.addr)
					bad = append(bad, fmt.Sprintf("%s (subnet %s: %v %+v)", n.addr, s.tree.Range(s.tree.SmallestNonUnary(n.addr)), ok, d))
				}
			}
			return Result{}, fmt.Errorf("scale: %d of %d nodes' own subnets not claimed after 10 minutes: %v", len(bad), len(s.nodes), bad)
		}
		if s.wait(time.Second) {
			return Result{}, ErrStopped
		}
	}
	res := Result{Nodes: cfg.Nodes, ConvergeS: time.Since(t0).Seconds()}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	res.HeapBytesPerNode = float64(ms.HeapInuse) / float64(cfg.Nodes)
	s.logf("%d nodes converged in %.1f s (virtual), %.1f MB heap per node", cfg.Nodes, res.ConvergeS, res.HeapBytesPerNode/(1<<20))
	return res, nil
}
