package indexer

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/indexer/index"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/requests"
	"github.com/micra-net/micra/results"
	"github.com/micra-net/micra/results/pb"
	"github.com/micra-net/micra/results/resultstest"
)

// TestWatchesKept: a link a node reports handed on, with its
// owner's receipt, is kept as a pending request sent to the owner when
// the receipt says, due a patience after it, and owes a withholding
// notice with the receipt when overdue; a link already pending is left as
// it is; one whose receipt signs another form of the link, one whose
// owner is the reporter and one of a shard the indexer does not take are
// not kept; beyond the reporter's hourly budget none is.
func TestWatchesKept(t *testing.T) {
	db, x := memIndex(t)
	ix, err := newIndexer(x, db, sid(t), Logger(quiet()), Shards(2), Take(0))
	if err != nil {
		t.Fatal(err)
	}
	key := resultstest.Key(t)
	holder, _ := peer.IDFromPrivateKey(key)
	reporter := peer.ID("reporter")
	took := ix.cfg.now().Add(-time.Minute).Truncate(time.Millisecond)
	watch := func(link string) requests.Watch {
		sig, err := overlay.SignReceipt(key, link, took)
		if err != nil {
			t.Fatal(err)
		}
		return requests.Watch{Request: crawl.Request{Link: link, Depth: 1}, Holder: holder, Receipt: requests.Receipt{At: took, Sig: sig}}
	}
	// Hosts in the taken shard 0 and in shard 1.
	var in, out []string
	for i := 0; len(in) < 4 || len(out) < 1; i++ {
		h := "h" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + ".example"
		if results.ShardOf(h, 2) == 0 {
			in = append(in, "http://"+h+"/")
		} else {
			out = append(out, "http://"+h+"/")
		}
	}
	pending := watch(in[1])
	ix.keepPending([]crawl.Request{{Link: in[1]}})
	_, before := storedPending(t, ix, in[1])
	self := watch(in[2])
	self.Holder = reporter
	odd := watch(in[0])
	odd.Request.Link = in[0] + "#x" // the receipt signs another form
	// A page the index holds: its record came, nothing is kept.
	if _, err := x.Put(t.Context(), index.Source{Node: holder.String(), Seq: 1}, []crawl.Record{{URL: in[3], FinalURL: in[3],
		Time: testNow, Status: 200, Type: crawl.TypeHTML, Change: crawl.ChangeNew, Title: "indexed"}}); err != nil {
		t.Fatal(err)
	}
	if err := ix.takeWatches(t.Context(), reporter, []requests.Watch{watch(in[0]), pending, self, odd, watch(out[0]), watch(in[3])}); err != nil {
		t.Fatal(err)
	}
	if st := ix.Stats(); st.Watched != 1 || st.WatchesRefused != 3 {
		t.Fatalf("watched %d, refused %d; want 1 and 3", st.Watched, st.WatchesRefused)
	}
	id, pc := storedPending(t, ix, in[0])
	if peer.ID(pc.GetHolder()) != holder || pc.GetReceiptMs() != took.UnixMilli() || pc.GetSentMs() != took.UnixMilli() ||
		pc.GetNextMs() != took.Add(ix.cfg.patience).UnixMilli() || pc.GetAttempts() != 1 {
		t.Errorf("kept watch: %+v", pc)
	}
	if ix.isPending(in[3]) {
		t.Error("a watch of a page the index holds kept")
	}
	if _, after := storedPending(t, ix, in[1]); len(after.GetHolder()) != 0 || after.GetNextMs() != before.GetNextMs() {
		t.Errorf("a pending link's request changed by its watch: %+v", after)
	}
	ix.oweWithheld([]*pb.PendingCrawl{pc}, [][16]byte{id})
	if ix.Owed() != 1 {
		t.Errorf("%d notices owed about the watched link, want 1", ix.Owed())
	}
	// The budget.
	many := make([]requests.Watch, 0, watchesPerHour)
	for range watchesPerHour {
		many = append(many, watch(in[0]))
	}
	if err := ix.takeWatches(t.Context(), reporter, many); err == nil {
		t.Error("watches beyond the reporter's budget taken")
	}
	if err := ix.takeWatches(t.Context(), peer.ID("another"), many[:1]); err != nil {
		t.Errorf("another reporter's watch: %v", err)
	}
}
