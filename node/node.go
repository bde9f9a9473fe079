package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/micra-net/micra/bootstrap"
	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/internal/cooldown"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/overlay/delegate"
	"github.com/micra-net/micra/requests"
	"github.com/micra-net/micra/results"
	"github.com/micra-net/micra/subnet"
	"github.com/micra-net/micra/subnet/embedded"
)

// Option adjusts a node beyond its Config: what a program embedding nodes
// (the demo, tests) sets and a volunteer does not.
type Option func(*options)

type options struct {
	tree       *subnet.Tree
	logger     *slog.Logger
	resolver   crawl.Resolver
	probeScale float64
	split      *time.Duration
	delegate   []delegate.Option
	overlay    []overlay.Option
	host       []overlay.HostOption
	crawl      []crawl.Option
	results    []results.Option
	wrapSink   func(crawl.Sink) crawl.Sink
	rejoin     time.Duration // first wait between rounds of rejoin dials (tests)
	joinWait   time.Duration // first wait after a failed bootstrap dial (tests)
}

// Tree sets the subnet tree, instead of Config.Snapshot or the snapshot
// built into micra.
func Tree(t *subnet.Tree) Option { return func(o *options) { o.tree = t } }

// Logger sets the node's logger (default: text on stderr at
// Config.LogLevel).
func Logger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// Resolver sets the resolver of the crawler, the probes and crawl
// requests, instead of Config.DNS.
func Resolver(r crawl.Resolver) Option { return func(o *options) { o.resolver = r } }

// ProbeScale divides every probe's RTT by f before it is reported: on an
// emulated Internet served at time scale f, the coordinators then compare
// unscaled RTTs with their threshold.
func ProbeScale(f float64) Option { return func(o *options) { o.probeScale = f } }

// SplitMargin sets how much slower than the probe this node won a range
// with a server's first fetches, and then a probe of the server, must be
// (and 1.5 times) for the part of the range holding it to be searched
// apart (overlay.Split; default 10 ms, unscaled); 0 or less turns
// splitting off.
func SplitMargin(d time.Duration) Option { return func(o *options) { o.split = &d } }

// DelegateOptions, OverlayOptions, HostOptions, CrawlOptions and
// ResultOptions are appended to the options the node derives from its
// Config, so they win.
func DelegateOptions(opts ...delegate.Option) Option {
	return func(o *options) { o.delegate = append(o.delegate, opts...) }
}

// OverlayOptions: see DelegateOptions.
func OverlayOptions(opts ...overlay.Option) Option {
	return func(o *options) { o.overlay = append(o.overlay, opts...) }
}

// HostOptions: see DelegateOptions.
func HostOptions(opts ...overlay.HostOption) Option {
	return func(o *options) { o.host = append(o.host, opts...) }
}

// CrawlOptions: see DelegateOptions.
func CrawlOptions(opts ...crawl.Option) Option {
	return func(o *options) { o.crawl = append(o.crawl, opts...) }
}

// ResultOptions: see DelegateOptions.
func ResultOptions(opts ...results.Option) Option {
	return func(o *options) { o.results = append(o.results, opts...) }
}

// WrapResults wraps what the crawler hands its results to (the outbox)
// with f: a program embedding nodes may tee or transform what the node
// publishes. The reliability tests use it to make a node fabricate its
// records. f's sink must honour crawl.Sink's contract.
func WrapResults(f func(crawl.Sink) crawl.Sink) Option {
	return func(o *options) { o.wrapSink = f }
}

