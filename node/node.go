package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	logOut     io.Writer
	resolver   crawl.Resolver
	probeScale float64
	onProbe    func(self peer.ID, reached netip.Addr, rtt time.Duration)
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

// LogOutput sets where the node's own logger (the one it makes without
// Logger: text at Config.LogLevel) writes, instead of stderr.
func LogOutput(w io.Writer) Option { return func(o *options) { o.logOut = w } }

// Resolver sets the resolver of the crawler, the probes and crawl
// requests, instead of Config.DNS.
func Resolver(r crawl.Resolver) Option { return func(o *options) { o.resolver = r } }

// ProbeScale divides every probe's RTT by f before it is reported: on an
// emulated Internet served at time scale f, the coordinators then compare
// unscaled RTTs with their threshold.
func ProbeScale(f float64) Option { return func(o *options) { o.probeScale = f } }

// ProbeObserver has f called after each probe this node answers that
// reached a server, with the node's id, the address reached and the RTT
// it reports (after ProbeScale): what the demo fits its probes' noise to.
// f must be quick and safe for concurrent use.
func ProbeObserver(f func(self peer.ID, reached netip.Addr, rtt time.Duration)) Option {
	return func(o *options) { o.onProbe = f }
}

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
	assembly
	cfg Config
	set settings // cfg, parsed
	opt options
	own netip.Addr // the address this node crawls from, when known

	ob *results.Outbox
	cr *crawl.Crawler

	joined    chan struct{} // closed when Join succeeded
	joinOnce  sync.Once
	keepOnce  sync.Once // starts keepJoined
	removeReq func()
	send      *requests.Sender  // crawl requests and watches from this node
	resolve   requests.Resolver // a host's address: literals as they are, names through the configured DNS
	dash      *httpServer       // nil without a dashboard

	probesRun  atomic.Int64
	probeRTT   rttBook
	rate       rateSeries
	recalAt    *cooldown.Table[subnet.Range] // subnets re-delegated after calibration
	splitQ     chan crawl.Slow               // far servers waiting for their split
	cal        *crawl.Calibrator             // the crawler's: its far test confirms a far server's probe
	judgeEvery time.Duration                 // how often a judge has that room per host: half the withholding grace
}

// New opens the node's database and identity in cfg.DataDir, builds every
// part and starts them; the node listens but has not joined the overlay
// until Join. A second node on the same data directory fails with an
// error naming it. On error everything opened is closed again.
func New(cfg Config, opts ...Option) (n *Node, err error) {
	set, err := cfg.parse()
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	n = &Node{cfg: cfg, set: set, joined: make(chan struct{}),
		recalAt: cooldown.New[subnet.Range](maxRecalibrations), splitQ: make(chan crawl.Slow, splitQueue)}
	for _, o := range opts {
		o(&n.opt)
	}
	log := n.opt.logger
	if log == nil {
		var out io.Writer = os.Stderr
		if n.opt.logOut != nil {
			out = n.opt.logOut
		}
		log = slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: set.level}))
	}
	n.begin(log)
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Close())
			n = nil
		}
	}()
	pc, err := n.settle()
	if err != nil {
		return n, err
	}
	if err := n.start(pc); err != nil {
		return n, err
	}
	if err := n.build(); err != nil {
		return n, err
	}
	if err := n.serveDashboard(); err != nil {
		return n, err
	}
	n.wg.Go(n.sample)
	return n, nil
}

