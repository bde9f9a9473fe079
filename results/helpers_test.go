package results

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/bootstrap"
	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/crawl/index"
	"github.com/micra-net/micra/internal/p2ptest"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/overlay/overlaytest"
	"github.com/micra-net/micra/subnet"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// logBuf collects log lines at every level, for tests that check what was
// logged.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuf) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// memDB opens an in-memory badger database large enough for the index's
// transactions, closed at cleanup.
func memDB(t testing.TB) *badger.DB {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil).
		WithMemTableSize(16 << 20).WithNumMemtables(2).WithBlockCacheSize(1 << 20).WithIndexCacheSize(1 << 20).WithNumCompactors(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// diskDB opens a badger database in dir; the caller closes it.
func diskDB(t testing.TB, dir string) *badger.DB {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil).WithMemTableSize(8 << 20).WithNumMemtables(2).
		WithBlockCacheSize(1 << 20).WithIndexCacheSize(1 << 20).WithNumCompactors(2).WithValueLogFileSize(16 << 20))
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func newKey(t testing.TB) crypto.PrivKey {
	t.Helper()
	sk, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	return sk
}

// testRecords returns n records of site (a host of its own), each with a
// keyword unique to it ("w<site>x<i>") and one all share ("micra").
func testRecords(site, n int, at time.Time) []crawl.Record {
	recs := make([]crawl.Record, n)
	for i := range recs {
		u := fmt.Sprintf("http://s%d.example/p%d", site, i)
		recs[i] = crawl.Record{URL: u, FinalURL: u, Time: at, Status: 200, Type: crawl.TypeHTML, Change: crawl.ChangeNew,
			Title: fmt.Sprintf("Page %d of site %d", i, site), Size: 4000,
			Keywords: []crawl.Keyword{{Term: fmt.Sprintf("w%dx%d", site, i), Weight: 65535}, {Term: "micra", Weight: 30000}}}
	}
	return recs
}

func testBatch(t testing.TB, recs []crawl.Record) crawl.Batch {
	t.Helper()
	b, err := crawl.EncodeBatch(recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tnode is a test overlay node at address overlaytest.Addr(i), with a given
// key and database, so that it can be restarted as the same node.
type tnode struct {
	i    int
	sk   crypto.PrivKey
	h    host.Host
	o    *overlay.Overlay
	db   *badger.DB
	raw  *pubsub.Topic // see publishRaw
	once sync.Once
}

// publishRaw publishes data on TopicResults from n as it is, joining the
// topic (with no validator of n's own, unless n's outbox joined it first)
// for the rest of the test.
func (n *tnode) publishRaw(t testing.TB, data []byte) error {
	t.Helper()
	if n.raw == nil {
		tp, release, err := joinTopic(n.o.PubSub(), TopicResults, nil)
		if err != nil {
			return err
		}
		t.Cleanup(func() { _ = release() })
		n.raw = tp
	}
	return n.raw.Publish(t.Context(), data)
}

func (n *tnode) stop() {
	n.once.Do(func() {
		n.o.Close()
		n.h.Close()
	})
}

// newTNode starts a tnode on net (a simulated network, inside its synctest
// bubble), or on a real loopback host when net is nil (for tests that also
// serve HTTP, which a bubble cannot carry).
func newTNode(t testing.TB, net *p2ptest.Net, i int, sk crypto.PrivKey, db *badger.DB, opts ...overlay.Option) *tnode {
	t.Helper()
	if sk == nil {
		sk = newKey(t)
	}
	if db == nil {
		db = memDB(t)
	}
	var h host.Host
	if net != nil {
		h = net.Host(t, sk, overlaytest.Addr(i))
	} else {
		var err error
		h, err = overlay.NewHost(sk, overlay.BindAddress(overlaytest.Addr(i), 0), overlay.Reachability(network.ReachabilityPublic),
			overlay.NoRelayService(), overlay.ConnLimits(200, 400))
		if err != nil {
			t.Fatal(err)
		}
	}
	n := &tnode{i: i, sk: sk, h: h, db: db}
	all := append(overlaytest.Options(), overlay.WithDelegator(&overlaytest.RequesterDelegator{}))
	var err error
	n.o, err = overlay.New(h, overlaytest.Tree(t), db, append(all, opts...)...)
	if err != nil {
		h.Close()
		t.Fatal(err)
	}
	t.Cleanup(n.stop)
	return n
}

// join connects nodes to boot and bootstraps their DHT.
func join(t testing.TB, boot *tnode, nodes ...*tnode) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bi := []peer.AddrInfo{{ID: boot.h.ID(), Addrs: boot.h.Addrs()}}
	for _, n := range nodes {
		if _, err := bootstrap.Join(ctx, n.h, n.h.ID(), bi, bootstrap.Backoff(50*time.Millisecond, 200*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if err := n.o.Bootstrap(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// fastOutbox are outbox options for loopback tests: quick republishing and
// pacing.
func fastOutbox() []Option {
	return []Option{Logger(quiet()), Republish(300*time.Millisecond, 2*time.Second), Pace(64, 2*time.Second, time.Millisecond)}
}

// startOutbox opens an outbox for n in db and starts it.
func startOutbox(t testing.TB, n *tnode, db *badger.DB, opts ...Option) *Outbox {
	t.Helper()
	ob, err := NewOutbox(db, n.sk, overlaytest.Tree(t).ID(), append(fastOutbox(), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Start(n.o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ob.Close(); err != nil {
			t.Errorf("closing the outbox: %v", err)
		}
	})
	return ob
}

// startIndexer opens an index in n's database and starts an indexer on n.
func startIndexer(t testing.TB, n *tnode, opts ...Option) *Indexer {
	t.Helper()
	x, err := index.New(n.db, index.Logger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	ix, err := NewIndexer(n.o, x, n.db, append([]Option{Logger(quiet()), AnnounceEvery(300 * time.Millisecond), AckDelay(20 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ix.Close(); err != nil {
			t.Errorf("closing the indexer: %v", err)
		}
	})
	return ix
}

// waitFor is p2ptest.WaitFor with a condition: a bound of 90 s (virtual
// inside a synctest bubble), not a timing assertion.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	p2ptest.WaitFor(t, 90*time.Second, func() error {
		if cond() {
			return nil
		}
		return fmt.Errorf("waiting for %s", what)
	})
}

func sid(t testing.TB) subnet.SnapshotID { return overlaytest.Tree(t).ID() }

func contains(s, sub string) bool { return strings.Contains(s, sub) }