// Node is one running volunteer: its database, libp2p host, overlay with
// the delegation procedure, crawler, results outbox and dashboard. New
// builds and starts it; Join connects it to the overlay; Close stops it in
// order. Its methods are safe for concurrent use.
type Node struct {
	cfg       Config
	opt       options
	log       *slog.Logger
	started   time.Time
	base      *subnet.Tree // the configured snapshot
	first     *subnet.Tree // the snapshot the node starts on: base, or the released one it switched to
	own       netip.Addr   // the address this node crawls from, when known
	peers     []peer.AddrInfo
	threshold time.Duration

	db  *badger.DB
	sk  crypto.PrivKey
	h   host.Host
	del *delegate.Delegator
	ob  *results.Outbox
	cr  *crawl.Crawler

	cur    atomic.Pointer[live] // the running snapshot and its overlay; swapped by a switch
	psStop context.CancelFunc   // stops the pubsub router the node's overlays share
	oopts  []overlay.Option     // the overlay's options, for the next snapshot's
	prev   *subnet.Tree         // the snapshot before the running one, after a restart
	prevAt time.Time            // and its release's activation

	joined    chan struct{} // closed when Join succeeded
	joinOnce  sync.Once
	keepOnce  sync.Once // starts keepJoined
	removeReq func()
	send      *requests.Sender  // crawl requests and watches from this node
	resolve   requests.Resolver // a host's address: literals as they are, names through the configured DNS
	dash      *http.Server
	dashAddr  string
	dashDone  chan error

	ctx    context.Context // background work; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	probesRun  atomic.Int64
	probeRTT   rttBook
	rate       rateSeries
	recalAt    *cooldown.Table[subnet.Range] // subnets re-delegated after calibration
	splitQ     chan crawl.Slow               // far servers waiting for their split
	cal        *crawl.Calibrator             // the crawler's: its far test confirms a far server's probe
	judgeEvery time.Duration                 // how often a judge has that room per host: half the withholding grace
	closeOnce  sync.Once
	closeErr   error
}

// New opens the node's database and identity in cfg.DataDir, builds every
// part and starts them; the node listens but has not joined the overlay
// until Join. A second node on the same data directory fails with an
// error naming it. On error everything opened is closed again.
func New(cfg Config, opts ...Option) (n *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	n = &Node{cfg: cfg, started: time.Now(), joined: make(chan struct{}),
		recalAt: cooldown.New[subnet.Range](maxRecalibrations), splitQ: make(chan crawl.Slow, splitQueue)}
	for _, o := range opts {
		o(&n.opt)
	}
	n.log = n.opt.logger
	if n.log == nil {
		var level slog.Level
		_ = level.UnmarshalText([]byte(cfg.LogLevel))
		n.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Close())
			n = nil
		}
	}()
	if err := n.settle(); err != nil {
		return n, err
	}
	if err := n.open(); err != nil {
		return n, err
	}
	n.first, n.prev, n.prevAt = resumeSnapshot(n.db, cfg.DataDir, n.base, n.log)
	if err := n.build(); err != nil {
		return n, err
	}
	if err := n.serveDashboard(); err != nil {
		return n, err
	}
	n.wg.Go(n.sample)
	return n, nil
}

// settle derives what the parts need from the configuration.
func (n *Node) settle() error {
	cfg := &n.cfg
	if lim, _ := ParseSize(cfg.MemoryLimit); lim > 0 {
		// Process-wide: one node per process, as "micra node" runs it.
		debug.SetMemoryLimit(lim)
	}
	n.threshold, _ = time.ParseDuration(cfg.Threshold)
	n.base = n.opt.tree
	if n.base == nil {
		var err error
		if n.base, err = loadTree(cfg.Snapshot); err != nil {
			return err
		}
	}
	if cfg.SourceAddr != "" {
		n.own = netip.MustParseAddr(cfg.SourceAddr)
	}
	for _, s := range cfg.Listen {
		if !n.own.IsValid() {
			if a, err := ma.NewMultiaddr(s); err == nil {
				if ip, err := manetIP(a); err == nil && ip.IsGlobalUnicast() && egress.Classify(ip) == "" {
					n.own = ip
				}
			}
		}
	}
	peers, err := bootstrap.ParseList("bootstrap", joinList(cfg.Bootstrap))
	if err != nil {
		return err
	}
	env, err := bootstrap.FromEnv()
	if err != nil {
		return err
	}
	var filePeers []peer.AddrInfo
	if cfg.BootstrapFile != "" {
		if filePeers, err = bootstrap.LoadFile(cfg.BootstrapFile); err != nil {
			return err
		}
	}
	n.peers = bootstrap.Merge(peers, filePeers, env, bootstrap.Defaults())
	if n.opt.resolver == nil && cfg.DNS != "" {
		n.opt.resolver = crawl.DNSResolver(netip.MustParseAddrPort(cfg.DNS), n.own)
	}
	var r crawl.Resolver = net.DefaultResolver
	if n.opt.resolver != nil {
		r = n.opt.resolver
	}
	n.resolve = requests.NetResolver(r)
	return nil
}

