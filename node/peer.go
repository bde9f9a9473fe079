package node

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/micra-net/micra/bootstrap"
	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/indexer"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/overlay/delegate"
	"github.com/micra-net/micra/results"
	"github.com/micra-net/micra/subnet"
)

// peerConfig is what both roles build their assembly from: the parts of
// Config and IndexerConfig that every peer has, parsed.
type peerConfig struct {
	role    string // "node" or "indexer": named in errors
	dataDir string
	db      badger.Options
	listen  []ma.Multiaddr
	relays  []peer.AddrInfo
	host    []overlay.HostOption // appended: they win
	// delegate are the delegator's options after its logger.
	delegate []delegate.Option
	peers    []peer.AddrInfo // bootstrap peers
	keys     []ed25519.PublicKey
	// liveness and grace are the coordination settings (zero: the
	// overlay's liveness; no withholding).
	liveness, grace time.Duration
	private         bool         // egress.Policy.AllowPrivate
	tree            *subnet.Tree // the configured snapshot; nil: read from snapshot
	snapshot        string       // a snapshot file; "" for the one built into micra
}

// assembly is what every peer, node or indexer, is built from: its
// identity and database, libp2p host, delegator, pubsub router, the
// overlay on the running snapshot with the switch to released ones, the
// join, background work, and the ordered Close. The role builds its own
// parts between start and startOverlay and names what shutdown closes
// besides.
type assembly struct {
	log     *slog.Logger
	started time.Time
	dataDir string
	peers   []peer.AddrInfo // the bootstrap peers
	base    *subnet.Tree    // the configured snapshot
	first   *subnet.Tree    // the snapshot the peer starts on: base, or the released one it switched to
	prev    *subnet.Tree    // the snapshot before first, after a restart
	prevAt  time.Time       // and its release's activation

	sk     crypto.PrivKey
	db     *badger.DB
	h      host.Host
	del    *delegate.Delegator
	ps     overlay.Option       // the pubsub router the peer's overlays share
	psStop context.CancelFunc   // stops it
	oopts  []overlay.Option     // every snapshot's overlay's options
	cur    atomic.Pointer[live] // the running snapshot and its overlay; swapped by a switch

	ctx    context.Context // background work; cancelled by shutdown
	cancel context.CancelFunc
	wg     sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

// live is what runs on one snapshot: the tree, the overlay built on it,
// and what the role hangs on it.
type live struct {
	tree *subnet.Tree
	o    *overlay.Overlay
	// A node's: the ranges it held under the previous snapshot, sorted by
	// start; after settled, an address in one of them that the overlay
	// does not place is no longer this node's to crawl.
	held    []subnet.Range
	settled time.Time
	// An indexer's: the indexer on o and its HTTP handler.
	ix      *indexer.Indexer
	handler http.Handler
}

// begin starts the assembly's lifetime, logging to log: its background
// work runs until shutdown.
func (a *assembly) begin(log *slog.Logger) {
	a.log, a.started = log, time.Now()
	a.ctx, a.cancel = context.WithCancel(context.Background())
}

// start reads the configured snapshot, opens the data directory (identity
// and database), finds the snapshot to run (resumeSnapshot), and starts the host, the delegator and pubsub. What it
// opened is closed by shutdown, also when it fails partway.
func (a *assembly) start(pc peerConfig) error {
	a.dataDir, a.peers, a.base = pc.dataDir, pc.peers, pc.tree
	var err error
	if a.base == nil {
		if a.base, err = loadTree(pc.snapshot); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(pc.dataDir, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if a.sk, err = overlay.LoadIdentity(filepath.Join(pc.dataDir, "identity.key")); err != nil {
		return err
	}
	if a.db, err = badger.Open(pc.db); err != nil {
		return fmt.Errorf("opening the database in %s (is another %s running on it?): %w", pc.dataDir, pc.role, err)
	}
	a.first, a.prev, a.prevAt = resumeSnapshot(a.db, pc.dataDir, a.base, a.log)
	hopts := []overlay.HostOption{overlay.ListenAddrs(pc.listen...)}
	if len(pc.relays) > 0 {
		hopts = append(hopts, overlay.StaticRelays(pc.relays))
	}
	if a.h, err = overlay.NewHost(a.sk, append(hopts, pc.host...)...); err != nil {
		return err
	}
	if a.del, err = delegate.New(append([]delegate.Option{delegate.Logger(a.log.With("subsystem", "delegate"))}, pc.delegate...)...); err != nil {
		return err
	}
	psCtx, psStop := context.WithCancel(context.Background())
	a.psStop = psStop
	ps, err := overlay.NewPubSub(psCtx, a.h, a.log.With("subsystem", "overlay"))
	if err != nil {
		return err
	}
	a.ps = overlay.WithPubSub(ps)
	a.oopts = peerOverlayOptions(pc, a.del)
	return nil
}

// peerOverlayOptions are the overlay options every peer has, from pc.
func peerOverlayOptions(pc peerConfig, del *delegate.Delegator) []overlay.Option {
	oopts := []overlay.Option{
		overlay.Egress(egress.Policy{AllowPrivate: pc.private}), overlay.WithDelegator(del), overlay.BootstrapPeers(pc.peers),
		// Result batches are verified (signature, sizes) before this
		// peer relays them; audits open the records' evidence.
		overlay.WithEvidenceOpener(overlay.EvidenceOpenerFunc(results.OpenEvidence)),
	}
	if len(pc.keys) > 0 {
		oopts = append(oopts, overlay.ReleaseKeys(releaseDir(pc.dataDir), pc.keys...))
	}
	if pc.grace > 0 {
		oopts = append(oopts, overlay.Withholding(overlay.WithholdConfig{Grace: pc.grace}))
	}
	if pc.liveness > 0 {
		// Heartbeats every tenth of it; the checks at least every quarter
		// of it. The closest-peer lists keep their default lifetime: a
		// lookup costs tens of DHT requests, maintenance watches the
		// routing table between lookups, and a request to a peer that is
		// no longer the coordinator is redirected.
		oopts = append(oopts, overlay.Liveness(pc.liveness/10, pc.liveness))
		if pc.liveness/4 < defaultMaintenance {
			oopts = append(oopts, overlay.Maintenance(pc.liveness/4, overlay.DefaultClosestTTL))
		}
	}
	return oopts
}

// startOverlay starts the overlay on the first snapshot with the peer's
// options, then role's and then extra (which win), and keeps those for the
// overlays of later snapshots. It returns the first snapshot's live.
func (a *assembly) startOverlay(role []overlay.Option, extra []overlay.Option) (*live, error) {
	a.oopts = append(append(append(append(a.oopts, role...), overlay.Logger(a.log.With("subsystem", "overlay"))), a.ps), extra...)
	first := a.oopts
	if a.prev != nil {
		first = append(slices.Clip(first), overlay.Previous(a.prev, a.prevAt))
	}
	o, err := overlay.New(a.h, a.first, a.db, first...)
	if err != nil {
		return nil, err
	}
	l := &live{tree: a.first, o: o}
	a.cur.Store(l)
	return l, nil
}

// runSwitches switches the peer to each release when it is due (switchTo)
// until shutdown.
func (a *assembly) runSwitches(switchTo func(context.Context, subnet.Release) error) {
	a.wg.Go(func() { switchLoop(a.ctx, a.log, a.ov, switchTo) })
}

// reopen moves from old to the snapshot of release r (the package's
// reopen, on the peer's host, database and options).
func (a *assembly) reopen(ctx context.Context, old *live, r subnet.Release) (*subnet.Tree, *overlay.Overlay, error) {
	return reopen(ctx, a.log, a.h, a.db, old.tree, old.o, r, a.oopts)
}

// switched stores and logs that the peer moved from old to tree by
// release r, began at began; attrs are the role's for the log.
func (a *assembly) switched(old, tree *subnet.Tree, r subnet.Release, began time.Time, attrs ...any) {
	recordSwitch(a.db, a.log, a.base.ID(), old, tree, r)
	a.log.Info("switched snapshots", append([]any{"from", old.ID().Short(), "to", tree.ID().Short(),
		"activation", r.Activation.Format(time.RFC3339), "late", began.Sub(r.Activation).Round(time.Millisecond),
		"took", time.Since(began).Round(time.Millisecond)}, attrs...)...)
}

// ov returns the running overlay; nil before the peer built it.
func (a *assembly) ov() *overlay.Overlay {
	if l := a.cur.Load(); l != nil {
		return l.o
	}
	return nil
}

// snapshot returns the running snapshot.
func (a *assembly) snapshot() *subnet.Tree {
	if l := a.cur.Load(); l != nil {
		return l.tree
	}
	return a.first
}

// dial connects to peers (bootstrap.Join), returning those that answered.
func (a *assembly) dial(ctx context.Context, peers []peer.AddrInfo, opts ...bootstrap.Option) ([]peer.ID, error) {
	opts = append([]bootstrap.Option{bootstrap.Logger(a.log.With("subsystem", "bootstrap"))}, opts...)
	return bootstrap.Join(ctx, a.h, a.h.ID(), peers, opts...)
}

// bootstrapDHT bootstraps the running overlay's DHT, which claims the
// peer's own subnet.
func (a *assembly) bootstrapDHT(ctx context.Context) error {
	if err := a.ov().Bootstrap(ctx); err != nil {
		return fmt.Errorf("DHT bootstrap: %w", err)
	}
	return nil
}

// join dials peers and bootstraps the DHT once one answered.
func (a *assembly) join(ctx context.Context, peers []peer.AddrInfo, opts ...bootstrap.Option) ([]peer.ID, error) {
	got, err := a.dial(ctx, peers, opts...)
	if err != nil {
		return nil, fmt.Errorf("joining the overlay: %w", err)
	}
	return got, a.bootstrapDHT(ctx)
}

// ID is the peer's id.
func (a *assembly) ID() peer.ID { return a.h.ID() }

// Addrs are the peer's listen multiaddrs, each ending in /p2p/<its id>, as
// other peers give them to --bootstrap.
func (a *assembly) Addrs() []string {
	var out []string
	for _, m := range a.h.Addrs() {
		out = append(out, m.String()+"/p2p/"+a.h.ID().String())
	}
	return out
}

// Overlay is the peer's running overlay; a snapshot switch replaces it.
func (a *assembly) Overlay() *overlay.Overlay { return a.ov() }

// closeStep is one part shutdown stops: its name, in errors and the log,
// and how.
type closeStep struct {
	name string
	f    func() error
}

// closeLimit bounds each step of shutdown but the host's (hostCloseLimit):
// a part that has not closed by then is left behind and named in the
// error, so that a peer that hangs in one part still closes the others
// and its database.
const closeLimit = time.Minute

// shutdown stops the peer once, in order: front (the role's parts that
// serve outside the peer), the background work (cancelled, then waited
// for), parts (the role's parts on the overlay), the overlay, pubsub, the
// host, stores (the role's stores besides the database), and the database
// last. Each step runs within closeLimit, the host's within
// hostCloseLimit. It returns every step's error; later calls return the
// first call's.
func (a *assembly) shutdown(front, parts, stores []closeStep) error {
	a.closeOnce.Do(func() {
		var errs []error
		step := func(s closeStep) {
			start := time.Now()
			if err := within(closeLimit, s.f); err != nil {
				errs = append(errs, fmt.Errorf("closing the %s: %w", s.name, err))
			}
			a.log.Debug("closed", "part", s.name, "took", time.Since(start).Round(time.Millisecond))
		}
		steps := slices.Concat(front, []closeStep{{"background work", func() error { a.cancel(); a.wg.Wait(); return nil }}}, parts)
		if o := a.ov(); o != nil {
			steps = append(steps, closeStep{"overlay", o.Close})
		}
		if a.psStop != nil {
			steps = append(steps, closeStep{"pubsub", func() error { a.psStop(); return nil }})
		}
		if a.h != nil {
			steps = append(steps, closeStep{"host", a.closeHost})
		}
		steps = append(steps, stores...)
		if a.db != nil {
			steps = append(steps, closeStep{"database", a.db.Close})
		}
		for _, s := range steps {
			step(s)
		}
		a.closeErr = errors.Join(errs...)
	})
	return a.closeErr
}

// closeHost closes the libp2p host within hostCloseLimit; a host left
// behind is logged, not an error (see hostCloseLimit).
func (a *assembly) closeHost() error {
	err := within(hostCloseLimit, a.h.Close)
	if errors.Is(err, errLeftBehind) {
		// Not a failure of the peer: its state is closed after it either
		// way, and on a starved machine a healthy host can take this long
		// too.
		a.log.Warn("the libp2p host did not close in time; left behind", "limit", hostCloseLimit)
		return nil
	}
	return err
}

// hostCloseLimit bounds the libp2p host's Close. go-libp2p v0.51's host
// can hang in it for good: an identify push that arrives while the host
// closes blocks in the event bus, holding the lock that AutoNAT v2's Close
// waits for (seen once, closing a swarm of 50 nodes in micra bench crawl).
// The peer then leaves the host's goroutines behind rather than never
// finishing, and says so in its log; Close does not fail for it, since a
// host on a machine starved of CPU can take as long (TestRollover under
// CI's load).
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

// httpServer is an HTTP server of a peer: the node's dashboard, the
// indexer's search page and API.
type httpServer struct {
	srv  *http.Server
	addr string     // the address it listens on
	done chan error // Serve's result
}

// serveHTTP listens on addr and serves srv there; name says what it
// serves in the error.
func serveHTTP(name, addr string, srv *http.Server) (*httpServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	s := &httpServer{srv: srv, addr: ln.Addr().String(), done: make(chan error, 1)}
	go func() { s.done <- srv.Serve(ln) }()
	return s, nil
}

// step is shutdown's step that stops s, giving the requests it serves
// grace to end.
func (s *httpServer) step(name string, grace time.Duration) closeStep {
	return closeStep{name, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		err := s.srv.Shutdown(ctx)
		if herr := <-s.done; !errors.Is(herr, http.ErrServerClosed) {
			err = errors.Join(err, herr)
		}
		return err
	}}
}
