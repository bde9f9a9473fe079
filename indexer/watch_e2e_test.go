package indexer

import (
	"net/netip"
	"testing"
	"time"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/internal/p2ptest"
	"github.com/micra-net/micra/overlay/overlaytest"
	"github.com/micra-net/micra/requests"
)

// TestWatchedLinkTakesSubnetBack: a node hands a link on to the
// node owning its subnet, which takes it (with a receipt) and never crawls
// it; no indexer asked for the page. The finder reports the link to the
// indexer with the receipt (a watch). When no record comes within the
// indexer's patience after the receipt, the indexer tells the subnet's
// coordinator, which takes the subnet back after its grace; the link goes
// to the next node and is indexed. Another link handed on to the
// withholder, not watched, is never indexed: watches are what catch it.
func TestWatchedLinkTakesSubnetBack(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		const (
			patience = time.Minute
			grace    = 20 * time.Second
		)
		nodes, ixn := withholdRig(t, grace)
		ctx := t.Context()
		tree := overlaytest.Tree(t)
		finder, withholder := nodes[0], nodes[1]

		// A subnet the withholder holds, whose shard another node
		// coordinates.
		var site netip.Addr
		for k := range 16 {
			a := netip.AddrFrom4([4]byte{127, byte(k % 4), byte(200 + k/4), 7})
			if ixn.o.Coordinator(ctx, tree.SmallestNonUnary(a)) != withholder.h.ID() {
				site = a
				break
			}
		}
		if d, err := withholder.o.Delegate(ctx, "http://"+site.String()+"/", site); err != nil || d.Node != withholder.h.ID() {
			t.Fatalf("delegating %v: %+v, %v", site, d, err)
		}
		serveCrawlers(t, nodes, withholder, false)
		ix := startIndexer(t, ixn, CrawlPatience(patience, 6))

		// The finder hands two links on; it watches the first.
		watched, unwatched := "http://"+site.String()+"/watched", "http://"+site.String()+"/other"
		reqs := []crawl.Request{{Link: watched, Depth: 1}, {Link: unwatched, Depth: 1}}
		rs, err := requests.SendCrawlReceipts(ctx, finder.h, withholder.h.ID(), reqs)
		if err != nil {
			t.Fatal(err)
		}
		handed := time.Now()
		if err := requests.SendWatches(ctx, finder.h, ixn.h.ID(), []requests.Watch{{Request: reqs[0], Holder: withholder.h.ID(), Receipt: rs[0]}}); err != nil {
			t.Fatal(err)
		}
		var moved time.Duration
		for time.Since(handed) < 5*patience && moved == 0 {
			time.Sleep(time.Second)
			ixn.o.Invalidate(tree.Range(tree.SmallestNonUnary(site)))
			if d, ok, err := ixn.o.Resolve(ctx, site); err == nil && ok && !d.Orphaned && d.Node != withholder.h.ID() {
				moved = time.Since(handed)
			}
		}
		if moved == 0 {
			t.Fatalf("the withheld subnet did not move in %v", 5*patience)
		}
		if limit := patience + 2*grace + patience/4; moved > limit {
			t.Errorf("the subnet moved %v after the link was handed on, want within %v (patience, two graces, the indexer's rounds)", moved, limit)
		}
		p2ptest.WaitFor(t, 5*patience, func() error {
			_, err := ix.Index().Get(ctx, watched)
			return err
		})
		indexed := time.Since(handed)
		doc, _ := ix.Index().Get(ctx, watched)
		if doc.Provenance.Node == withholder.h.ID().String() {
			t.Errorf("the watched link delivered by the withholder")
		}
		if _, err := ix.Index().Get(ctx, unwatched); err == nil {
			t.Error("the unwatched link was indexed: nothing submitted it")
		}
		st := ix.Stats()
		if st.Watched != 1 || st.WithheldTaken != 1 || st.Pending != 0 {
			t.Errorf("indexer: %+v", st)
		}
		t.Logf("patience %v, grace %v: the subnet moved %v after the watched link was handed on, the link indexed %v after; notices sent %d",
			patience, grace, moved.Round(time.Second), indexed.Round(time.Second), st.WithheldSent)
	})
}
