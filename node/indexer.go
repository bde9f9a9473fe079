package node

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/micra-net/micra/indexer"
	"github.com/micra-net/micra/indexer/index"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/overlay/delegate"
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
	// Liveness and WithholdGrace set the coordination of the shards the
	// indexer coordinates, as Config.Liveness and Config.WithholdGrace
	// do for a node, within the same bounds; zero keeps the overlay's
	// liveness and leaves withholding off.
	Liveness      time.Duration
	WithholdGrace time.Duration
	Logger        *slog.Logger     // nil: slog.Default()
	Indexer       []indexer.Option // checked by Validate (indexer.CheckOptions)
	Overlay       []overlay.Option
	Host          []overlay.HostOption
	Delegate      []delegate.Option
	// JoinNow joins the overlay before StartIndexer returns; otherwise
	// it joins in the background, bounded by StartIndexer's ctx.
	JoinNow bool
}

// indexerSettings are an IndexerConfig's values in the types the parts
// take: parse fills them once.
type indexerSettings struct {
	listen []ma.Multiaddr
	keys   []ed25519.PublicKey
}

// Validate checks the configuration and returns all the problems found;
// a setting out of its bounds is a *SettingError naming its key, and the
// indexer's options are checked by indexer.CheckOptions.
func (c *IndexerConfig) Validate() error {
	_, err := c.parse()
	return err
}

// parse checks the configuration, as Validate, and returns the values
// parsed.
func (c *IndexerConfig) parse() (indexerSettings, error) {
	var s indexerSettings
	var errs []error
	var err error
	s.listen, err = ParseListen(c.Listen)
	errs = append(errs, err)
	s.keys, err = parseReleaseKeys("snapshot keys", c.SnapshotKeys)
	errs = append(errs, err)
	if c.Liveness != 0 {
		errs = append(errs, livenessRange.check("liveness", c.Liveness))
	}
	if c.WithholdGrace != 0 {
		errs = append(errs, graceRange.check("withhold_grace", c.WithholdGrace))
	}
	errs = append(errs, indexer.CheckOptions(c.Indexer...))
	return s, errors.Join(errs...)
}

// Indexer is a running indexer.
type Indexer struct {
	assembly
	cfg     IndexerConfig
	idx     index.Store
	queries *queryLog
	http    *httpServer // the search page and API
}

// StartIndexer opens the indexer's database, index, host and overlay,
// starts the indexer and its HTTP API, and joins the overlay. On an error
// it closes what it opened.
func StartIndexer(ctx context.Context, cfg IndexerConfig) (x *Indexer, err error) {
	set, err := cfg.parse()
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	x = &Indexer{cfg: cfg, queries: newQueryLog()}
	x.begin(log)
	defer func() {
		if err != nil {
			err = errors.Join(err, x.Close())
			x = nil
		}
	}()
	if err := x.start(peerConfig{
		role: "indexer", dataDir: cfg.DataDir, db: index.BadgerOptions(filepath.Join(cfg.DataDir, "db")), listen: set.listen,
		host: cfg.Host, delegate: cfg.Delegate, peers: cfg.Bootstrap, keys: set.keys, liveness: cfg.Liveness, grace: cfg.WithholdGrace,
		private: cfg.AllowPrivateNetworks, tree: cfg.Tree, snapshot: cfg.Snapshot,
	}); err != nil {
		return x, err
	}
	if x.idx, err = x.openIndex(ctx); err != nil {
		return x, err
	}
	l, err := x.startOverlay([]overlay.Option{overlay.Announce(5 * time.Minute), overlay.NoCrawl()}, cfg.Overlay)
	if err != nil {
		return x, err
	}
	var accept []subnet.SnapshotID
	if x.prev != nil {
		accept = append(accept, x.prev.ID())
	}
	if err := x.attach(l, accept...); err != nil {
		return x, err
	}
	x.runSwitches(x.switchTo)
	if x.http, err = serveHTTP("HTTP", cfg.HTTP, &http.Server{Handler: x.indexerHTTP(), ReadHeaderTimeout: 10 * time.Second}); err != nil {
		return x, err
	}
	return x, x.joinBootstrap(ctx)
}

// joinBootstrap joins the overlay through the configured bootstrap peers:
// before it returns with JoinNow, else in the background, bounded by ctx.
// Without bootstrap peers the indexer waits for nodes to connect to it.
func (x *Indexer) joinBootstrap(ctx context.Context) error {
	if len(x.cfg.Bootstrap) == 0 {
		x.log.Warn("no bootstrap peers: waiting for nodes to connect to this indexer")
		return nil
	}
	if x.cfg.JoinNow {
		_, err := x.join(ctx, x.cfg.Bootstrap)
		return err
	}
	go func() {
		if _, err := x.join(ctx, x.cfg.Bootstrap); err != nil && ctx.Err() == nil {
			x.log.Error("joining the overlay failed", "error", err)
		}
	}()
	return nil
}

// openIndex opens the index: in PostgreSQL when the configuration names a
// store, else in the indexer's database.
func (x *Indexer) openIndex(ctx context.Context) (index.Store, error) {
	ilog := index.Logger(x.log.With("subsystem", "index"))
	if x.cfg.Store != "" {
		pg, err := index.OpenPostgres(ctx, x.cfg.Store, index.PostgresOptions{ReadOnly: x.cfg.ReadOnly}, ilog)
		if err != nil {
			return nil, err // not a nil *Postgres in the Store
		}
		return pg, nil
	}
	ix, err := index.New(x.db, ilog)
	if err != nil {
		return nil, err
	}
	return ix, nil
}

// HTTPAddr is the address the search page and API listen on.
func (x *Indexer) HTTPAddr() string { return x.http.addr }

// Indexer is the running indexer (its index, audits and statistics); a
// snapshot switch replaces it, and its counters start again.
func (x *Indexer) Indexer() *indexer.Indexer { return x.cur.Load().ix }

// attach starts the indexer on l's overlay, taking batches of l's snapshot
// and of accept.
func (x *Indexer) attach(l *live, accept ...subnet.SnapshotID) error {
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
	tree, o, err := x.reopen(ctx, old, r)
	if o == nil {
		// The old overlay runs on (the new snapshot's file did not
		// check, or it could not be closed): take batches on it again.
		back := &live{tree: old.tree, o: old.o}
		if aerr := x.attach(back); aerr != nil {
			return errors.Join(err, aerr)
		}
		x.cur.Store(back)
		return err
	}
	l := &live{tree: tree, o: o}
	if aerr := x.attach(l, old.tree.ID()); aerr != nil {
		return errors.Join(err, aerr)
	}
	x.cur.Store(l)
	if err != nil {
		return err
	}
	x.switched(old.tree, tree, r, began)
	return nil
}

// Close shuts the indexer down in order, each part within a limit
// (assembly.shutdown): HTTP, background work, indexer, overlay, host,
// index, database. It is idempotent: later calls return the first call's
// error.
func (x *Indexer) Close() error {
	var front, parts, stores []closeStep
	if x.http != nil {
		front = append(front, x.http.step("HTTP server", 5*time.Second))
	}
	if l := x.cur.Load(); l != nil && l.ix != nil {
		parts = append(parts, closeStep{"indexer", func() error { return x.cur.Load().ix.Close() }})
	}
	if x.idx != nil {
		stores = append(stores, closeStep{"index", func() error { x.idx.Close(); return nil }})
	}
	return x.shutdown(front, parts, stores)
}
