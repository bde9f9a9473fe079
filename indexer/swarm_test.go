package indexer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/indexer/index"
	"github.com/micra-net/micra/internal/p2ptest"
	"github.com/micra-net/micra/overlay/overlaytest"
	"github.com/micra-net/micra/requests"
	"github.com/micra-net/micra/results"
	"github.com/micra-net/micra/results/pb"
	"github.com/micra-net/micra/results/resultstest"
)

// produce hands batches of records of sites first.. to ob, n records each.
func produce(t testing.TB, ob *results.Outbox, first, sites, n int) int {
	t.Helper()
	for s := first; s < first+sites; s++ {
		if err := ob.Results(t.Context(), resultstest.Batch(t, resultstest.Records(s, n, time.Now()))); err != nil {
			t.Fatal(err)
		}
	}
	return sites * n
}

// waitDrained waits until every outbox of obs has no batch left.
func waitDrained(t testing.TB, obs []*results.Outbox) {
	t.Helper()
	resultstest.WaitFor(t, "every outbox to empty", func() bool {
		for _, ob := range obs {
			if ob.Stats().Batches > 0 {
				return false
			}
		}
		return true
	})
}

func has(t testing.TB, x index.Store, term string) bool {
	t.Helper()
	res, err := x.Search(t.Context(), index.Query{Text: term})
	if err != nil {
		t.Fatal(err)
	}
	return res.Total > 0
}

// Nodes produce batches while no indexer is online; when one comes, every
// batch arrives and none is stored twice.
func TestIndexerOfflineThenOnline(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		net := p2ptest.NewNet(t)
		nodes := []*tnode{newTNode(t, net, 0, nil, nil), newTNode(t, net, 1, nil, nil), newTNode(t, net, 2, nil, nil)}
		join(t, nodes[0], nodes[1:]...)
		var obs []*results.Outbox
		total, batches := 0, 0
		for i, n := range nodes {
			ob := startOutbox(t, n, n.db)
			total += produce(t, ob, 10*i, 4, 25)
			batches += 4
			obs = append(obs, ob)
		}
		for _, ob := range obs {
			if s := ob.Stats(); s.Batches != 4 || s.Published != 0 {
				t.Fatalf("published with no indexer online: %+v", s)
			}
		}

		ixn := newTNode(t, net, 3, nil, nil)
		join(t, nodes[0], ixn)
		ix := startIndexer(t, ixn)
		waitDrained(t, obs)
		if s := ix.Index().Stats(); s.Docs != int64(total) || s.Added != uint64(total) || s.Duplicates != 0 || s.Rejected != 0 {
			t.Fatalf("index %+v, want %d records once", s, total)
		}
		if s := ix.Stats(); s.Batches != uint64(batches) || s.Rejected != 0 || s.Conflicts != 0 {
			t.Fatalf("indexer %+v", s)
		}
		if !has(t, ix.Index(), "w21x24") {
			t.Fatal("a record is not searchable")
		}
		// Later batches go straight through.
		total += produce(t, obs[1], 100, 1, 5)
		resultstest.WaitFor(t, "a live batch", func() bool { return ix.Index().Stats().Docs == int64(total) && obs[1].Stats().Batches == 0 })
	})
}

