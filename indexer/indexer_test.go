package indexer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/indexer/index"
	"github.com/micra-net/micra/results"
	"github.com/micra-net/micra/results/pb"
	"github.com/micra-net/micra/results/resultstest"
)

// ackLog records acknowledgements instead of sending them.
type ackLog struct {
	mu   sync.Mutex
	refs map[peer.ID][]results.BatchRef
}

func (a *ackLog) ack(ctx context.Context, p peer.ID, refs []results.BatchRef) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.refs == nil {
		a.refs = map[peer.ID][]results.BatchRef{}
	}
	a.refs[p] = append(a.refs[p], refs...)
	return nil
}

func (a *ackLog) count(p peer.ID) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.refs[p])
}

// coreIndexer is an indexer without network: messages go to ingest
// directly and acknowledgements to an ackLog.
func coreIndexer(t testing.TB, logs *resultstest.LogBuf, opts ...Option) (*Indexer, *ackLog) {
	t.Helper()
	db := resultstest.MemDB(t)
	x, err := index.New(db, index.Logger(quiet()), index.Clock(func() time.Time { return testNow }))
	if err != nil {
		t.Fatal(err)
	}
	return storeIndexer(t, x, db, logs, opts...)
}

// storeIndexer is coreIndexer on store x; db holds the indexer's state.
func storeIndexer(t testing.TB, x index.Store, db *badger.DB, logs *resultstest.LogBuf, opts ...Option) (*Indexer, *ackLog) {
	t.Helper()
	t.Cleanup(func() { x.Close() })
	lg := quiet()
	if logs != nil {
		lg = logs.Logger()
	}
	ix, err := newIndexer(x, db, sid(t), append([]Option{Logger(lg), Clock(func() time.Time { return testNow }), AckDelay(0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	al := &ackLog{}
	ix.ack = al.ack
	ix.wg.Go(ix.acker)
	t.Cleanup(func() { ix.Close() })
	return ix, al
}

func TestIndexerVerifiesAndDeduplicates(t *testing.T) {
	var logs resultstest.LogBuf
	ix, acks := coreIndexer(t, &logs)
	node := resultstest.Key(t)
	nodeID, _ := peer.IDFromPrivateKey(node)
	seal1 := func(seq uint64, recs []crawl.Record, partSize int) (*sealed, [][]byte) {
		s, err := seal(node, nil, batchMeta{node: nodeID, seq: seq, snapshot: sid(t), created: testNow, shards: 1, batch: resultstest.Batch(t, recs)}, partSize)
		if err != nil {
			t.Fatal(err)
		}
		return s, envs(t, s)
	}
	ingest := func(m []byte) error { return ix.ingest(t.Context(), inbound{data: m}) }

	first, msgs := seal1(10, resultstest.Records(1, 30, testNow), 1<<20)
	if err := ingest(msgs[0]); err != nil {
		t.Fatal(err)
	}
	if s := ix.x.Stats(); s.Docs != 30 || s.Added != 30 {
		t.Fatalf("index after one batch: %+v", s)
	}
	resultstest.WaitFor(t, "the acknowledgement", func() bool { return acks.count(nodeID) == 1 })
	if got := acks.refs[nodeID][0]; got.Seq != 10 || got.Digest != first.digest || got.Node != nodeID {
		t.Fatalf("ack %+v", got)
	}

	t.Run("replay is acknowledged, not stored", func(t *testing.T) {
		if err := ingest(msgs[0]); err != nil {
			t.Fatal(err)
		}
		resultstest.WaitFor(t, "the second acknowledgement", func() bool { return acks.count(nodeID) == 2 })
		if s := ix.x.Stats(); s.Duplicates != 0 || s.Added != 30 || ix.Stats().Duplicates != 1 || ix.Stats().Batches != 1 {
			t.Fatalf("index %+v, indexer %+v", ix.x.Stats(), ix.Stats())
		}
	})
	t.Run("same sequence, other content is refused and logged", func(t *testing.T) {
		_, forged := seal1(10, resultstest.Records(2, 5, testNow), 1<<20)
		if err := ingest(forged[0]); !errors.Is(err, results.ErrConflict) {
			t.Fatalf("conflicting batch: %v", err)
		}
		if ix.Stats().Conflicts != 1 || ix.x.Stats().Docs != 30 || !contains(logs.String(), "conflicts with a stored batch") {
			t.Fatalf("conflict not refused: %+v\n%s", ix.Stats(), logs.String())
		}
	})
	t.Run("tampered message is rejected and logged", func(t *testing.T) {
		_, m := seal1(11, resultstest.Records(3, 5, testNow), 1<<20)
		bad := resultstest.Reenvelope(t, m[0], func(e *pb.Envelope, h *pb.Header) { e.Data[len(e.Data)/2] ^= 0x40 })
		if err := ingest(bad); !errors.Is(err, results.ErrMalformed) {
			t.Fatalf("tampered: %v", err)
		}
		forged := resultstest.Reenvelope(t, m[0], func(e *pb.Envelope, h *pb.Header) {
			h.Records = 1
			e.Header, _ = proto.Marshal(h)
		})
		if err := ingest(forged); !errors.Is(err, results.ErrBadSignature) {
			t.Fatalf("forged: %v", err)
		}
		if ix.Stats().Rejected != 2 || ix.x.Stats().Docs != 30 || !contains(logs.String(), "result message rejected") {
			t.Fatalf("not rejected: %+v\n%s", ix.Stats(), logs.String())
		}
	})
	t.Run("signed batch whose content lies is rejected", func(t *testing.T) {
		// Claims 99 records: authentic, but wrong; the node is to blame.
		recs := resultstest.Records(4, 5, testNow)
		b := resultstest.Batch(t, recs)
		b.Records = 99
		s, err := seal(node, nil, batchMeta{node: nodeID, seq: 12, snapshot: sid(t), created: testNow, shards: 1, batch: b}, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if err := ingest(envs(t, s)[0]); !errors.Is(err, results.ErrMalformed) {
			t.Fatalf("lying batch: %v", err)
		}
	})
	t.Run("other snapshot and shard layout are refused", func(t *testing.T) {
		s, err := seal(node, nil, batchMeta{node: nodeID, seq: 13, snapshot: [32]byte{9}, created: testNow, shards: 1, batch: resultstest.Batch(t, resultstest.Records(5, 2, testNow))}, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if err := ingest(envs(t, s)[0]); !errors.Is(err, results.ErrRefused) {
			t.Fatalf("other snapshot: %v", err)
		}
		s, _ = seal(node, nil, batchMeta{node: nodeID, seq: 14, snapshot: sid(t), created: testNow, shards: 2, batch: resultstest.Batch(t, resultstest.Records(5, 2, testNow))}, 1<<20)
		if err := ingest(envs(t, s)[0]); !errors.Is(err, results.ErrRefused) {
			t.Fatalf("other shard count: %v", err)
		}
	})
	t.Run("parts in any order, each once", func(t *testing.T) {
		// Random-looking titles so that the batch does not compress to
		// one part.
		recs := resultstest.Records(6, 200, testNow)
		for i := range recs {
			recs[i].Title = fmt.Sprintf("%x", sha256Sum([]byte(recs[i].URL)))
		}
		_, m := seal1(20, recs, 1024)
		if len(m) < 3 {
			t.Fatalf("%d parts", len(m))
		}
		for i := len(m) - 1; i >= 0; i-- {
			if err := ingest(m[i]); err != nil {
				t.Fatal(err)
			}
			if i == len(m)-1 {
				if err := ingest(m[i]); err != nil { // a part twice
					t.Fatal(err)
				}
			}
		}
		if s := ix.x.Stats(); s.Docs != 230 {
			t.Fatalf("docs %d after a multi-part batch", s.Docs)
		}
	})
}

// FuzzIngest: whatever batch a node with a valid key signs (any data under
// any record count, in any shard) the indexer stores or refuses without
// panicking.
func FuzzIngest(f *testing.F) {
	sk := resultstest.Key(f)
	id, err := peer.IDFromPrivateKey(sk)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(resultstest.Batch(f, resultstest.Records(2, 8, testNow)).Data, uint32(8), uint32(0))
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd, 0, 0}, uint32(1), uint32(1))
	ix, _ := coreIndexer(f, nil)
	var seq uint64
	f.Fuzz(func(t *testing.T, data []byte, records, shard uint32) {
		seq++
		msgs, err := results.Seal(sk, id, seq, sid(t), testNow, shard%2, 1+shard%2, crawl.Batch{Data: data, Records: int(records % (1 << 20))}, 1<<20)
		if err != nil {
			return
		}
		for _, m := range msgs {
			p, err := results.OpenEnvelope(m, results.DefaultMessageLimit, testNow)
			if err != nil {
				return
			}
			_ = ix.ingest(t.Context(), inbound{part: p})
		}
	})
}
