package indexer

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/indexer/index"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/requests"
	"github.com/micra-net/micra/results"
	"github.com/micra-net/micra/results/pb"
	"github.com/micra-net/micra/results/resultstest"
)

// storedPending reads the pending request of link.
func storedPending(t *testing.T, ix *Indexer, link string) ([16]byte, *pb.PendingCrawl) {
	t.Helper()
	id := pendingID(link)
	var pc *pb.PendingCrawl
	err := ix.db.View(func(txn *badger.Txn) (err error) {
		pc, err = ix.pend.get(txn, id)
		return err
	})
	if err != nil {
		t.Fatalf("pending request of %s: %v", link, err)
	}
	return id, pc
}

// sentWithReceipts is what requests.Submit returns when holder, whose key
// is key, took requests for links at at.
func sentWithReceipts(t *testing.T, key crypto.PrivKey, at time.Time, links ...string) requests.SubmitResult {
	t.Helper()
	holder, err := peer.IDFromPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	res := requests.SubmitResult{To: map[string]peer.ID{}, Receipts: map[string]requests.Receipt{}}
	for _, l := range links {
		sig, err := overlay.SignReceipt(key, l, at)
		if err != nil {
			t.Fatal(err)
		}
		res.To[l], res.Receipts[l] = holder, requests.Receipt{At: at, Sig: sig}
	}
	return res
}