// Two indexers each take one of two shards: each stores only its shard's
// sites, and together all.
func TestTwoIndexersOneShardEach(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		net := p2ptest.NewNet(t)
		nodes := []*tnode{newTNode(t, net, 0, nil, nil), newTNode(t, net, 1, nil, nil)}
		ixns := []*tnode{newTNode(t, net, 2, nil, nil), newTNode(t, net, 3, nil, nil)}
		join(t, nodes[0], append(nodes[1:], ixns...)...)
		ixs := []*Indexer{startIndexer(t, ixns[0], Shards(2), Take(0)), startIndexer(t, ixns[1], Shards(2), Take(1))}
		const sites = 16
		total := 0
		for i, n := range nodes {
			ob := startOutbox(t, n, n.db, results.Shards(2))
			// Each batch mixes the sites of both shards.
			var recs []crawl.Record
			for s := range sites / 2 {
				recs = append(recs, resultstest.Records(i*sites/2+s, 6, time.Now())...)
			}
			if err := ob.Results(t.Context(), resultstest.Batch(t, recs)); err != nil {
				t.Fatal(err)
			}
			total += len(recs)
			resultstest.WaitFor(t, "the outbox to empty", func() bool { return ob.Stats().Batches == 0 })
			if s := ob.Stats(); s.Stored != 2 {
				t.Fatalf("one batch over two shards stored as %d", s.Stored)
			}
		}
		docs := int64(0)
		for _, ix := range ixs {
			docs += ix.Index().Stats().Docs
		}
		if docs != int64(total) {
			t.Fatalf("%d records stored in all, want %d", docs, total)
		}
		for s := range sites {
			want := results.ShardOf(fmt.Sprintf("s%d.example", s), 2)
			for i, ix := range ixs {
				if got := has(t, ix.Index(), fmt.Sprintf("w%dx0", s)); got != (uint32(i) == want) {
					t.Fatalf("site %d (shard %d) in indexer %d: %v", s, want, i, got)
				}
			}
		}
	})
}

// Forged and tampered messages on the wire are rejected and logged; the
// genuine batch beside them is stored.
func TestForgedBatchesRejected(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		net := p2ptest.NewNet(t)
		var logs resultstest.LogBuf
		victim, rogue, ixn := newTNode(t, net, 0, nil, nil), newTNode(t, net, 1, nil, nil), newTNode(t, net, 2, nil, nil)
		join(t, victim, rogue, ixn)
		ix := startIndexer(t, ixn, Logger(logs.Logger()))
		ob := startOutbox(t, victim, victim.db)

		victimID := victim.h.ID()
		// Signed by the rogue's key, claiming to be the victim's batch.
		recs := resultstest.Records(66, 5, time.Now())
		forged, err := seal(rogue.sk, nil, batchMeta{node: victimID, seq: 1, snapshot: sid(t), created: time.Now(), shards: 1, batch: resultstest.Batch(t, recs)}, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		// The rogue's own batch, altered after signing.
		own, err := seal(rogue.sk, nil, batchMeta{node: rogue.h.ID(), seq: 1, snapshot: sid(t), created: time.Now(), shards: 1, batch: resultstest.Batch(t, recs)}, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		tampered := resultstest.Reenvelope(t, envs(t, own)[0], func(e *pb.Envelope, h *pb.Header) { e.Data[len(e.Data)-3] ^= 1 })
		msgs := [][]byte{envs(t, forged)[0], tampered}
		produce(t, ob, 1, 1, 5)
		resultstest.WaitFor(t, "both forgeries to be rejected", func() bool {
			for _, m := range msgs {
				if err := rogue.publishRaw(t, m); err != nil {
					t.Fatal(err)
				}
			}
			return ix.Stats().Rejected >= 2 && ob.Stats().Batches == 0
		})
		if s := ix.Index().Stats(); s.Docs != 5 || has(t, ix.Index(), "w66x0") {
			t.Fatalf("forged records stored: %+v", s)
		}
		for _, want := range []string{"result message rejected", "bad batch signature", "does not match its hash"} {
			if !contains(logs.String(), want) {
				t.Fatalf("%q not logged:\n%s", want, logs.String())
			}
		}

		// A genuine batch replayed by another peer is acknowledged again, not
		// stored again.
		genuine, err := seal(victim.sk, nil, batchMeta{node: victimID, seq: 5, snapshot: sid(t), created: time.Now(), shards: 1,
			batch: resultstest.Batch(t, resultstest.Records(77, 4, time.Now()))}, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		m := envs(t, genuine)[0]
		resultstest.WaitFor(t, "the genuine batch", func() bool {
			if err := victim.publishRaw(t, m); err != nil {
				t.Fatal(err)
			}
			return ix.Stats().Batches == 2
		})
		resultstest.WaitFor(t, "the replay", func() bool {
			if err := rogue.publishRaw(t, m); err != nil {
				t.Fatal(err)
			}
			return ix.Stats().Duplicates >= 1
		})
		if s := ix.Index().Stats(); s.Docs != 9 || s.Duplicates != 0 || ix.Stats().Batches != 2 {
			t.Fatalf("after a replay: index %+v, indexer %+v", s, ix.Stats())
		}
	})
}

// A batch larger than the message limit travels in parts.
func TestLargeBatchInParts(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		net := p2ptest.NewNet(t)
		n, ixn := newTNode(t, net, 0, nil, nil), newTNode(t, net, 1, nil, nil)
		join(t, n, ixn)
		ix := startIndexer(t, ixn, MessageLimit(results.MinMessageLimit))
		ob := startOutbox(t, n, n.db, results.MessageLimit(results.MinMessageLimit))
		recs := resultstest.Records(5, 400, time.Now())
		for i := range recs {
			recs[i].Title = fmt.Sprintf("%x %x", sha256Sum([]byte(recs[i].URL)), sha256Sum([]byte(recs[i].Title)))
		}
		b := resultstest.Batch(t, recs)
		if parts := (len(b.Data) + results.MinMessageLimit - (results.DefaultMessageLimit - results.PartSize(results.DefaultMessageLimit)) - 1) / (results.MinMessageLimit - (results.DefaultMessageLimit - results.PartSize(results.DefaultMessageLimit))); parts < 4 {
			t.Fatalf("batch of %d bytes makes only %d parts", len(b.Data), parts)
		}
		if err := ob.Results(t.Context(), b); err != nil {
			t.Fatal(err)
		}
		resultstest.WaitFor(t, "the outbox to empty", func() bool { return ob.Stats().Batches == 0 })
		if s := ix.Index().Stats(); s.Docs != 400 {
			t.Fatalf("index %+v", s)
		}
	})
}

