package results

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/crawl/index"
	"github.com/micra-net/micra/results/pb"
)

// ackLog records acknowledgements instead of sending them.
type ackLog struct {
	mu   sync.Mutex
	refs map[peer.ID][]BatchRef
}

func (a *ackLog) ack(ctx context.Context, p peer.ID, refs []BatchRef) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.refs == nil {
		a.refs = map[peer.ID][]BatchRef{}
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
func coreIndexer(t testing.TB, logs *logBuf, opts ...Option) (*Indexer, *ackLog) {
	t.Helper()
	db := memDB(t)
	x, err := index.New(db, index.Logger(quiet()), index.Clock(func() time.Time { return testNow }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	lg := quiet()
	if logs != nil {
		lg = logs.logger()
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
	var logs logBuf
	ix, acks := coreIndexer(t, &logs)
	node := newKey(t)
	nodeID, _ := peer.IDFromPrivateKey(node)
	seal1 := func(seq uint64, recs []crawl.Record, partSize int) (*sealed, [][]byte) {
		s, err := seal(node, nil, batchMeta{node: nodeID, seq: seq, snapshot: sid(t), created: testNow, shards: 1, batch: testBatch(t, recs)}, partSize)
		if err != nil {
			t.Fatal(err)
		}
		return s, envs(t, s)
	}
	ingest := func(m []byte) error { return ix.ingest(t.Context(), inbound{data: m}) }

	first, msgs := seal1(10, testRecords(1, 30, testNow), 1<<20)
	if err := ingest(msgs[0]); err != nil {
		t.Fatal(err)
	}
	if s := ix.x.Stats(); s.Docs != 30 || s.Added != 30 {
		t.Fatalf("index after one batch: %+v", s)
	}
	waitFor(t, "the acknowledgement", func() bool { return acks.count(nodeID) == 1 })
	if got := acks.refs[nodeID][0]; got.Seq != 10 || got.Digest != first.digest || got.Node != nodeID {
		t.Fatalf("ack %+v", got)
	}

	t.Run("replay is acknowledged, not stored", func(t *testing.T) {
		if err := ingest(msgs[0]); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the second acknowledgement", func() bool { return acks.count(nodeID) == 2 })
		if s := ix.x.Stats(); s.Duplicates != 0 || s.Added != 30 || ix.Stats().Duplicates != 1 || ix.Stats().Batches != 1 {
			t.Fatalf("index %+v, indexer %+v", ix.x.Stats(), ix.Stats())
		}
	})
	t.Run("same sequence, other content is refused and logged", func(t *testing.T) {
		_, forged := seal1(10, testRecords(2, 5, testNow), 1<<20)
		if err := ingest(forged[0]); !errors.Is(err, ErrConflict) {
			t.Fatalf("conflicting batch: %v", err)
		}
		if ix.Stats().Conflicts != 1 || ix.x.Stats().Docs != 30 || !contains(logs.String(), "conflicts with a stored batch") {
			t.Fatalf("conflict not refused: %+v\n%s", ix.Stats(), logs.String())
		}
	})
	t.Run("tampered message is rejected and logged", func(t *testing.T) {
		_, m := seal1(11, testRecords(3, 5, testNow), 1<<20)
		bad := reenvelope(t, m[0], func(e *pb.Envelope, h *pb.Header) { e.Data[len(e.Data)/2] ^= 0x40 })
		if err := ingest(bad); !errors.Is(err, ErrMalformed) {
			t.Fatalf("tampered: %v", err)
		}
		forged := reenvelope(t, m[0], func(e *pb.Envelope, h *pb.Header) {
			h.Records = 1
			e.Header, _ = proto.Marshal(h)
		})
		if err := ingest(forged); !errors.Is(err, ErrBadSignature) {
			t.Fatalf("forged: %v", err)
		}
		if ix.Stats().Rejected != 2 || ix.x.Stats().Docs != 30 || !contains(logs.String(), "result message rejected") {
			t.Fatalf("not rejected: %+v\n%s", ix.Stats(), logs.String())
		}
	})
	t.Run("signed batch whose content lies is rejected", func(t *testing.T) {
		// Claims 99 records: authentic, but wrong; the node is to blame.
		recs := testRecords(4, 5, testNow)
		b := testBatch(t, recs)
		b.Records = 99
		s, err := seal(node, nil, batchMeta{node: nodeID, seq: 12, snapshot: sid(t), created: testNow, shards: 1, batch: b}, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if err := ingest(envs(t, s)[0]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("lying batch: %v", err)
		}
	})
	t.Run("other snapshot and shard layout are refused", func(t *testing.T) {
		s, err := seal(node, nil, batchMeta{node: nodeID, seq: 13, snapshot: [32]byte{9}, created: testNow, shards: 1, batch: testBatch(t, testRecords(5, 2, testNow))}, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if err := ingest(envs(t, s)[0]); !errors.Is(err, ErrRefused) {
			t.Fatalf("other snapshot: %v", err)
		}
		s, _ = seal(node, nil, batchMeta{node: nodeID, seq: 14, snapshot: sid(t), created: testNow, shards: 2, batch: testBatch(t, testRecords(5, 2, testNow))}, 1<<20)
		if err := ingest(envs(t, s)[0]); !errors.Is(err, ErrRefused) {
			t.Fatalf("other shard count: %v", err)
		}
	})
	t.Run("parts in any order, each once", func(t *testing.T) {
		// Random-looking titles so that the batch does not compress to
		// one part.
		recs := testRecords(6, 200, testNow)
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