// open opens the data directory: identity and database.
func (n *Node) open() error {
	if err := os.MkdirAll(n.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	var err error
	if n.sk, err = overlay.LoadIdentity(filepath.Join(n.cfg.DataDir, "identity.key")); err != nil {
		return err
	}
	opts := crawl.BadgerOptions(filepath.Join(n.cfg.DataDir, "db")).WithLogger(badgerLog{n.log.With("subsystem", "badger")})
	if n.db, err = badger.Open(opts); err != nil {
		return fmt.Errorf("opening the database in %s (is another node running on it?): %w", n.cfg.DataDir, err)
	}
	return nil
}

// build makes the parts, in the order their dependencies need: host,
// delegator, outbox, crawler, overlay (which probes, refetches and takes
// forwarded URLs through the crawler); then it starts the outbox, the
// crawl-request protocol and the hand-on loop. Whatever a peer can ask of
// the node exists before the overlay answers peers, so no handler waits.
func (n *Node) build() error {
	cfg := &n.cfg
	listen, err := ParseListen(cfg.Listen)
	if err != nil {
		return err
	}
	hopts := []overlay.HostOption{overlay.ListenAddrs(listen...)}
	if relays, _ := cfg.relays(); len(relays) > 0 { // validated
		hopts = append(hopts, overlay.StaticRelays(relays))
	}
	if n.h, err = overlay.NewHost(n.sk, append(hopts, n.opt.host...)...); err != nil {
		return err
	}
	n.send = requests.NewSender(n.h, n.findPeer, n.log)
	if n.del, err = delegate.New(append([]delegate.Option{delegate.Threshold(n.threshold),
		delegate.Logger(n.log.With("subsystem", "delegate"))}, n.opt.delegate...)...); err != nil {
		return err
	}
	outboxCap, _ := ParseSize(cfg.OutboxCap)
	if outboxCap == 0 {
		outboxCap = 512 << 20
	}
	if n.ob, err = results.NewOutbox(n.db, n.sk, n.first.ID(), append([]results.Option{
		results.Acks(cfg.Indexers), results.OutboxCap(outboxCap, outboxCap/16), results.Shards(cfg.ResultShards),
		results.Logger(n.log.With("subsystem", "outbox")),
	}, n.opt.results...)...); err != nil {
		return err
	}
	loc, _ := cfg.location()
	windows, _ := cfg.CrawlWindows()
	sched, err := crawl.NewSchedule(loc, windows...)
	if err != nil {
		return err
	}
	if err := n.buildCrawler(loc, windows); err != nil {
		return err
	}
	oopts := []overlay.Option{
		overlay.Egress(n.egressPolicy()),
		overlay.WithDelegator(n.del), overlay.WithProber(overlay.ProberFunc(n.probe)),
		overlay.WithLoad(n.load), overlay.BootstrapPeers(n.peers), overlay.ProbeWindows(sched, 20*time.Second),
		// Result batches are verified (signature, sizes) before this node
		// relays them, as indexers do.
		// Audits: this node judges records of the shards it coordinates
		// and refetches pages for other coordinators.
		overlay.WithEvidenceOpener(overlay.EvidenceOpenerFunc(results.OpenEvidence)),
		overlay.WithRefetcher(overlay.RefetcherFunc(n.refetch)),
		overlay.AskCrawl(n.send.AskCrawl),
		overlay.Logger(n.log.With("subsystem", "overlay")),
	}
	if n.own.IsValid() {
		oopts = append(oopts, overlay.OwnAddress(n.own))
		p := n.egressPolicy()
		if err := p.CheckAddr(n.own); err != nil {
			n.log.Warn("own address is special-purpose: its subnet is not claimed", "error", err)
		}
	}
	if keys, _ := cfg.releaseKeys(); len(keys) > 0 { // validated
		oopts = append(oopts, overlay.ReleaseKeys(releaseDir(cfg.DataDir), keys...))
	}
	if grace, _ := time.ParseDuration(cfg.WithholdGrace); grace > 0 { // validated
		oopts = append(oopts, overlay.Withholding(overlay.WithholdConfig{Grace: grace}))
		n.judgeEvery = grace / 2
	}
	if live, _ := time.ParseDuration(cfg.Liveness); live > 0 {
		oopts = append(oopts, overlay.Liveness(live/10, live))
		if live/4 < defaultMaintenance {
			oopts = append(oopts, overlay.Maintenance(live/4, overlay.DefaultClosestTTL))
		}
	}
	psCtx, psStop := context.WithCancel(context.Background())
	n.psStop = psStop
	ps, err := overlay.NewPubSub(psCtx, n.h, n.log.With("subsystem", "overlay"))
	if err != nil {
		return err
	}
	n.oopts = append(append(oopts, overlay.WithPubSub(ps)), n.opt.overlay...)
	first := n.oopts
	if n.prev != nil {
		first = append(slices.Clip(first), overlay.Previous(n.prev, n.prevAt))
	}
	o, err := overlay.New(n.h, n.first, n.db, first...)
	if err != nil {
		return err
	}
	n.cur.Store(&live{tree: n.first, o: o})
	if err := n.ob.Start(o); err != nil {
		return err
	}
	if err := n.serveRequests(); err != nil {
		return err
	}
	n.wg.Go(func() { n.splitLoop(n.ctx) })
	n.wg.Go(func() { switchLoop(n.ctx, n.log, n.ov, n.switchTo) })
	return nil
}

// egressPolicy is the node's policy for the addresses of web servers: with
// AllowPrivateNetworks special-purpose ones are allowed (the crawler's own
// guard gets crawl.AllowPrivateNetworks and the ports), else refused where
// they enter, as seeds, crawl requests, delegations and probes.
func (n *Node) egressPolicy() egress.Policy {
	return egress.Policy{AllowPrivate: n.cfg.AllowPrivateNetworks}
}

// buildCrawler makes the crawler. Its Router knows nothing until the
// overlay exists: links found before then wait in the outgoing store.
func (n *Node) buildCrawler(loc *time.Location, windows []crawl.Window) error {
	cfg := &n.cfg
	var calCfg crawl.CalibrationConfig
	if margin := crawl.DefaultFarIncrease; n.opt.split == nil || *n.opt.split > 0 {
		if n.opt.split != nil {
			margin = *n.opt.split
		}
		calCfg.Reference = n.wonRTT
		calCfg.FarIncrease = margin
		if f := n.opt.probeScale; f > 0 {
			// Fetches take f times the world's RTTs (wonRTT scales the
			// reference back): the far check's margin scales with them.
			calCfg.FarIncrease = time.Duration(f * float64(margin))
		}
	}
	cal, err := crawl.NewCalibrator(calCfg)
	if err != nil {
		return err
	}
	n.cal = cal
	bw, _ := ParseSize(cfg.Bandwidth)
	daily, _ := ParseSize(cfg.DailyTransfer)
	batchWait, _ := time.ParseDuration(cfg.BatchWait)
	copts := []crawl.Option{
		crawl.Workers(cfg.Workers, min(cfg.Workers, runtime.GOMAXPROCS(0)), defaultCrawlQueue),
		crawl.Batching(defaultBatchBytes, batchWait),
		crawl.Routing(requests.NewRouter(liveOverlay{n}, n.h.ID(), n.gone)), crawl.Windows(loc, windows...), crawl.Bandwidth(bw, daily),
		crawl.Calibration(cal, n.onSlow), crawl.Logger(n.log.With("subsystem", "crawl")),
	}
	if limit, _ := ParseSize(cfg.DiskCap); limit > 0 { // validated
		copts = append(copts, crawl.Hold((&diskCap{dir: cfg.DataDir, limit: limit, every: diskEvery}).check))
	}
	if n.own.IsValid() && cfg.SourceAddr != "" {
		copts = append(copts, crawl.SourceAddr(n.own))
	}
	if n.opt.resolver != nil {
		copts = append(copts, crawl.DNS(n.opt.resolver))
	}
	if cfg.AllowPrivateNetworks {
		copts = append(copts, crawl.AllowPrivateNetworks(cfg.AllowPorts...))
	}
	var sink crawl.Sink = n.ob
	if n.opt.wrapSink != nil {
		sink = n.opt.wrapSink(sink)
	}
	n.cr, err = crawl.New(n.db, sink, append(copts, n.opt.crawl...)...)
	return err
}

// Join connects the node to the overlay through its bootstrap peers and
// the peers it remembers from earlier runs (dialled with backoff) and
// bootstraps the DHT, which claims the node's own subnet. With neither
// the node is the first of its network and waits for others. When none
// answers, a node that has been part of a network resumes it alone and
// keeps dialling them in the background (so does any node that later
// loses every peer); a node that never joined fails with a clear error.
func (n *Node) Join(ctx context.Context) error {
	configured, known := n.joinPeers()
	n.logResumed(len(known))
	defer n.keepOnce.Do(func() { n.wg.Go(n.keepJoined) })
	peers := bootstrap.Merge(configured, known)
	if len(peers) == 0 {
		if n.resumed() {
			n.log.Info("no bootstrap peers and none known: this node resumes its network alone; others join it with --bootstrap", "addrs", n.Addrs())
		} else {
			n.log.Warn("no bootstrap peers: this node starts a network; others join it with --bootstrap", "addrs", n.Addrs())
		}
		n.alone(ctx)
		return nil
	}
	bopts := []bootstrap.Option{bootstrap.Logger(n.log.With("subsystem", "bootstrap"))}
	if n.opt.joinWait > 0 {
		bopts = append(bopts, bootstrap.Backoff(n.opt.joinWait, 4*n.opt.joinWait))
	}
	got, err := bootstrap.Join(ctx, n.h, n.h.ID(), peers, bopts...)
	if err != nil {
		if ctx.Err() != nil || len(known) == 0 {
			return fmt.Errorf("joining the overlay: %w", err)
		}
		n.log.Warn("no peer answers: this node resumes and keeps trying them", "configured", len(configured), "known", len(known), "error", err)
		if len(configured) == 0 {
			n.alone(ctx) // it started its network: it goes on alone, as it did
		}
		return nil
	}
	if err := n.ov().Bootstrap(ctx); err != nil {
		return fmt.Errorf("DHT bootstrap: %w", err)
	}
	n.log.Info("joined the overlay", "peer", n.h.ID(), "peers", len(n.h.Network().Peers()), "answered", len(got))
	n.joinOnce.Do(func() { close(n.joined) })
	if err := n.saveKnown(); err != nil {
		n.log.Warn("storing the connected peers", "error", err)
	}
	return nil
}

// alone runs the node as the only one of its network: it claims its own
// subnet in its own DHT and hands links on from now.
func (n *Node) alone(ctx context.Context) {
	_, err := n.ov().ClaimOwn(ctx)
	if err != nil && n.own.IsValid() && !errors.Is(err, overlay.ErrForbidden) { // forbidden: warned at New
		n.log.Info("own subnet not claimed yet; retried with the heartbeats", "error", err)
	}
	n.joinOnce.Do(func() { close(n.joined) })
}

// resumed reports whether the node's database holds work of an earlier
// run: subnets, queued or outgoing requests, or unacknowledged batches.
func (n *Node) resumed() bool {
	st := n.cr.Stats()
	return len(n.ov().Owned()) > 0 || st.Queued > 0 || st.Outgoing > 0 || n.ob.Stats().Batches > 0
}

// logResumed says what the node took over from an earlier run.
func (n *Node) logResumed(known int) {
	if !n.resumed() && known == 0 {
		return
	}
	st := n.cr.Stats()
	n.log.Info("resuming from the data directory", "subnets", len(n.ov().Owned()), "queued", st.Queued, "outgoing", st.Outgoing,
		"outbox_batches", n.ob.Stats().Batches, "known_peers", known, "snapshot", n.snapshot().ID())
}

// Run joins the overlay, runs until ctx ends and then closes the node.
func (n *Node) Run(ctx context.Context) error {
	if err := n.Join(ctx); err != nil {
		return errors.Join(err, n.Close())
	}
	<-ctx.Done()
	n.log.Info("shutting down")
	return n.Close()
}

// ID is the node's peer id.
func (n *Node) ID() peer.ID { return n.h.ID() }

// Addrs are the node's listen multiaddrs with its peer id, as other nodes
// give them to --bootstrap.
func (n *Node) Addrs() []string { return p2pAddrs(n.h) }

// p2pAddrs are h's listen multiaddrs, each ending in /p2p/<h's id>.
func p2pAddrs(h host.Host) []string {
	var out []string
	for _, a := range h.Addrs() {
		out = append(out, a.String()+"/p2p/"+h.ID().String())
	}
	return out
}

// Overlay is the node's running overlay (for tests and the demo's
// measurements); a snapshot switch replaces it.
func (n *Node) Overlay() *overlay.Overlay { return n.ov() }

// ov returns the running overlay; nil before the node built it.
func (n *Node) ov() *overlay.Overlay {
	if l := n.cur.Load(); l != nil {
		return l.o
	}
	return nil
}

// snapshot returns the running snapshot.
func (n *Node) snapshot() *subnet.Tree {
	if l := n.cur.Load(); l != nil {
		return l.tree
	}
	return n.first
}

// DelegationStats are the counters of the delegation procedure this node
// ran as a coordinator.
func (n *Node) DelegationStats() delegate.Stats { return n.del.Stats() }

// CrawlStats are the crawler's counters.
func (n *Node) CrawlStats() crawl.Stats { return n.cr.Stats() }

// OutboxStats are the outbox's counters.
func (n *Node) OutboxStats() results.OutboxStats { return n.ob.Stats() }

// DashboardAddr is the address the dashboard listens on, "" without one.
func (n *Node) DashboardAddr() string { return n.dashAddr }

// Submit sends seed URLs into the overlay: each goes to the node that owns
// its subnet (delegating the subnet first when nobody does), this one
// included.
func (n *Node) Submit(ctx context.Context, reqs ...crawl.Request) (requests.SubmitResult, error) {
	return requests.Submit(ctx, n.ov(), reqs, requests.LocalCrawl(n.crawlLocal), requests.Resolve(n.resolve))
}

// Close stops the node in order — dashboard, background work, crawler
// (whose last batches go to the outbox), outbox, overlay, host, database —
// so that nothing stored is lost. It is idempotent.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		var errs []error
		step := func(name string, f func() error) {
			start := time.Now()
			if err := f(); err != nil {
				errs = append(errs, fmt.Errorf("closing the %s: %w", name, err))
			}
			n.log.Debug("closed", "part", name, "took", time.Since(start).Round(time.Millisecond))
		}
		if n.dash != nil {
			step("dashboard", func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				err := n.dash.Shutdown(ctx)
				if herr := <-n.dashDone; !errors.Is(herr, http.ErrServerClosed) {
					err = errors.Join(err, herr)
				}
				return err
			})
		}
		if n.h != nil && n.db != nil && n.ctx.Err() == nil {
			step("list of peers", n.saveKnown)
		}
		n.cancel()
		n.wg.Wait()
		if n.removeReq != nil {
			n.removeReq()
		}
		if n.cr != nil {
			step("crawler", n.cr.Close)
		}
		if n.ob != nil {
			step("outbox", n.ob.Close)
		}
		if o := n.ov(); o != nil {
			step("overlay", o.Close)
		}
		if n.psStop != nil {
			n.psStop()
		}
		if n.h != nil {
			step("host", func() error {
				err := within(hostCloseLimit, n.h.Close)
				if errors.Is(err, errLeftBehind) {
					// Not a failure of the node: its state is closed
					// below either way, and on a starved machine a
					// healthy host can take this long too.
					n.log.Warn("the libp2p host did not close in time; left behind", "limit", hostCloseLimit)
					return nil
				}
				return err
			})
		}
		if n.db != nil {
			step("database", n.db.Close)
		}
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// hostCloseLimit bounds the libp2p host's Close. go-libp2p v0.51's host
// can hang in it for good: an identify push that arrives while the host
// closes blocks in the event bus, holding the lock that AutoNAT v2's Close
// waits for (seen once, closing a swarm of 50 nodes in micra bench crawl). The node
// then leaves the host's goroutines behind rather than never finishing, and
// says so in its log; Close does not fail for it, since a host on a machine
// starved of CPU can take as long (TestRollover under CI's load).
const hostCloseLimit = 15 * time.Second