// The outbox survives a restart of its node: the batches made before go
// out after, to an indexer that was offline all along.
func TestOutboxRestartDelivers(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		net := p2ptest.NewNet(t)
		dir := t.TempDir()
		sk := resultstest.Key(t)
		boot := newTNode(t, net, 0, nil, nil)
		db := resultstest.DiskDB(t, dir)
		n := newTNode(t, net, 1, sk, db)
		join(t, boot, n)
		ob := startOutbox(t, n, db)
		total := produce(t, ob, 0, 5, 10)
		ob.Close()
		n.stop()
		db.Close()

		db = resultstest.DiskDB(t, dir)
		t.Cleanup(func() { db.Close() })
		n = newTNode(t, net, 1, sk, db)
		join(t, boot, n)
		ob = startOutbox(t, n, db)
		if s := ob.Stats(); s.Batches != 5 {
			t.Fatalf("%d batches after restart, want 5", s.Batches)
		}
		ixn := newTNode(t, net, 2, nil, nil)
		join(t, boot, ixn)
		ix := startIndexer(t, ixn)
		resultstest.WaitFor(t, "the outbox to empty", func() bool { return ob.Stats().Batches == 0 })
		if s := ix.Index().Stats(); s.Docs != int64(total) || s.Duplicates != 0 {
			t.Fatalf("index %+v, want %d", s, total)
		}
		if s := ix.Index().Stats(); s.Docs != int64(total) {
			t.Fatal(s)
		}
	})
}

