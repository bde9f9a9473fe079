package indexer

import (
	"context"
	"crypto/sha256"
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
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/bootstrap"
	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/indexer/index"
	"github.com/micra-net/micra/internal/p2ptest"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/overlay/overlaytest"
	"github.com/micra-net/micra/results"
	"github.com/micra-net/micra/results/pb"
	"github.com/micra-net/micra/results/resultstest"
	"github.com/micra-net/micra/subnet"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

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

// publishRaw publishes data on results.TopicResults from n as it is,
// joining the topic for the rest of the test: with no validator of n's
// own, unless n's outbox joined it first (then through the outbox's
// handle, and n's validator passes only what verifies).
func (n *tnode) publishRaw(t testing.TB, data []byte) error {
	t.Helper()
	if n.raw == nil {
		tp, err := n.o.PubSub().Join(results.TopicResults)
		release := func() error { return tp.Close() }
		if err != nil {
			if tp, release, err = results.JoinTopic(n.o.PubSub(), results.TopicResults, nil); err != nil {
				return err
			}
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
		sk = resultstest.Key(t)
	}
	if db == nil {
		db = resultstest.MemDB(t)
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
func fastOutbox() []results.Option {
	return []results.Option{results.Logger(quiet()), results.Republish(300*time.Millisecond, 2*time.Second), results.Pace(64, 2*time.Second, time.Millisecond)}
}

// startOutbox opens an outbox for n in db and starts it.
func startOutbox(t testing.TB, n *tnode, db *badger.DB, opts ...results.Option) *results.Outbox {
	t.Helper()
	ob, err := results.NewOutbox(db, n.sk, overlaytest.Tree(t).ID(), append(fastOutbox(), opts...)...)
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
	ix, err := New(n.o, x, n.db, append([]Option{Logger(quiet()), AnnounceEvery(300 * time.Millisecond), AckDelay(20 * time.Millisecond)}, opts...)...)
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

// memIndex returns an in-memory database and an index on it, closed when
// the test ends.
func memIndex(t testing.TB) (*badger.DB, *index.Index) {
	t.Helper()
	db := resultstest.MemDB(t)
	x, err := index.New(db, index.Logger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	return db, x
}

func sid(t testing.TB) subnet.SnapshotID { return overlaytest.Tree(t).ID() }

func contains(s, sub string) bool { return strings.Contains(s, sub) }

var testNow = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// batchMeta and seal wrap results.Seal for the tests: a signed batch and
// its result messages.
type batchMeta struct {
	node          peer.ID
	seq           uint64
	snapshot      subnet.SnapshotID
	created       time.Time
	shard, shards uint32
	batch         crawl.Batch
}

type sealed struct {
	msgs   [][]byte
	digest [32]byte // the batch's name in acknowledgements
}

func seal(sk crypto.PrivKey, _ []byte, m batchMeta, partSize int) (*sealed, error) {
	msgs, err := results.Seal(sk, m.node, m.seq, m.snapshot, m.created, m.shard, m.shards, m.batch, partSize)
	if err != nil {
		return nil, err
	}
	var e pb.Envelope
	if err := proto.Unmarshal(msgs[0], &e); err != nil {
		return nil, err
	}
	return &sealed{msgs: msgs, digest: sha256.Sum256(e.GetHeader())}, nil
}

func envs(_ testing.TB, s *sealed) [][]byte { return s.msgs }

func sha256Sum(b []byte) [32]byte { return sha256.Sum256(b) }