// errLeftBehind is within's error when f did not return in time.
var errLeftBehind = errors.New("left behind")

// within runs f and returns its error, or one wrapping errLeftBehind once
// limit passed without f returning; f then goes on in the background.
func within(limit time.Duration, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("not done after %v: %w", limit, errLeftBehind)
	}
}

// crawlLocal queues crawl requests (seeds, other nodes' crawl requests)
// in the crawler, durably.
func (n *Node) crawlLocal(ctx context.Context, from peer.ID, reqs []crawl.Request) error {
	return n.cr.Submit(ctx, reqs...)
}

// probe answers a coordinator's probe request: timed HTTP HEADs from this
// node's address, the least of a few, kept for the status by the subnet of
// the address the probe reached (its own resolution of the host).
func (n *Node) probe(ctx context.Context, u string) (time.Duration, error) {
	n.probesRun.Add(1)
	rtt, a, err := n.cr.Fetcher().ProbeAddr(ctx, u, crawl.DefaultProbeAttempts)
	if err != nil {
		return 0, err
	}
	if f := n.opt.probeScale; f > 0 {
		rtt = time.Duration(float64(rtt) / f)
	}
	if a.IsValid() {
		t := n.snapshot()
		n.probeRTT.put(t.Range(t.SmallestNonUnary(a)), rtt)
	}
	return rtt, nil
}