// Crawl requests reach the node owning the subnet of their host, with
// their depth and owners, through Submit and the indexer's HTTP API.
func TestCrawlRequests(t *testing.T) {
	var net *p2ptest.Net // nil: loopback hosts; the test also serves HTTP, which a synctest bubble cannot carry
	boot, crawler, ixn := newTNode(t, net, 0, nil, nil), newTNode(t, net, 1, nil, nil), newTNode(t, net, 2, nil, nil)
	join(t, boot, crawler, ixn)
	if _, err := crawler.o.Delegate(t.Context(), "", overlaytest.Addr(1)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []crawl.Request
	var from []peer.ID
	remove, err := requests.ServeCrawlRequests(crawler.h, func(ctx context.Context, p peer.ID, reqs []crawl.Request) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, reqs...)
		from = append(from, p)
		return nil
	}, requests.Logger(quiet()), requests.Egress(egress.Policy{AllowPrivate: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	ix := startIndexer(t, ixn)

	owned := fmt.Sprintf("http://%s/start", "127.1.1.77")
	res, err := ix.Submit(t.Context(), []crawl.Request{
		{Link: owned, Depth: 3, Owners: []string{"alice"}},
		{Link: "ftp://127.1.1.77/x", Depth: 1},
		{Link: "http://127.2.9.9/", Depth: 1}, // not delegated: the asker gets it, and does not crawl
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent[crawler.h.ID()] != 1 || len(res.Failed) != 2 {
		t.Fatalf("submit %+v", res)
	}
	mu.Lock()
	if len(got) != 1 || got[0].Link != owned || got[0].Depth != 3 || !slices.Equal(got[0].Owners, []string{"alice"}) || from[0] != ixn.h.ID() {
		t.Fatalf("crawler got %+v from %v", got, from)
	}
	mu.Unlock()

	srv := httptest.NewServer(ix.Handler(index.HTTPOptions{}))
	defer srv.Close()
	body, _ := json.Marshal(map[string]any{"urls": []string{"http://127.1.1.8/a", "http://127.1.1.9/b"}, "depth": 0})
	resp, err := http.Post(srv.URL+"/api/crawl", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Sent   int `json:"sent"`
		Failed []struct{ URL, Error string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || out.Sent != 2 || len(out.Failed) != 0 {
		t.Fatalf("POST /api/crawl: %d %+v %v", resp.StatusCode, out, err)
	}
	resp.Body.Close()
	mu.Lock()
	if len(got) != 3 || got[2].Depth != 0 {
		t.Fatalf("crawler got %+v", got)
	}
	mu.Unlock()
	ro := httptest.NewServer(ix.Handler(index.HTTPOptions{ReadOnly: true}))
	defer ro.Close()
	resp, err = http.Post(ro.URL+"/api/crawl", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed && resp.StatusCode != http.StatusNotFound {
		t.Fatalf("read-only handler took a crawl request: %d", resp.StatusCode)
	}
}

// A real crawler's pages become searchable on an indexer.
func TestCrawlerToIndexer(t *testing.T) {
	var net *p2ptest.Net // nil: loopback hosts; the test also serves HTTP, which a synctest bubble cannot carry
	const pages = 12
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var i int
		if _, err := fmt.Sscanf(r.URL.Path, "/p%d", &i); err != nil || i >= pages {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<html><title>Lighthouse %d</title><body>Keeper's logbook entry zebra%d. <a href=\"/p%d\">next</a></body></html>", i, i, (i+1)%pages)
	}))
	defer srv.Close()
	n, ixn := newTNode(t, net, 0, nil, nil), newTNode(t, net, 1, nil, nil)
	join(t, n, ixn)
	ix := startIndexer(t, ixn)
	ob := startOutbox(t, n, n.db)
	c, err := crawl.New(resultstest.MemDB(t), ob, crawl.AllowPrivateNetworks(), crawl.Politeness(0, 0),
		crawl.Batching(4096, 50*time.Millisecond), crawl.Logger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Submit(t.Context(), crawl.Request{Link: srv.URL + "/p0", Depth: crawl.DefaultDepth}); err != nil {
		t.Fatal(err)
	}
	resultstest.WaitFor(t, "every page indexed", func() bool { return ix.Index().Stats().Docs == pages && ob.Stats().Batches == 0 })
	res, err := ix.Index().Search(t.Context(), index.Query{Text: "zebra7 lighthouse"})
	if err != nil || res.Total != 1 || res.Hits[0].URL != srv.URL+"/p7" {
		t.Fatalf("search: %+v %v", res, err)
	}
}

// TestCrawlRequestsOutliveTheirNode: the node a crawl request went to dies
// before crawling it; its subnet goes to another node and the indexer,
// having seen no record of the page, submits the request again, to the new
// owner. A record answers a request; a request without one is given up
// after its attempts. Pending requests survive the indexer's restart.
func TestCrawlRequestsOutliveTheirNode(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		net := p2ptest.NewNet(t)
		nodes := []*tnode{newTNode(t, net, 0, nil, nil), newTNode(t, net, 1, nil, nil), newTNode(t, net, 2, nil, nil), newTNode(t, net, 3, nil, nil)}
		join(t, nodes[0], nodes[1:]...)
		var mu sync.Mutex
		got := map[peer.ID][]string{}
		handler := func(ctx context.Context, p peer.ID, reqs []crawl.Request) error {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range reqs {
				got[p] = append(got[p], r.Link)
			}
			return nil
		}
		for _, n := range nodes[:3] {
			id := n.h.ID()
			remove, err := requests.ServeCrawlRequests(n.h, func(ctx context.Context, _ peer.ID, reqs []crawl.Request) error {
				return handler(ctx, id, reqs)
			}, requests.Logger(quiet()), requests.Egress(egress.Policy{AllowPrivate: true}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(remove)
		}
		a, ixn := nodes[1], nodes[3]
		if _, err := a.o.Delegate(t.Context(), "", netip.MustParseAddr("127.1.1.77")); err != nil {
			t.Fatal(err)
		}
		ix := startIndexer(t, ixn, CrawlPatience(time.Second, 3), LocalCrawl(func(ctx context.Context, _ peer.ID, reqs []crawl.Request) error {
			return handler(ctx, ixn.h.ID(), reqs)
		}))
		links := []string{"http://127.1.1.77/start", "http://127.1.1.77/other"}
		res, err := ix.Submit(t.Context(), []crawl.Request{{Link: links[0], Depth: 2}, {Link: links[1], Depth: 1}})
		if err != nil || res.Sent[a.h.ID()] != 2 || ix.Pending() != 2 {
			t.Fatalf("submit: %+v, %v; %d pending", res, err, ix.Pending())
		}
		a.stop() // dies before crawling them
		var owner peer.ID
		// Resent counts a submission once the owner's answer is back,
		// a link latency after its handler saw the requests.
		resultstest.WaitFor(t, "the requests submitted again to the subnet's new owner", func() bool {
			mu.Lock()
			defer mu.Unlock()
			if ix.Stats().Resent < 2 {
				return false
			}
			for p, ls := range got {
				if p != a.h.ID() && slices.Contains(ls, links[0]) && slices.Contains(ls, links[1]) {
					owner = p
					return true
				}
			}
			return false
		})
		if st := ix.Stats(); st.Resent < 2 {
			t.Errorf("stats after the resubmission: %+v", st)
		}
		// The new owner's record of the first page answers it; the second is
		// given up after its third submission.
		ix.satisfied([]crawl.Record{{URL: links[0], FinalURL: links[0]}})
		resultstest.WaitFor(t, "the unanswered request given up", func() bool { return ix.Pending() == 0 })
		if st := ix.Stats(); st.Answered != 1 || st.GaveUp != 1 {
			t.Errorf("stats at the end: %+v", st)
		}
		t.Logf("resubmitted to %s; %+v", owner, ix.Stats())
	})
}

// TestPendingSurvivesRestart: crawl requests kept by an indexer are there
// after a restart on the same database, and answered ones are not.
func TestPendingSurvivesRestart(t *testing.T) {
	db, x := memIndex(t)
	ix, err := newIndexer(x, db, sid(t), Logger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	ix.keepPending([]crawl.Request{{Link: "http://a.example/"}, {Link: "HTTP://B.example:80/x#frag"}, {Link: "ftp://c.example/"}})
	ix.satisfied([]crawl.Record{{URL: "http://a.example/"}})
	ix2, err := newIndexer(x, db, sid(t), Logger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	if n := ix2.Pending(); n != 1 {
		t.Fatalf("%d requests pending after the restart, want 1 (b, normalised)", n)
	}
	ix2.satisfied([]crawl.Record{{URL: "http://b.example/x"}})
	if n := ix2.Pending(); n != 0 {
		t.Fatalf("the normalised URL's record left %d pending", n)
	}
}
