package results

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/dgraph-io/badger/v4"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/results/pb"
	"github.com/micra-net/micra/results/resultstest"
)

// announce makes ob know p as an indexer of all shards, as an
// announcement would.
func announce(t testing.TB, ob *Outbox, p peer.ID, shards uint32, take ...uint32) {
	t.Helper()
	id := ob.sid
	ob.noteIndexer(p, &pb.Announce{Version: 1, Snapshot: id[:], Shards: shards, Take: take, AtMs: ob.cfg.now().UnixMilli(), TtlS: 3600}, ob.cfg.now())
}

// refs returns references to every batch in ob, in sequence order.
func refs(ob *Outbox) []BatchRef {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	var out []BatchRef
	for _, e := range ob.entries {
		out = append(out, BatchRef{Node: ob.self, Seq: e.seq, Digest: e.digest})
	}
	slices.SortFunc(out, func(a, b BatchRef) int { return int(a.Seq - b.Seq) })
	return out
}

// records decodes the records of the stored batch ref.
func storedRecords(t testing.TB, ob *Outbox, seq uint64) []crawl.Record {
	t.Helper()
	var data []byte
	if err := ob.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(dataKey(seq))
		if err != nil {
			return err
		}
		data, err = item.ValueCopy(nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	recs, err := crawl.DecodeBatch(data)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestOutboxAcks(t *testing.T) {
	ob, err := NewOutbox(resultstest.MemDB(t), resultstest.Key(t), sid(t), Logger(quiet()), Acks(2))
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	for i := range 3 {
		if err := ob.Results(t.Context(), resultstest.Batch(t, resultstest.Records(i, 10, testNow))); err != nil {
			t.Fatal(err)
		}
	}
	rs := refs(ob)
	if len(rs) != 3 || rs[1].Seq != rs[0].Seq+1 || rs[2].Seq != rs[1].Seq+1 {
		t.Fatalf("refs %v", rs)
	}
	ida, idb := mustID(t), mustID(t)
	if err := ob.HandleAck(t.Context(), ida, rs); !errors.Is(err, ErrNotIndexer) || !errors.Is(err, overlay.ErrUnavailable) {
		t.Fatalf("ack from an unannounced peer: %v", err)
	}
	announce(t, ob, ida, 1)
	announce(t, ob, idb, 1)
	bad := rs[0]
	bad.Digest[0] ^= 1
	other := rs[1]
	other.Node = idb
	for _, tc := range []struct {
		name string
		from peer.ID
		refs []BatchRef
		left int
		acks uint64
	}{
		{"wrong digest and other node ignored", ida, []BatchRef{bad, other}, 3, 0},
		{"first indexer", ida, rs, 3, 3},
		{"same indexer again", ida, rs[:2], 3, 3},
		{"second indexer removes", idb, rs[:2], 1, 5},
		{"unknown sequence ignored", idb, rs[:1], 1, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := ob.HandleAck(t.Context(), tc.from, tc.refs); err != nil {
				t.Fatal(err)
			}
			if s := ob.Stats(); s.Batches != tc.left || s.Acks != tc.acks {
				t.Fatalf("stats %+v, want %d batches and %d acks", s, tc.left, tc.acks)
			}
		})
	}
}

func mustID(t testing.TB) peer.ID {
	t.Helper()
	id, err := peer.IDFromPrivateKey(resultstest.Key(t))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// The outbox keeps batches, acknowledgements, the sequence counter and the
// indexers it knows across a restart.
func TestOutboxSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	sk := resultstest.Key(t)
	ix := mustID(t)
	db := resultstest.DiskDB(t, dir)
	ob, err := NewOutbox(db, sk, sid(t), Logger(quiet()), Acks(2))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := ob.Results(t.Context(), resultstest.Batch(t, resultstest.Records(i, 20, testNow))); err != nil {
			t.Fatal(err)
		}
	}
	announce(t, ob, ix, 1)
	before := refs(ob)
	if err := ob.HandleAck(t.Context(), ix, before[:2]); err != nil {
		t.Fatal(err)
	}
	bytes := ob.Stats().Bytes
	ob.Close()
	db.Close()

	db = resultstest.DiskDB(t, dir)
	defer db.Close()
	ob, err = NewOutbox(db, sk, sid(t), Logger(quiet()), Acks(2))
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	after := refs(ob)
	if !slices.Equal(before, after) || ob.Stats().Bytes != bytes {
		t.Fatalf("after restart %v (%d bytes), before %v (%d bytes)", after, ob.Stats().Bytes, before, bytes)
	}
	for i, r := range after {
		if got := storedRecords(t, ob, r.Seq); len(got) != 20 || got[0].URL != fmt.Sprintf("http://s%d.example/p0", i) {
			t.Fatalf("batch %d: %d records", r.Seq, len(got))
		}
		if want := i < 2; slices.Contains(ob.entries[r.Seq].acks, ix) != want {
			t.Fatalf("batch %d acknowledged: %v", r.Seq, ob.entries[r.Seq].acks)
		}
	}
	if ob.Stats().Indexers != 1 {
		t.Fatal("the known indexer was forgotten")
	}
	// The counter goes on; a second indexer completes the first two.
	if err := ob.Results(t.Context(), resultstest.Batch(t, resultstest.Records(9, 5, testNow))); err != nil {
		t.Fatal(err)
	}
	if r := refs(ob); r[len(r)-1].Seq != after[len(after)-1].Seq+1 {
		t.Fatalf("sequence after restart %d, last before %d", r[len(r)-1].Seq, after[len(after)-1].Seq)
	}
	ix2 := mustID(t)
	announce(t, ob, ix2, 1)
	if err := ob.HandleAck(t.Context(), ix2, after); err != nil {
		t.Fatal(err)
	}
	if s := ob.Stats(); s.Batches != 3 {
		t.Fatalf("%d batches left, want 3", s.Batches)
	}
}