// refetch fetches a page afresh for a coordinator's audit, with the
// crawler's politeness and pipeline.
func (n *Node) refetch(ctx context.Context, u string) (overlay.Page, error) {
	o, err := n.cr.Refetch(ctx, u)
	if err != nil {
		return overlay.Page{}, err
	}
	return overlay.Page{URL: o.URL, FinalURL: o.FinalURL, Status: o.Status, Fingerprint: o.Fingerprint, At: o.Time, NoIndex: o.NoIndex}, nil
}

// onSlow turns a calibration signal into a re-delegation of the server's
// subnet, at most one per subnet per recalibrateGap, or, for a far server,
// into a split (onFar).
func (n *Node) onSlow(s crawl.Slow) {
	o := n.ov()
	if o == nil {
		return // a crawl resumed before the overlay was built
	}
	if s.Far {
		n.onFar(s)
		return
	}
	t := n.snapshot()
	r := t.Range(t.SmallestNonUnary(s.Addr))
	if _, ok := n.recalAt.Use(r, time.Now(), recalibrateGap); !ok {
		return
	}
	reason := fmt.Sprintf("calibration: %s took %v, usually %v (%d slow fetches)", s.Page, s.RTT, s.Baseline, s.Count)
	n.wg.Go(func() {
		ctx, cancel := context.WithTimeout(n.ctx, 2*time.Minute)
		defer cancel()
		d, err := o.Recalibrate(ctx, s.Addr, reason)
		if err != nil {
			n.log.Warn("re-delegation after calibration failed", "subnet", r, "error", err)
			return
		}
		n.log.Info("re-delegated after calibration", "subnet", r, "to", d.Node, "reason", reason)
	})
}

