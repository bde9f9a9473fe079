package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/micra-net/micra/bootstrap"
	"github.com/micra-net/micra/crawl/index"
	"github.com/micra-net/micra/indexer"
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
	Snapshot  string          // subnet snapshot file; "" for the built-in one
	Tree      *subnet.Tree    // the hierarchy, instead of Snapshot
	Logger    *slog.Logger    // nil: slog.Default()
	Indexer   []indexer.Option
	Overlay   []overlay.Option
	Host      []overlay.HostOption
	Delegate  []delegate.Option
	// JoinNow joins the overlay before StartIndexer returns; otherwise
	// it joins in the background, bounded by StartIndexer's ctx.
	JoinNow bool
}

// Indexer is a running indexer.
type Indexer struct {
	h        host.Host
	ix       *indexer.Indexer
	httpAddr string
	closers  []func() error // in closing order
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
	x = &Indexer{}
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
	// The index writes a record with its postings in one transaction:
	// memtables of 32 MiB allow 2.4 MiB transactions.
	db, err := badger.Open(badger.DefaultOptions(filepath.Join(cfg.DataDir, "db")).WithLogger(nil).
		WithMemTableSize(32 << 20).WithNumMemtables(3).WithNumVersionsToKeep(1))
	if err != nil {
		return x, fmt.Errorf("opening the database in %s (is another indexer running on it?): %w", cfg.DataDir, err)
	}
	stack = append(stack, db.Close)
	idx, err := index.New(db, index.Logger(log.With("subsystem", "index")))
	if err != nil {
		return x, err
	}
	stack = append(stack, func() error { idx.Close(); return nil })
	h, err := overlay.NewHost(sk, append([]overlay.HostOption{overlay.ListenAddrs(listen...)}, cfg.Host...)...)
	if err != nil {
		return x, err
	}
	x.h = h
	stack = append(stack, h.Close)
	del, err := delegate.New(append([]delegate.Option{delegate.Logger(log.With("subsystem", "delegate"))}, cfg.Delegate...)...)
	if err != nil {
		return x, err
	}
	o, err := overlay.New(h, tree, db, append([]overlay.Option{overlay.WithDelegator(del),
		overlay.WithEvidenceOpener(overlay.EvidenceOpenerFunc(results.OpenEvidence)),
		overlay.Announce(5 * time.Minute), overlay.NoCrawl(), overlay.BootstrapPeers(cfg.Bootstrap), overlay.Logger(log.With("subsystem", "overlay"))}, cfg.Overlay...)...)
	if err != nil {
		return x, err
	}
	stack = append(stack, o.Close)
	ix, err := indexer.New(o, idx, db, append([]indexer.Option{indexer.Logger(log.With("subsystem", "indexer"))}, cfg.Indexer...)...)
	if err != nil {
		return x, err
	}
	x.ix = ix
	stack = append(stack, ix.Close)

	ln, err := net.Listen("tcp", cfg.HTTP)
	if err != nil {
		return x, fmt.Errorf("HTTP: %w", err)
	}
	x.httpAddr = ln.Addr().String()
	srv := &http.Server{Handler: ix.Handler(index.HTTPOptions{ReadOnly: cfg.ReadOnly}), ReadHeaderTimeout: 10 * time.Second}
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
		if err := o.Bootstrap(ctx); err != nil {
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

// Indexer is the running indexer (its index, audits and statistics).
func (x *Indexer) Indexer() *indexer.Indexer { return x.ix }

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
