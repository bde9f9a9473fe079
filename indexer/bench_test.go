package indexer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/indexer/index"
	"github.com/micra-net/micra/results"
	"github.com/micra-net/micra/results/resultstest"
)

// benchRecords makes records shaped like the crawler's on ordinary pages:
// 40 weighted keywords from a vocabulary of 20,000 stems (Zipf-like), a
// title of 6 words, 25 out-links, and about 1 KiB encoded. Sites get 50
// pages each.
func benchRecords(rng *rand.Rand, first, n int, at time.Time) []crawl.Record {
	zipf := rand.NewZipf(rng, 1.1, 4, 20000)
	word := func() string { return fmt.Sprintf("t%d", zipf.Uint64()) }
	recs := make([]crawl.Record, n)
	for i := range recs {
		id := first + i
		u := fmt.Sprintf("http://site%d.example/page/%d", id/50, id)
		r := crawl.Record{URL: u, FinalURL: u, Time: at, Status: 200, Type: crawl.TypeHTML, Change: crawl.ChangeNew,
			Lang: "en", Size: 20000 + int64(rng.IntN(40000)), Fingerprint: rng.Uint64()}
		for j := range 6 {
			if j > 0 {
				r.Title += " "
			}
			r.Title += word()
		}
		seen := map[string]bool{}
		w := 65535
		for len(r.Keywords) < 40 {
			t := word()
			if seen[t] {
				continue
			}
			seen[t] = true
			r.Keywords = append(r.Keywords, crawl.Keyword{Term: t, Weight: uint16(w)})
			w = w * 9 / 10
		}
		r.Keywords = append(r.Keywords, crawl.Keyword{Term: fmt.Sprintf("uniq%d", id), Weight: 1000})
		for range 25 {
			l := fmt.Sprintf("http://site%d.example/page/%d", rng.IntN(5000), rng.IntN(100000))
			r.Links = append(r.Links, crawl.Link{URL: l, Anchor: word() + " " + word()})
		}
		recs[i] = r
	}
	return recs
}

// crawlerBatches cuts records into batches as the crawler does by
// default: at 256 KiB of encoded records.
func crawlerBatches(tb testing.TB, recs []crawl.Record) []crawl.Batch {
	tb.Helper()
	var out []crawl.Batch
	for len(recs) > 0 {
		// The largest prefix within 256 KiB, by bisection.
		lo, hi := 1, min(len(recs), 2000)
		for lo < hi {
			mid := (lo + hi + 1) / 2
			b, err := crawl.EncodeBatch(recs[:mid])
			if err != nil {
				tb.Fatal(err)
			}
			if b.RawBytes > 256<<10 {
				hi = mid - 1
			} else {
				lo = mid
			}
		}
		out = append(out, resultstest.Batch(tb, recs[:lo]))
		recs = recs[lo:]
	}
	return out
}

// countingAcks counts acknowledged batches.
type countingAcks struct {
	n    atomic.Int64
	wake chan struct{}
}

func (c *countingAcks) HandleAck(ctx context.Context, from peer.ID, refs []results.BatchRef) error {
	c.n.Add(int64(len(refs)))
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return nil
}