// At its cap the outbox blocks Results, with a warning, until
// acknowledgements make room; a caller giving up keeps its batch in the
// reserve, or gets ErrOutboxFull when that is full too.
func TestOutboxCap(t *testing.T) {
	var logs resultstest.LogBuf
	b := resultstest.Batch(t, resultstest.Records(1, 40, testNow))
	size := int64(len(b.Data)) + 200
	ob, err := NewOutbox(resultstest.MemDB(t), resultstest.Key(t), sid(t), Logger(logs.Logger()), OutboxCap(3*size+size/2, size+size/2))
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	ix := mustID(t)
	announce(t, ob, ix, 1)
	for range 3 {
		if err := ob.Results(t.Context(), b); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- ob.Results(t.Context(), b) }()
	resultstest.WaitFor(t, "the outbox to report full", func() bool { return ob.Stats().Full })
	select {
	case err := <-done:
		t.Fatalf("Results returned %v with the outbox full", err)
	default:
	}
	if !contains(logs.String(), "results outbox full") {
		t.Fatalf("no warning logged:\n%s", logs.String())
	}
	if err := ob.HandleAck(t.Context(), ix, refs(ob)[:1]); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := ob.Stats(); s.Batches != 3 || s.Full || s.Paused != 1 || !contains(logs.String(), "crawling resumes") {
		t.Fatalf("after room was made: %+v", s)
	}

	// Giving up: the first batch fits the reserve, the second does not.
	for i, want := range []error{nil, ErrOutboxFull} {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- ob.Results(ctx, b) }()
		resultstest.WaitFor(t, "the outbox to report full", func() bool { return ob.Stats().Full })
		cancel()
		if err := <-done; !errors.Is(err, want) && !(want == nil && err == nil) {
			t.Fatalf("attempt %d: %v, want %v", i, err, want)
		}
	}
	if s := ob.Stats(); s.Batches != 4 || s.Reserve != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// The cap pauses a real crawler: its pipeline backs up behind Results,