// settle derives what the parts need from the parsed configuration: the
// peer's assembly, the address the node crawls from and its resolver.
func (n *Node) settle() (peerConfig, error) {
	cfg, set := &n.cfg, &n.set
	if set.memoryLimit > 0 {
		// Process-wide: one node per process, as "micra node" runs it.
		debug.SetMemoryLimit(set.memoryLimit)
	}
	n.own = set.source
	for _, a := range set.listen {
		if ip, err := manetIP(a); !n.own.IsValid() && err == nil && ip.IsGlobalUnicast() && egress.Classify(ip) == "" {
			n.own = ip
		}
	}
	peers, err := bootstrap.ParseList("bootstrap", strings.Join(cfg.Bootstrap, ","))
	if err != nil {
		return peerConfig{}, err
	}
	env, err := bootstrap.FromEnv()
	if err != nil {
		return peerConfig{}, err
	}
	var filePeers []peer.AddrInfo
	if cfg.BootstrapFile != "" {
		if filePeers, err = bootstrap.LoadFile(cfg.BootstrapFile); err != nil {
			return peerConfig{}, err
		}
	}
	if n.opt.resolver == nil && set.dns.IsValid() {
		n.opt.resolver = crawl.DNSResolver(set.dns, n.own)
	}
	var r crawl.Resolver = net.DefaultResolver
	if n.opt.resolver != nil {
		r = n.opt.resolver
	}
	n.resolve = requests.NetResolver(r)
	return peerConfig{
		role: "node", dataDir: cfg.DataDir, listen: set.listen, relays: set.relays, host: n.opt.host,
		db:       crawl.BadgerOptions(filepath.Join(cfg.DataDir, "db")).WithLogger(badgerLog{n.log.With("subsystem", "badger")}),
		delegate: append([]delegate.Option{delegate.Threshold(set.threshold)}, n.opt.delegate...),
		peers:    bootstrap.Merge(peers, filePeers, env, bootstrap.Defaults()),
		keys:     set.releaseKeys, liveness: set.liveness, grace: set.withholdGrace, private: cfg.AllowPrivateNetworks, tree: n.opt.tree, snapshot: cfg.Snapshot,
	}, nil
}