// BenchmarkIngest measures the indexer's ingest: verify a signed batch
// (envelope, signature, part hash, snapshot, shard, replay table),
// decompress and check it, store its records in the index, record it,
// and acknowledge it to its node over a loopback libp2p stream, for
// batches of 256 KiB of encoded records (175 records of ~1.5 KiB), into an
// index on disk opened as micra indexer opens it.
func BenchmarkIngest(b *testing.B) {
	node, ixn := newTNode(b, nil, 0, nil, nil), newTNode(b, nil, 1, nil, indexerDB(b))
	join(b, node, ixn)
	acks := &countingAcks{wake: make(chan struct{}, 1)}
	b.Cleanup(results.ServeAcks(node.h, quiet(), acks.HandleAck))
	x, err := index.New(ixn.db, index.Logger(quiet()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { x.Close() })
	ix, err := newIndexer(x, ixn.db, sid(b), Logger(quiet()), AckDelay(10*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	ix.o = ixn.o
	ix.ack = func(ctx context.Context, p peer.ID, refs []results.BatchRef) error {
		return results.SendAck(ctx, ixn.h, p, refs)
	}
	ix.wg.Go(ix.acker)
	b.Cleanup(func() { ix.Close() })

	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Now()
	recs := benchRecords(rng, 0, 250*max(b.N, 1)+250, now)
	batches := crawlerBatches(b, recs)
	var msgs [][]byte
	nrec := 0
	for i, bt := range batches[:min(len(batches), max(b.N, 1))] {
		s, err := seal(node.sk, nil, batchMeta{node: node.h.ID(), seq: uint64(i + 1), snapshot: sid(b), created: now, shards: 1, batch: bt}, results.PartSize(results.DefaultMessageLimit))
		if err != nil {
			b.Fatal(err)
		}
		m := envs(b, s)
		if len(m) != 1 {
			b.Fatalf("%d parts", len(m))
		}
		msgs = append(msgs, m[0])
		nrec += bt.Records
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for _, m := range msgs {
		if err := ix.ingest(b.Context(), inbound{data: m}); err != nil {
			b.Fatal(err)
		}
	}
	for acks.n.Load() < int64(len(msgs)) {
		select {
		case <-acks.wake:
		case <-time.After(time.Second):
		}
	}
	el := time.Since(start)
	b.StopTimer()
	if s := x.Stats(); s.Docs != int64(nrec) {
		b.Fatalf("%d docs, want %d", s.Docs, nrec)
	}
	b.ReportMetric(float64(nrec)/el.Seconds(), "records/s")
	b.ReportMetric(float64(nrec)/float64(len(msgs)), "records/batch")
}

// BenchmarkEndToEnd measures the path from Sink.Results on a node to the
// records being searchable on an indexer (the index transaction
// committed), over GossipSub on loopback, one batch at a time: the node
// signs and stores the batch, publishes it, the indexer verifies, stores
// and acknowledges it, and the node removes it from its outbox. Batches of
// one record show the delivery path alone; batches of 175 (one default
// crawler batch of 256 KiB) add the index's work.
func BenchmarkEndToEnd(b *testing.B) {
	for _, size := range []int{1, 175} {
		b.Run(fmt.Sprintf("records=%d", size), func(b *testing.B) { benchEndToEnd(b, size) })
	}
}

func benchEndToEnd(b *testing.B, size int) {
	n, ixn := newTNode(b, nil, 0, nil, nil), newTNode(b, nil, 1, nil, indexerDB(b))
	join(b, n, ixn)
	var mu sync.Mutex
	stored := map[uint64]time.Time{}
	wake := make(chan struct{}, 1)
	ix := startIndexer(b, ixn, onStoredHook(func(_ peer.ID, seq uint64, _ int) {
		mu.Lock()
		stored[seq] = time.Now()
		mu.Unlock()
		select {
		case wake <- struct{}{}:
		default:
		}
	}))
	ob := startOutbox(b, n, n.db)
	// Wait for the outbox to know the indexer.
	for range 1000 {
		if ob.Stats().Indexers > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var lat []time.Duration
	nrec := 0
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		at := time.Now()
		bt := crawlerBatches(b, benchRecords(rng, i*size, size, at))[0]
		b.StartTimer()
		t0 := time.Now()
		if err := ob.Results(b.Context(), bt); err != nil {
			b.Fatal(err)
		}
		var done time.Time
		for done.IsZero() {
			mu.Lock()
			for seq, t := range stored {
				done = t
				delete(stored, seq)
			}
			mu.Unlock()
			if done.IsZero() {
				select {
				case <-wake:
				case <-time.After(5 * time.Second):
					b.Fatalf("batch %d not stored", i)
				}
			}
		}
		lat = append(lat, done.Sub(t0))
		nrec += bt.Records
	}
	b.StopTimer()
	for ob.Stats().Batches > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	if got := ix.Index().Stats().Docs; got != int64(nrec) {
		b.Fatalf("%d docs, want %d", got, nrec)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds())/1000, "p90-ms")
	b.ReportMetric(float64(nrec)/float64(b.N), "records/batch")
}

// indexerDB opens a database on disk with the options micra indexer uses.
func indexerDB(b *testing.B) *badger.DB {
	db, err := badger.Open(badger.DefaultOptions(b.TempDir()).WithLogger(nil).
		WithMemTableSize(32 << 20).WithNumMemtables(3).WithNumVersionsToKeep(1))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

// onStoredHook calls f for every batch the indexer stores.
func onStoredHook(f func(peer.ID, uint64, int)) Option {
	return func(c *config) error { c.onStored = f; return nil }
}
