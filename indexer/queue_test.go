package indexer

import (
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/micra-net/micra/results"
	"github.com/micra-net/micra/results/pb"
)

// TestRetryQueue: a queue keeps new items within its limit under its
// prefix, one key an item named by its id in base32, takes the due ones in
// key order, updates and removes them, and a queue opened anew on the
// same database finds what was kept.
func TestRetryQueue(t *testing.T) {
	db, _ := memIndex(t)
	now := time.UnixMilli(1_700_000_000_000)
	q := newRetryQueue[pb.WithheldOwed](db, withheldPrefix(), 3)
	ids := [][16]byte{{1}, {2}, {3}, {4}}
	items := []*pb.WithheldOwed{
		{Url: "http://a.example/", NextMs: now.UnixMilli()},
		{Url: "http://b.example/", NextMs: now.Add(time.Minute).UnixMilli()},
		{Url: "http://c.example/", NextMs: now.Add(-time.Minute).UnixMilli()},
		{Url: "http://d.example/", NextMs: now.UnixMilli()},
	}
	q.mu.Lock()
	added, lost, err := q.keep(ids, items)
	q.mu.Unlock()
	if err != nil || added != 3 || lost != 1 {
		t.Fatalf("keep: %d added, %d lost, error %v; want 3, 1 (the limit), none", added, lost, err)
	}
	q.mu.Lock()
	added, lost, err = q.keep(ids[:1], []*pb.WithheldOwed{{Url: "http://other.example/"}})
	q.mu.Unlock()
	if err != nil || added != 0 || lost != 0 {
		t.Fatalf("keep again: %d added, %d lost, error %v; want nothing", added, lost, err)
	}
	// The layout on disk: /results/withheld/<base32 id>.
	if err := db.View(func(txn *badger.Txn) error {
		_, err := txn.Get([]byte(results.Prefix + "withheld/" + b32.EncodeToString(ids[2][:])))
		return err
	}); err != nil {
		t.Fatalf("item under its key: %v", err)
	}

	gotIDs, got, err := q.dueAt(now, 10)
	if err != nil || len(got) != 2 || gotIDs[0] != ids[0] || got[0].GetUrl() != items[0].Url || gotIDs[1] != ids[2] {
		t.Fatalf("due: %v %v %v, want a then c", gotIDs, got, err)
	}
	if _, got, _ := q.dueAt(now, 1); len(got) != 1 {
		t.Errorf("due, at most 1: %d", len(got))
	}
	if kept, err := q.change(ids[1], func(wo *pb.WithheldOwed) { wo.NextMs = now.UnixMilli() }); !kept || err != nil {
		t.Fatalf("change: %v %v", kept, err)
	}
	if kept, _ := q.change(ids[3], func(*pb.WithheldOwed) { t.Error("changed an item not kept") }); kept {
		t.Error("change of an item not kept reports it kept")
	}
	if err := q.drop(ids[0]); err != nil {
		t.Fatal(err)
	}

	q2 := newRetryQueue[pb.WithheldOwed](db, withheldPrefix(), 3)
	if err := q2.load(); err != nil {
		t.Fatal(err)
	}
	if n := q2.Len(); n != 2 {
		t.Fatalf("%d items after a restart, want 2", n)
	}
	gotIDs, got, _ = q2.dueAt(now, 10)
	if len(got) != 2 || gotIDs[0] != ids[1] || gotIDs[1] != ids[2] {
		t.Fatalf("due after the restart: %v, want b (changed) and c", gotIDs)
	}
	q2.mu.Lock()
	err = q2.updateAll(gotIDs, 1, func(i int, wo *pb.WithheldOwed) { wo.Tries = uint32(i + 1) })
	q2.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if err := db.View(func(txn *badger.Txn) error {
		for i, id := range gotIDs {
			wo, err := q2.get(txn, id)
			if err != nil || wo.GetTries() != uint32(i+1) {
				t.Errorf("item %d after updateAll: %v %v", i, wo, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// A pending queue on the same database sees none of them.
	p := newRetryQueue[pb.PendingCrawl](db, pendingPrefix(), 3)
	if err := p.load(); err != nil || p.Len() != 0 {
		t.Errorf("pending queue: %d items, error %v", p.Len(), err)
	}
}