// build makes the node's parts on the assembly, in the order their
// dependencies need: outbox, crawler, overlay (which probes, refetches
// and takes forwarded URLs through the crawler); then it starts the
// outbox, the crawl-request protocol and the hand-on loop. Whatever a peer
// can ask of the node exists before the overlay answers peers, so no
// handler waits.
func (n *Node) build() error {
	set := &n.set
	n.send = requests.NewSender(n.h, n.findPeer, n.log)
	outboxCap := set.outboxCap
	if outboxCap == 0 {
		outboxCap = 512 << 20
	}
	var err error
	if n.ob, err = results.NewOutbox(n.db, n.sk, n.first.ID(), append([]results.Option{
		results.Acks(n.cfg.Indexers), results.OutboxCap(outboxCap, outboxCap/16), results.Shards(n.cfg.ResultShards),
		results.Logger(n.log.With("subsystem", "outbox")),
	}, n.opt.results...)...); err != nil {
		return err
	}
	sched, err := crawl.NewSchedule(set.loc, set.windows...)
	if err != nil {
		return err
	}
	if err := n.buildCrawler(); err != nil {
		return err
	}
	oopts := []overlay.Option{
		overlay.WithProber(overlay.ProberFunc(n.probe)), overlay.WithLoad(n.load), overlay.ProbeWindows(sched, 20*time.Second),
		// Audits: this node judges records of the shards it coordinates
		// and refetches pages for other coordinators.
		overlay.WithRefetcher(overlay.RefetcherFunc(n.refetch)), overlay.AskCrawl(n.send.AskCrawl),
	}
	if n.own.IsValid() {
		oopts = append(oopts, overlay.OwnAddress(n.own))
		p := n.egressPolicy()
		if err := p.CheckAddr(n.own); err != nil {
			n.log.Warn("own address is special-purpose: its subnet is not claimed", "error", err)
		}
	}
	n.judgeEvery = set.withholdGrace / 2
	l, err := n.startOverlay(oopts, n.opt.overlay)
	if err != nil {
		return err
	}
	if err := n.ob.Start(l.o); err != nil {
		return err
	}
	if err := n.serveRequests(); err != nil {
		return err
	}
	n.wg.Go(func() { n.splitLoop(n.ctx) })
	n.runSwitches(n.switchTo)
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
func (n *Node) buildCrawler() error {
	cfg, set := &n.cfg, &n.set
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
	copts := []crawl.Option{
		crawl.Workers(cfg.Workers, min(cfg.Workers, runtime.GOMAXPROCS(0)), defaultCrawlQueue),
		crawl.Batching(defaultBatchBytes, set.batchWait),
		crawl.Routing(requests.NewRouter(liveOverlay{n}, n.h.ID(), n.gone)), crawl.Windows(set.loc, set.windows...), crawl.Bandwidth(set.bandwidth, set.dailyTransfer),
		crawl.Calibration(cal, n.onSlow), crawl.Logger(n.log.With("subsystem", "crawl")),
	}
	if set.diskCap > 0 {
		copts = append(copts, crawl.Hold((&diskCap{dir: cfg.DataDir, limit: set.diskCap, every: diskEvery}).check))
	}
	if n.own.IsValid() && set.source.IsValid() {
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
	var bopts []bootstrap.Option
	if n.opt.joinWait > 0 {
		bopts = append(bopts, bootstrap.Backoff(n.opt.joinWait, 4*n.opt.joinWait))
	}
	got, err := n.dial(ctx, peers, bopts...)
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
	if err := n.bootstrapDHT(ctx); err != nil {
		return err
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

// DelegationStats are the counters of the delegation procedure this node
// ran as a coordinator.
func (n *Node) DelegationStats() delegate.Stats { return n.del.Stats() }

// CrawlStats are the crawler's counters.
func (n *Node) CrawlStats() crawl.Stats { return n.cr.Stats() }

// OutboxStats are the outbox's counters.
func (n *Node) OutboxStats() results.OutboxStats { return n.ob.Stats() }

// DashboardAddr is the address the dashboard listens on, "" without one.
func (n *Node) DashboardAddr() string {
	if n.dash == nil {
		return ""
	}
	return n.dash.addr
}

// Submit sends seed URLs into the overlay: each goes to the node that owns
// its subnet (delegating the subnet first when nobody does), this one
// included.
func (n *Node) Submit(ctx context.Context, reqs ...crawl.Request) (requests.SubmitResult, error) {
	return requests.Submit(ctx, n.ov(), reqs, requests.LocalCrawl(n.crawlLocal), requests.Resolve(n.resolve))
}

// Close stops the node in order — dashboard, background work, crawler
// (whose last batches go to the outbox), outbox, overlay, host, database —
// each part within a limit (assembly.shutdown), so that nothing stored is
// lost. It is idempotent.
func (n *Node) Close() error {
	var front, parts []closeStep
	if n.dash != nil {
		front = append(front, n.dash.step("dashboard", 3*time.Second))
	}
	if n.h != nil && n.db != nil && n.ctx.Err() == nil {
		front = append(front, closeStep{"list of peers", n.saveKnown})
	}
	if n.removeReq != nil {
		parts = append(parts, closeStep{"crawl-request handler", func() error { n.removeReq(); return nil }})
	}
	if n.cr != nil {
		parts = append(parts, closeStep{"crawler", n.cr.Close})
	}
	if n.ob != nil {
		parts = append(parts, closeStep{"outbox", n.ob.Close})
	}
	return n.shutdown(front, parts, nil)
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
		if n.opt.onProbe != nil {
			n.opt.onProbe(n.h.ID(), a, rtt)
		}
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

// badgerLog sends badger's log to slog at debug level (warnings and
// errors at their level).
type badgerLog struct{ l *slog.Logger }

func (b badgerLog) Errorf(f string, a ...any)   { b.l.Error(fmt.Sprintf(f, a...)) }
func (b badgerLog) Warningf(f string, a ...any) { b.l.Warn(fmt.Sprintf(f, a...)) }
func (b badgerLog) Infof(f string, a ...any)    { b.l.Debug(fmt.Sprintf(f, a...)) }
func (b badgerLog) Debugf(f string, a ...any)   { b.l.Debug(fmt.Sprintf(f, a...)) }
