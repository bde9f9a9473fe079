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
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/micra-net/micra/bootstrap"
	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/indexer"
	"github.com/micra-net/micra/indexer/index"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/overlay/delegate"
	"github.com/micra-net/micra/results"
	"github.com/micra-net/micra/subnet"
)

// IndexerConfig configures an indexer: a peer that joins the overlay,
// coordinates the shards that fall to it like any peer (it does not crawl
// or probe, and its announcements, capacity 0, keep it out of the
// candidates), takes result batches, stores them in an index and serves
// search over HTTP.
type IndexerConfig struct {
	DataDir   string          // the database and the identity key
	Listen    []string        // libp2p listen multiaddrs (see ParseListen)
	Bootstrap []peer.AddrInfo // none: wait for nodes to connect
	HTTP      string          // address of the search page and API
	ReadOnly  bool            // search and export only
	// Store is the DSN of a PostgreSQL database to store the index in
	// (index.OpenPostgres); "" keeps it in the indexer's own database
	// (index.New). With ReadOnly the store is opened read-only and the
	// indexer serves search only (indexer.SearchOnly): it takes no batch.
	Store    string
	Snapshot string       // subnet snapshot file; "" for the built-in one
	Tree     *subnet.Tree // the hierarchy, instead of Snapshot
	// AllowPrivateNetworks lets the indexer submit seeds on, and
	// coordinate delegations of, private, loopback and other
	// special-purpose addresses, as Config.AllowPrivateNetworks does for a
	// node (the emulated Internet); off, they are refused with an error
	// naming the address.
	AllowPrivateNetworks bool
	// SnapshotKeys are the release keys whose snapshot releases the
	// indexer takes and switches to at their activation, as nodes do
	// (Config.SnapshotKeys, in the same "ed25519:BASE64" form); none: it
	// runs Snapshot for good.
	SnapshotKeys []string
	Logger       *slog.Logger // nil: slog.Default()
	Indexer      []indexer.Option
	Overlay      []overlay.Option
	Host         []overlay.HostOption
	Delegate     []delegate.Option
	// JoinNow joins the overlay before StartIndexer returns; otherwise
	// it joins in the background, bounded by StartIndexer's ctx.
	JoinNow bool
}

// Indexer is a running indexer.
type Indexer struct {
	h        host.Host
	db       *badger.DB
	idx      index.Store
	log      *slog.Logger
	cfg      IndexerConfig
	base     subnet.SnapshotID // the configured snapshot
	oopts    []overlay.Option
	cur      atomic.Pointer[indexerLive]
	httpAddr string
	started  time.Time
	queries  *queryLog
	closers  []func() error // in closing order
}

// indexerLive is what an indexer runs on one snapshot.
type indexerLive struct {
	tree    *subnet.Tree
	o       *overlay.Overlay
	ix      *indexer.Indexer
	handler http.Handler
}