// and once an indexer acknowledges, every page arrives, none dropped.
func TestOutboxPausesCrawler(t *testing.T) {
	const pages = 60
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var i int
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		if _, err := fmt.Sscanf(r.URL.Path, "/p%d", &i); err != nil || i >= pages {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<html><title>Page %d</title><body>Ferry %d harbour timetable sailing boats number%d", i, i, i)
		for j := 1; j <= 3; j++ {
			fmt.Fprintf(w, ` <a href="/p%d">next %d</a>`, (i*3+j)%pages, j)
		}
		io.WriteString(w, "</body></html>")
	}))
	defer srv.Close()

	ob, err := NewOutbox(resultstest.MemDB(t), resultstest.Key(t), sid(t), Logger(quiet()), OutboxCap(4<<10, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	c, err := crawl.New(resultstest.MemDB(t), ob, crawl.AllowPrivateNetworks(), crawl.Politeness(0, 0), crawl.Workers(4, 2, 4),
		crawl.Batching(1024, 20*time.Millisecond), crawl.Logger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Submit(t.Context(), crawl.Request{Link: srv.URL + "/p0", Depth: crawl.DefaultDepth}); err != nil {
		t.Fatal(err)
	}
	resultstest.WaitFor(t, "the outbox to fill", func() bool { return ob.Stats().Full })
	if st := c.Stats(); st.Queued+st.InFlight == 0 {
		t.Fatalf("the crawler finished although its sink is full: %+v", st)
	}

	// An indexer comes: acknowledge whatever is stored until the crawl ends.
	ix := mustID(t)
	announce(t, ob, ix, 1)
	seen := map[string]int{}
	resultstest.WaitFor(t, "the crawl to end", func() bool {
		for _, r := range refs(ob) {
			for _, rec := range storedRecords(t, ob, r.Seq) {
				seen[rec.URL]++
			}
			if err := ob.HandleAck(t.Context(), ix, []BatchRef{r}); err != nil {
				t.Fatal(err)
			}
		}
		st := c.Stats()
		return st.Queued == 0 && st.InFlight == 0 && len(seen) == pages && ob.Stats().Batches == 0
	})
	if len(seen) != pages {
		t.Fatalf("%d pages delivered, want %d", len(seen), pages)
	}
	for u, n := range seen {
		if n != 1 {
			t.Fatalf("%s delivered %d times", u, n)
		}
	}
	if st := c.Stats(); st.Dropped != 0 || ob.Stats().Paused == 0 {
		t.Fatalf("crawler %+v, outbox %+v", st, ob.Stats())
	}
}

// A crawler batch too large for maxParts messages becomes several
// batches, each with its own sequence number.
func TestOutboxSplitsOversizeBatch(t *testing.T) {
	ob, err := NewOutbox(resultstest.MemDB(t), resultstest.Key(t), sid(t), Logger(quiet()), MessageLimit(MinMessageLimit))
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	recs := resultstest.Records(1, 8000, testNow)
	for i := range recs {
		recs[i].Title = fmt.Sprintf("%x%x", sha256Sum([]byte(recs[i].URL)), sha256Sum([]byte(recs[i].Title)))
	}
	b := resultstest.Batch(t, recs)
	if max := maxParts * (MinMessageLimit - messageOverhead); len(b.Data) <= max {
		t.Fatalf("batch of %d bytes fits %d", len(b.Data), max)
	}
	if err := ob.Results(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	n := 0
	rs := refs(ob)
	for _, r := range rs {
		n += len(storedRecords(t, ob, r.Seq))
	}
	if len(rs) < 2 || n != len(recs) {
		t.Fatalf("%d batches holding %d records", len(rs), n)
	}
}

// Two indexers acknowledging the same batches at once remove them all.
func TestOutboxConcurrentAcks(t *testing.T) {
	ob, err := NewOutbox(resultstest.MemDB(t), resultstest.Key(t), sid(t), Logger(quiet()), Acks(2))
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	for i := range 40 {
		if err := ob.Results(t.Context(), resultstest.Batch(t, resultstest.Records(i, 2, testNow))); err != nil {
			t.Fatal(err)
		}
	}
	ids := []peer.ID{mustID(t), mustID(t)}
	for _, id := range ids {
		announce(t, ob, id, 1)
	}
	rs := refs(ob)
	done := make(chan error, 2*len(rs))
	for _, id := range ids {
		go func() {
			for _, r := range rs {
				done <- ob.HandleAck(t.Context(), id, []BatchRef{r})
			}
		}()
	}
	for range 2 * len(rs) {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if s := ob.Stats(); s.Batches != 0 || s.Removed != 40 || s.Bytes != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// Batches stored under another shard count (or snapshot, or a larger
// message limit) are signed again at start, records unchanged.
func TestOutboxReseals(t *testing.T) {
	db := resultstest.MemDB(t)
	sk := resultstest.Key(t)
	ob, err := NewOutbox(db, sk, sid(t), Logger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	var recs []crawl.Record
	for s := range 10 {
		recs = append(recs, resultstest.Records(s, 3, testNow)...)
	}
	if err := ob.Results(t.Context(), resultstest.Batch(t, recs)); err != nil {
		t.Fatal(err)
	}
	last := refs(ob)[0].Seq
	ob.Close()

	ob, err = NewOutbox(db, sk, sid(t), Logger(quiet()), Shards(4))
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	rs := refs(ob)
	n := 0
	for _, r := range rs {
		if r.Seq <= last {
			t.Fatalf("old batch %d kept", r.Seq)
		}
		e := ob.entries[r.Seq]
		for _, rec := range storedRecords(t, ob, r.Seq) {
			if RecordShard(&rec, 4) != e.shard {
				t.Fatalf("%s in shard %d", rec.URL, e.shard)
			}
			n++
		}
	}
	if len(rs) < 2 || n != len(recs) {
		t.Fatalf("%d batches with %d records after resealing", len(rs), n)
	}
	if s := ob.Stats(); s.Batches != len(rs) {
		t.Fatalf("stats %+v", s)
	}
}