// TestWithheldOwed: a withholding notice owed about the node a crawl
// request went to is kept in badger and is there after a restart, with the
// node, the URL, and the node's receipt and its time; one is owed per
// request, none without a receipt (one of a link that is not the request's
// normalized one is not kept); a notice whose request a record answered
// meanwhile is dropped, not sent; beyond the bound none is kept.
func TestWithheldOwed(t *testing.T) {
	db, x := memIndex(t)
	ix, err := newIndexer(x, db, sid(t), Logger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	key := resultstest.Key(t)
	holder, err := peer.IDFromPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	took := testNow.Add(-time.Minute)
	links := []string{"http://a.example/", "http://b.example/x"}
	ix.keepPending([]crawl.Request{{Link: links[0]}, {Link: links[1]}})
	sent := sentWithReceipts(t, key, took, links...)
	ix.noteHolders(sent)
	var due []*pb.PendingCrawl
	var ids [][16]byte
	for _, l := range links {
		id, pc := storedPending(t, ix, l)
		if peer.ID(pc.GetHolder()) != holder || pc.GetSentMs() == 0 || pc.GetReceiptMs() != took.UnixMilli() || len(pc.GetReceipt()) == 0 {
			t.Fatalf("pending request of %s: %+v, want its holder, when it was sent and the receipt", l, pc)
		}
		due, ids = append(due, pc), append(ids, id)
	}
	ix.oweWithheld(due, ids)
	ix.oweWithheld(due, ids) // once per request
	if n := ix.Owed(); n != 2 {
		t.Fatalf("%d notices owed, want 2", n)
	}
	// No receipt, no notice: the coordinator would judge none. A receipt
	// of the link as first submitted, not normalized, is not the link a
	// notice names.
	for _, res := range []requests.SubmitResult{
		{To: map[string]peer.ID{"http://n.example/": holder}},
		sentWithReceipts(t, key, took, "HTTP://M.example"),
	} {
		ix.keepPending([]crawl.Request{{Link: slices.Collect(maps.Keys(res.To))[0]}})
		ix.noteHolders(res)
	}
	for _, l := range []string{"http://n.example/", "http://m.example/"} {
		id, pc := storedPending(t, ix, l)
		if peer.ID(pc.GetHolder()) != holder || len(pc.GetReceipt()) != 0 {
			t.Fatalf("pending request of %s: %+v, want its holder and no receipt", l, pc)
		}
		ix.oweWithheld([]*pb.PendingCrawl{pc}, [][16]byte{id})
	}
	if n := ix.Owed(); n != 2 {
		t.Fatalf("%d notices owed after requests without receipts, want 2", n)
	}

	ix2, err := newIndexer(x, db, sid(t), Logger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	if n := ix2.Owed(); n != 2 {
		t.Fatalf("%d notices owed after the restart, want 2", n)
	}
	var got []*pb.WithheldOwed
	_ = db.View(func(txn *badger.Txn) error {
		p := withheldPrefix()
		it := txn.NewIterator(badger.IteratorOptions{Prefix: p, PrefetchValues: true})
		defer it.Close()
		for it.Seek(p); it.ValidForPrefix(p); it.Next() {
			var wo pb.WithheldOwed
			if _, ok := parseWithheldKey(it.Item().Key()); !ok || it.Item().Value(func(v []byte) error { return proto.Unmarshal(v, &wo) }) != nil {
				t.Errorf("unreadable notice under %q", it.Item().Key())
				continue
			}
			got = append(got, &wo)
		}
		return nil
	})
	for _, wo := range got {
		if peer.ID(wo.GetHolder()) != holder || wo.GetAskedMs() != took.UnixMilli() || (wo.GetUrl() != links[0] && wo.GetUrl() != links[1]) ||
			!bytes.Equal(wo.GetReceipt(), sent.Receipts[wo.GetUrl()].Sig) {
			t.Errorf("stored notice %+v", wo)
		}
		if err := overlay.VerifyReceipt(holder, wo.GetUrl(), time.UnixMilli(wo.GetAskedMs()), wo.GetReceipt()); err != nil {
			t.Errorf("stored notice's receipt: %v", err)
		}
	}
	if len(got) != 2 {
		t.Fatalf("%d notices stored, want 2", len(got))
	}
	// A record of the first page answers its request: its notice is
	// dropped when due, without asking anyone (ix2 has no overlay).
	ix2.satisfied([]crawl.Record{{URL: links[0]}})
	ix2.sendNotice(t.Context(), ids[0], got[0])
	if got[0].GetUrl() != links[0] {
		ix2.sendNotice(t.Context(), ids[0], got[1])
	}
	if n := ix2.Owed(); n != 1 {
		t.Fatalf("%d notices owed after a record answered one, want 1", n)
	}
	if st := ix2.Stats(); st.WithheldSent != 0 || st.WithheldOwed != 1 {
		t.Errorf("stats: %+v", st)
	}
	// A page the index holds was crawled before: its node makes no new
	// record of it unchanged, and is not to blame.
	old := "http://d.example/"
	if _, err := x.Put(t.Context(), index.Source{Node: holder.String(), Seq: 1}, []crawl.Record{{URL: old, FinalURL: old,
		Time: testNow, Status: 200, Type: crawl.TypeHTML, Change: crawl.ChangeNew, Title: "old"}}); err != nil {
		t.Fatal(err)
	}
	ix2.keepPending([]crawl.Request{{Link: old}})
	ix2.noteHolders(sentWithReceipts(t, key, took, old))
	id, pc := storedPending(t, ix2, old)
	ix2.oweWithheld([]*pb.PendingCrawl{pc}, [][16]byte{id})
	if n := ix2.Owed(); n != 1 {
		t.Fatalf("%d notices owed after a request for a page indexed before, want 1", n)
	}
	// An indexer taking one shard of two owes no notice about a page of
	// the other: its record goes to another indexer.
	ix3, err := newIndexer(x, db, sid(t), Logger(quiet()), Shards(2), Take(0))
	if err != nil {
		t.Fatal(err)
	}
	other := ""
	for i := 0; other == ""; i++ {
		if h := fmt.Sprintf("h%d.example", i); results.ShardOf(h, 2) == 1 {
			other = "http://" + h + "/"
		}
	}
	ix3.keepPending([]crawl.Request{{Link: other}})
	ix3.noteHolders(sentWithReceipts(t, key, took, other))
	id, pc = storedPending(t, ix3, other)
	ix3.oweWithheld([]*pb.PendingCrawl{pc}, [][16]byte{id})
	if n := ix3.Owed(); n != 1 {
		t.Fatalf("%d notices owed after a request for another indexer's shard, want 1", n)
	}
	// The bound.
	ix2.owed.limit = ix2.owed.Len()
	ix2.keepPending([]crawl.Request{{Link: "http://c.example/"}})
	ix2.noteHolders(sentWithReceipts(t, key, took, "http://c.example/"))
	id, pc = storedPending(t, ix2, "http://c.example/")
	ix2.oweWithheld([]*pb.PendingCrawl{pc}, [][16]byte{id})
	if st := ix2.Stats(); st.WithheldUnkept != 1 {
		t.Errorf("a notice beyond the bound: %+v", st)
	}
}

// TestRefusalsOwed: a request the node owning its subnet would
// not take leaves no receipt; the indexer keeps which node refused it and
// since when, and once that node has refused it for the patience it owes
// a refused notice about it (no receipt), one per request. A node that
// takes it ends the refusal, another node's refusal starts afresh, and a
// node that delivered a record of the request's host meanwhile is busy
// with the host, not refusing: none is owed.
func TestRefusalsOwed(t *testing.T) {
	db, x := memIndex(t)
	now := testNow
	ix, err := newIndexer(x, db, sid(t), Logger(quiet()), Clock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	key := resultstest.Key(t)
	refuser, err := peer.IDFromPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	other, err := peer.IDFromPrivateKey(resultstest.Key(t))
	if err != nil {
		t.Fatal(err)
	}
	links := []string{"http://a.example/", "http://b.example/", "http://c.example/", "http://d.example/"}
	ix.keepPending([]crawl.Request{{Link: links[0]}, {Link: links[1]}, {Link: links[2]}, {Link: links[3]}})
	refused := func(node peer.ID, ls ...string) requests.SubmitResult {
		var res requests.SubmitResult
		for _, l := range ls {
			res.Failed = append(res.Failed, requests.SubmitFailure{Link: l, Err: requests.ErrNotTaken, Node: node})
		}
		return res
	}
	ix.noteRefusals(refused(refuser, links...))
	ix.noteRefusals(requests.SubmitResult{Failed: []requests.SubmitFailure{{Link: links[2], Err: requests.ErrNotTaken}}}) // no owner known: nothing
	// Not taken now: sent again within notTakenRetry, not a patience on;
	// a request whose node could not be reached waits the patience.
	ix.keepPending([]crawl.Request{{Link: "http://e.example/"}})
	ix.noteRefusals(requests.SubmitResult{Failed: []requests.SubmitFailure{{Link: "http://e.example/", Err: errors.New("dial failed"), Node: refuser}}})
	if _, pc := storedPending(t, ix, links[0]); pc.GetNextMs() != testNow.Add(notTakenRetry).UnixMilli() {
		t.Errorf("a request not taken is due %v, want %v", time.UnixMilli(pc.GetNextMs()).UTC(), testNow.Add(notTakenRetry))
	}
	if _, pc := storedPending(t, ix, "http://e.example/"); pc.GetNextMs() != testNow.Add(ix.cfg.patience).UnixMilli() || peer.ID(pc.GetRefusedBy()) != refuser {
		t.Errorf("a request its node could not be sent: due %v, refused by %s; want a patience on, by the node", time.UnixMilli(pc.GetNextMs()).UTC(), peer.ID(pc.GetRefusedBy()))
	}
	owe := func(links ...string) {
		var due []*pb.PendingCrawl
		var ids [][16]byte
		for _, l := range links {
			id, pc := storedPending(t, ix, l)
			due, ids = append(due, pc), append(ids, id)
		}
		ix.oweWithheld(due, ids)
	}
	owe(links...)
	if n := ix.Owed(); n != 0 {
		t.Fatalf("%d notices owed at the first refusal, want none before the patience", n)
	}
	// Within the patience the refusals go on: still since the first.
	now = now.Add(ix.cfg.patience * 3 / 4)
	ix.noteRefusals(refused(refuser, links...))
	// b's node took it; c went to another node, which refused it.
	ix.noteHolders(sentWithReceipts(t, resultstest.Key(t), now, links[1]))
	ix.noteRefusals(refused(other, links[2]))
	// d's node delivered another page of d's host: busy with it.
	ix.hosts.note(refuser, []crawl.Record{{URL: "http://d.example/other"}}, now)
	now = now.Add(ix.cfg.patience / 4)
	owe(links[0], links[2], links[3])
	owe(links[0], links[2], links[3]) // once per request
	if n := ix.Owed(); n != 1 {
		t.Fatalf("%d notices owed after the patience, want 1 (a's)", n)
	}
	if _, pc := storedPending(t, ix, links[1]); len(pc.GetRefusedBy()) != 0 {
		t.Errorf("b, taken, still refused by %s", peer.ID(pc.GetRefusedBy()))
	}
	id, _ := storedPending(t, ix, links[0])
	var wo pb.WithheldOwed
	if err := ix.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(withheldKey(id))
		if err != nil {
			return err
		}
		return it.Value(func(v []byte) error { return proto.Unmarshal(v, &wo) })
	}); err != nil {
		t.Fatal(err)
	}
	if !wo.GetRefused() || peer.ID(wo.GetHolder()) != refuser || len(wo.GetReceipt()) != 0 || wo.GetAskedMs() != testNow.UnixMilli() || wo.GetUrl() != links[0] {
		t.Errorf("the notice owed: %+v, want a refused notice about %s since the first refusal", &wo, refuser)
	}
	// The node then takes it from the coordinator: held to its receipt.
	sig, err := overlay.SignReceipt(key, links[0], now)
	if err != nil {
		t.Fatal(err)
	}
	ix.tookFromCoordinator(id, refuser, links[0], requests.Receipt{At: now, Sig: sig})
	if _, pc := storedPending(t, ix, links[0]); peer.ID(pc.GetHolder()) != refuser || pc.GetReceiptMs() != now.UnixMilli() || len(pc.GetRefusedBy()) != 0 {
		t.Errorf("after the node took it from the coordinator: %+v", pc)
	}
	// d's node still delivers records of d's host, but refusing d through
	// two patiences is more than being busy: a refused notice is owed.
	now = testNow.Add(2 * ix.cfg.patience)
	ix.noteRefusals(refused(refuser, links[3]))
	ix.hosts.note(refuser, []crawl.Record{{URL: "http://d.example/third"}}, now.Add(-time.Second))
	before := ix.Owed()
	owe(links[3])
	if n := ix.Owed(); n != before+1 {
		t.Errorf("%d notices owed after d was refused two patiences by a node delivering its host, want %d", n, before+1)
	}
}

// TestScheduleNext: after a resubmission, a delivered request uses an
// attempt and waits the patience doubled per attempt, at most a day; one
// not taken waits notTakenRetry (or the patience, when shorter), one not
// delivered the patience, neither using an attempt.
func TestScheduleNext(t *testing.T) {
	db, x := memIndex(t)
	for _, c := range []struct {
		patience        time.Duration
		attempts        uint32
		failed, notTook bool
		wait            time.Duration
		attemptsAfter   uint32
	}{
		{30 * time.Minute, 1, false, false, time.Hour, 2},
		{30 * time.Minute, 12, false, false, 24 * time.Hour, 13},
		{30 * time.Minute, 1, true, true, notTakenRetry, 1},
		{time.Minute, 1, true, true, time.Minute, 1},
		{30 * time.Minute, 1, true, false, 30 * time.Minute, 1},
	} {
		ix, err := newIndexer(x, db, sid(t), Logger(quiet()), CrawlPatience(c.patience, 16))
		if err != nil {
			t.Fatal(err)
		}
		pc := &pb.PendingCrawl{Attempts: c.attempts}
		ix.scheduleNext(pc, testNow, c.failed, c.notTook)
		if got := time.UnixMilli(pc.GetNextMs()).Sub(testNow); got != c.wait || pc.GetAttempts() != c.attemptsAfter {
			t.Errorf("%+v: due after %v with %d attempts, want %v and %d", c, got, pc.GetAttempts(), c.wait, c.attemptsAfter)
		}
	}
}