// ParseListen parses libp2p listen multiaddrs, naming the first bad one.
func ParseListen(addrs []string) ([]ma.Multiaddr, error) {
	var out []ma.Multiaddr
	for _, s := range addrs {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return nil, fmt.Errorf("listen address %q: %w", s, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// StartIndexer opens the indexer's database, index, host and overlay,
// starts the indexer and its HTTP API, and joins the overlay. On an error
// it closes what it opened.
func StartIndexer(ctx context.Context, cfg IndexerConfig) (x *Indexer, err error) {
	x = &Indexer{started: time.Now(), queries: newQueryLog()}
	var stack []func() error // closers, last opened first
	defer func() {
		slices.Reverse(stack)
		x.closers = stack
		if err != nil {
			err = errors.Join(err, x.Close())
			x = nil
		}
	}()
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	listen, err := ParseListen(cfg.Listen)
	if err != nil {
		return x, err
	}
	tree := cfg.Tree
	if tree == nil {
		if tree, err = loadTree(cfg.Snapshot); err != nil {
			return x, err
		}
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return x, err
	}
	sk, err := overlay.LoadIdentity(filepath.Join(cfg.DataDir, "identity.key"))
	if err != nil {
		return x, err
	}
	db, err := badger.Open(index.BadgerOptions(filepath.Join(cfg.DataDir, "db")))
	if err != nil {
		return x, fmt.Errorf("opening the database in %s (is another indexer running on it?): %w", cfg.DataDir, err)
	}
	stack = append(stack, db.Close)
	var idx index.Store
	if cfg.Store != "" {
		idx, err = index.OpenPostgres(ctx, cfg.Store, index.PostgresOptions{ReadOnly: cfg.ReadOnly}, index.Logger(log.With("subsystem", "index")))
	} else {
		idx, err = index.New(db, index.Logger(log.With("subsystem", "index")))
	}
	if err != nil {
		return x, err
	}
	stack = append(stack, func() error { idx.Close(); return nil })
	h, err := overlay.NewHost(sk, append([]overlay.HostOption{overlay.ListenAddrs(listen...)}, cfg.Host...)...)
	if err != nil {
		return x, err
	}
	x.h, x.db, x.idx, x.log, x.cfg, x.base = h, db, idx, log, cfg, tree.ID()
	stack = append(stack, h.Close)
	del, err := delegate.New(append([]delegate.Option{delegate.Logger(log.With("subsystem", "delegate"))}, cfg.Delegate...)...)
	if err != nil {
		return x, err
	}
	psCtx, psStop := context.WithCancel(context.Background())
	stack = append(stack, func() error { psStop(); return nil })
	ps, err := overlay.NewPubSub(psCtx, h, log.With("subsystem", "overlay"))
	if err != nil {
		return x, err
	}
	x.oopts = []overlay.Option{overlay.Egress(egress.Policy{AllowPrivate: cfg.AllowPrivateNetworks}), overlay.WithDelegator(del), overlay.WithPubSub(ps),
		overlay.WithEvidenceOpener(overlay.EvidenceOpenerFunc(results.OpenEvidence)),
		overlay.Announce(5 * time.Minute), overlay.NoCrawl(), overlay.BootstrapPeers(cfg.Bootstrap), overlay.Logger(log.With("subsystem", "overlay"))}
	var keys []ed25519.PublicKey
	for _, s := range cfg.SnapshotKeys {
		k, err := subnet.ParseReleaseKey(s)
		if err != nil {
			return x, fmt.Errorf("snapshot keys: %w", err)
		}
		keys = append(keys, k)
	}
	if len(keys) > 0 {
		x.oopts = append(x.oopts, overlay.ReleaseKeys(releaseDir(cfg.DataDir), keys...))
	}
	x.oopts = append(x.oopts, cfg.Overlay...)
	first, prev, prevAt := resumeSnapshot(db, cfg.DataDir, tree, log)
	oopts := x.oopts
	var accept []subnet.SnapshotID
	if prev != nil {
		oopts = append(slices.Clip(oopts), overlay.Previous(prev, prevAt))
		accept = append(accept, prev.ID())
	}
	o, err := overlay.New(h, first, db, oopts...)
	if err != nil {
		return x, err
	}
	l := &indexerLive{tree: first, o: o}
	x.cur.Store(l)
	stack = append(stack, func() error { return x.cur.Load().o.Close() })
	if err := x.attach(l, accept...); err != nil {
		return x, err
	}
	stack = append(stack, func() error { return x.cur.Load().ix.Close() })
	swCtx, swCancel := context.WithCancel(context.Background())
	swDone := make(chan struct{})
	go func() {
		defer close(swDone)
		switchLoop(swCtx, log, func() *overlay.Overlay { return x.cur.Load().o }, x.switchTo)
	}()
	stack = append(stack, func() error { swCancel(); <-swDone; return nil })

	ln, err := net.Listen("tcp", cfg.HTTP)
	if err != nil {
		return x, fmt.Errorf("HTTP: %w", err)
	}
	x.httpAddr = ln.Addr().String()
	srv := &http.Server{Handler: x.indexerHTTP(), ReadHeaderTimeout: 10 * time.Second}
	httpDone := make(chan error, 1)
	go func() { httpDone <- srv.Serve(ln) }()
	stack = append(stack, func() error {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := srv.Shutdown(sctx)
		if herr := <-httpDone; !errors.Is(herr, http.ErrServerClosed) {
			err = errors.Join(err, herr)
		}
		return err
	})

	if len(cfg.Bootstrap) == 0 {
		log.Warn("no bootstrap peers: waiting for nodes to connect to this indexer")
		return x, nil
	}
	join := func() error {
		if _, err := bootstrap.Join(ctx, h, h.ID(), cfg.Bootstrap); err != nil {
			return fmt.Errorf("joining the overlay: %w", err)
		}
		if err := x.cur.Load().o.Bootstrap(ctx); err != nil {
			return fmt.Errorf("DHT bootstrap: %w", err)
		}
		return nil
	}
	if cfg.JoinNow {
		return x, join()
	}
	go func() {
		if err := join(); err != nil && ctx.Err() == nil {
			log.Error("joining the overlay failed", "error", err)
		}
	}()
	return x, nil
}

// ID is the indexer's peer id.
func (x *Indexer) ID() peer.ID { return x.h.ID() }

// Addrs are the indexer's listen multiaddrs with its peer id.
func (x *Indexer) Addrs() []string { return p2pAddrs(x.h) }

// HTTPAddr is the address the search page and API listen on.
func (x *Indexer) HTTPAddr() string { return x.httpAddr }

// Indexer is the running indexer (its index, audits and statistics); a
// snapshot switch replaces it, and its counters start again.
func (x *Indexer) Indexer() *indexer.Indexer { return x.cur.Load().ix }

// Overlay is the indexer's running overlay.
func (x *Indexer) Overlay() *overlay.Overlay { return x.cur.Load().o }

// attach starts the indexer on l's overlay, taking batches of l's snapshot
// and of accept.
func (x *Indexer) attach(l *indexerLive, accept ...subnet.SnapshotID) error {
	opts := []indexer.Option{indexer.Logger(x.log.With("subsystem", "indexer"))}
	if len(accept) > 0 {
		opts = append(opts, indexer.AcceptSnapshots(accept...))
	}
	if x.cfg.ReadOnly && x.cfg.Store != "" {
		opts = append(opts, indexer.SearchOnly())
	}
	ix, err := indexer.New(l.o, x.idx, x.db, append(opts, x.cfg.Indexer...)...)
	if err != nil {
		return err
	}
	l.ix, l.handler = ix, ix.Handler(index.HTTPOptions{ReadOnly: x.cfg.ReadOnly})
	return nil
}

// switchTo moves the indexer to release r's snapshot (see switch.go): it
// stops taking batches, starts an overlay on the new snapshot and an
// indexer on it that takes the batches of both snapshots, as nodes that
// have not switched yet still seal them under the old one. Batches
// published meanwhile are published again by their nodes' outboxes.
func (x *Indexer) switchTo(ctx context.Context, r subnet.Release) error {
	old := x.cur.Load()
	began := time.Now()
	if err := old.ix.Close(); err != nil {
		x.log.Warn("closing the indexer for the switch", "error", err)
	}
	tree, o, err := reopen(ctx, x.log, x.h, x.db, old.tree, old.o, r, x.oopts)
	if o == nil {
		// The old overlay runs on (the new snapshot's file did not
		// check, or it could not be closed): take batches on it again.
		back := &indexerLive{tree: old.tree, o: old.o}
		if aerr := x.attach(back); aerr != nil {
			return errors.Join(err, aerr)
		}
		x.cur.Store(back)
		return err
	}
	l := &indexerLive{tree: tree, o: o}
	if aerr := x.attach(l, old.tree.ID()); aerr != nil {
		return errors.Join(err, aerr)
	}
	x.cur.Store(l)
	if err != nil {
		return err
	}
	recordSwitch(x.db, x.log, x.base, old.tree, tree, r)
	x.log.Info("switched snapshots", "from", old.tree.ID().Short(), "to", tree.ID().Short(),
		"late", began.Sub(r.Activation).Round(time.Millisecond), "took", time.Since(began).Round(time.Millisecond))
	return nil
}

// Close shuts the indexer down in order: HTTP, indexer, overlay, host,
// index, database. Later calls return nil.
func (x *Indexer) Close() error {
	var err error
	for _, c := range x.closers {
		err = errors.Join(err, c())
	}
	x.closers = nil
	return err
}