// The overlay's and the crawler's defaults that Config.Liveness and
// Config.BatchWait adjust.
const (
	defaultMaintenance = 15 * time.Second // overlay: ownership, replica and liveness checks
	defaultBatchBytes  = 256 << 10        // crawl: a batch of records is sealed at this size
	defaultCrawlQueue  = 64               // crawl: fetched pages waiting for a parser
)

const (
	recalibrateGap    = 10 * time.Minute
	maxRecalibrations = 4096
)

// load is what the node declares to coordinators: its capacity and its
// current load, both in pages per day (the load measured over the last
// hour of samples).
func (n *Node) load() (capacity, load uint64) {
	return uint64(n.cfg.Capacity), uint64(max(n.rate.perDay(), 0))
}

// loadTree reads a snapshot file, or the built-in snapshot for "".
func loadTree(file string) (*subnet.Tree, error) {
	if file == "" {
		return embedded.Tree()
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	defer f.Close()
	t, err := subnet.ReadSnapshot(f)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", file, err)
	}
	return t, nil
}

// manetIP returns the IP address of a multiaddr's first component.
func manetIP(a ma.Multiaddr) (netip.Addr, error) {
	for _, code := range []int{ma.P_IP4, ma.P_IP6} {
		if v, err := a.ValueForProtocol(code); err == nil {
			return netip.ParseAddr(v)
		}
	}
	return netip.Addr{}, fmt.Errorf("%s has no IP address", a)
}

func joinList(s []string) string { return strings.Join(s, ",") }

// badgerLog sends badger's log to slog at debug level (warnings and
// errors at their level).
type badgerLog struct{ l *slog.Logger }

func (b badgerLog) Errorf(f string, a ...any)   { b.l.Error(fmt.Sprintf(f, a...)) }
func (b badgerLog) Warningf(f string, a ...any) { b.l.Warn(fmt.Sprintf(f, a...)) }
func (b badgerLog) Infof(f string, a ...any)    { b.l.Debug(fmt.Sprintf(f, a...)) }
func (b badgerLog) Debugf(f string, a ...any)   { b.l.Debug(fmt.Sprintf(f, a...)) }
