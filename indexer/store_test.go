package indexer

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/indexer/index"
	"github.com/micra-net/micra/internal/pgserver"
	"github.com/micra-net/micra/internal/pgserver/pgtest"
	"github.com/micra-net/micra/results"
	"github.com/micra-net/micra/results/resultstest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestIndexerStoreDown: an indexer whose PostgreSQL server goes down
// stops acknowledging (the batch waits in the node's outbox) and stores
// the batch, once, when the node sends it again after the server is back.
func TestIndexerStoreDown(t *testing.T) {
	srv := pgtest.Private(t, pgserver.Options{})
	ctx := t.Context()
	if err := srv.CreateDB(ctx, "ix"); err != nil {
		t.Fatal(err)
	}
	x, err := index.OpenPostgres(ctx, srv.DSN("ix"), index.PostgresOptions{}, index.Logger(quiet()), index.Clock(func() time.Time { return testNow }))
	if err != nil {
		t.Fatal(err)
	}
	ix, acks := storeIndexer(t, x, resultstest.MemDB(t), nil)
	node := resultstest.Key(t)
	nodeID, _ := peer.IDFromPrivateKey(node)
	batch := func(seq uint64, n int) []byte {
		s, err := seal(node, nil, batchMeta{node: nodeID, seq: seq, snapshot: sid(t), created: testNow, shards: 1,
			batch: resultstest.Batch(t, resultstest.Records(int(seq), n, testNow))}, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		return envs(t, s)[0]
	}
	if err := ix.ingest(ctx, inbound{data: batch(1, 30)}); err != nil {
		t.Fatal(err)
	}
	resultstest.WaitFor(t, "the first acknowledgement", func() bool { return acks.count(nodeID) == 1 })
	if err := srv.Halt(); err != nil {
		t.Fatal(err)
	}
	second := batch(2, 20)
	if err := ix.ingest(ctx, inbound{data: second}); err == nil {
		t.Fatal("a batch was taken with the store's server down")
	}
	if s := ix.Stats(); s.Batches != 1 {
		t.Fatalf("indexer %+v after a failed store", s)
	}
	if err := srv.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ix.ingest(ctx, inbound{data: second}); err != nil { // the node's retry
		t.Fatal(err)
	}
	resultstest.WaitFor(t, "the second acknowledgement", func() bool { return acks.count(nodeID) == 2 })
	if s := x.Stats(); s.Docs != 50 || s.Added != 50 || s.Duplicates != 0 {
		t.Fatalf("store %+v", s)
	}
	if got := acks.count(nodeID); got != 2 {
		t.Fatalf("%d acknowledgements, want 2", got)
	}
}

// TestSearchOnly: a search-only indexer joins no result topic and no
// indexers' topic (so it never announces itself), while its store serves
// search.
func TestSearchOnly(t *testing.T) {
	n := newTNode(t, nil, 0, nil, resultstest.MemDB(t))
	ix := startIndexer(t, n, SearchOnly())
	if len(ix.subs) != 0 || ix.annTopic != nil {
		t.Fatalf("a search-only indexer subscribed to %d result topics (announcements: %v)", len(ix.subs), ix.annTopic != nil)
	}
	for _, tp := range n.o.PubSub().GetTopics() {
		if tp == results.TopicIndexers || tp == results.Topic(0, 1) {
			t.Fatalf("a search-only indexer joined %s", tp)
		}
	}
	if _, err := ix.Index().Search(t.Context(), index.Query{Text: "anything"}); err != nil {
		t.Fatal(err)
	}
}
