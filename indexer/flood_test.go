package indexer

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/internal/p2ptest"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/overlay/overlaytest"
	"github.com/micra-net/micra/requests"
	"github.com/micra-net/micra/results/resultstest"
)

// TestFloodedNodeKeepsItsSubnet: a peer keeps an honest node's
// room for one host full — it sends real pages of the host faster than
// the host's delay lets the node crawl them — and sends the coordinator a
// refused notice for each page the node would not take, hoping that the
// coordinator's own requests fill the node's room for judges too, so that
// the node refuses a judge and loses the subnet as a refuser. The node
// keeps a room per host as crawl.Crawler.Promise does (a request from a
// judge of its subnet, alone in its frame, half as much again). The
// coordinator asks the node for one page of a host per grace
// (overlay/withheldserve.go): asserted, the node keeps its subnet through the
// flood, nothing is taken back, and once the flood ends every page the
// indexer submitted is indexed (during it they may not be: the flooder
// takes the host's pace, RELIABILITY.md §11).
func TestFloodedNodeKeepsItsSubnet(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		const (
			patience = time.Minute
			grace    = 20 * time.Second
			delay    = 2 * time.Second // the host's: one page every two seconds
			room     = 6               // requests of the host the node takes ahead
			flood    = 5 * time.Minute
			// Under the race detector, 2 minutes: still six of the
			// coordinator's judgments during the flood.
			floodRace = 2 * time.Minute
			// A judge has the room for judges once in half a grace (as
			// node's promise does).
			judgeRoomEvery = grace / 2
		)
		nodes, ixn := withholdRig(t, grace)
		ctx := t.Context()
		tree := overlaytest.Tree(t)
		a := netip.AddrFrom4([4]byte{127, 0, 200, 7})
		id := tree.SmallestNonUnary(a)
		var victim, flooder *tnode
		for _, n := range nodes {
			switch {
			case ixn.o.Coordinator(ctx, id) == n.h.ID():
			case victim == nil:
				victim = n
			case flooder == nil:
				flooder = n
			}
		}
		if d, err := victim.o.Delegate(ctx, "http://"+a.String()+"/", a); err != nil || d.Node != victim.h.ID() {
			t.Fatalf("delegating %v: %+v, %v", a, d, err)
		}

		// The victim: a queue for the host, crawled one page a delay.
		ob := startOutbox(t, victim, victim.db)
		var mu sync.Mutex
		var queue []string
		extra := map[peer.ID]time.Time{} // when each judge last had the room for judges
		judged, refusedJudges := 0, 0
		promise := func(ctx context.Context, from peer.ID, reqs []crawl.Request) ([]bool, error) {
			judge := len(reqs) == 1 && victim.o.Judges(ctx, a, from)
			mu.Lock()
			defer mu.Unlock()
			limit := room
			if judge && time.Since(extra[from]) >= judgeRoomEvery {
				limit += room / 2
			}
			asked := judge && from != flooder.h.ID()
			if asked {
				judged++
			}
			taken := make([]bool, len(reqs))
			for i, r := range reqs {
				switch {
				case len(queue) < limit:
					queue = append(queue, r.Link)
					taken[i] = true
					if len(queue) > room {
						extra[from] = time.Now()
					}
				case asked:
					refusedJudges++
				}
			}
			return taken, nil
		}
		remove, err := requests.ServeCrawlRequests(victim.h, func(context.Context, peer.ID, []crawl.Request) error { return nil },
			requests.Promises(promise), requests.Logger(quiet()), requests.Egress(egress.Policy{AllowPrivate: true}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(remove)
		crawlCtx, stopCrawl := context.WithCancel(ctx)
		defer stopCrawl()
		var crawling sync.WaitGroup
		crawling.Go(func() {
			for i := 0; i < 1000 && crawlCtx.Err() == nil; i++ {
				time.Sleep(delay)
				mu.Lock()
				if len(queue) == 0 {
					mu.Unlock()
					continue
				}
				u := queue[0]
				queue = queue[1:]
				mu.Unlock()
				if err := ob.Results(crawlCtx, resultstest.Batch(t, []crawl.Record{pageRecord(u)})); err != nil && crawlCtx.Err() == nil {
					t.Errorf("publishing %s: %v", u, err)
				}
			}
		})
		defer crawling.Wait()

		// The indexer's pages of the host, submitted as the flood starts.
		// It announces itself every 5 s, not startIndexer's 300 ms: over
		// minutes of virtual time the announcements' signatures were a
		// sixth of the test's CPU.
		ix := startIndexer(t, ixn, CrawlPatience(patience, 6), AnnounceEvery(5*time.Second))
		var reqs []crawl.Request
		for k := range 4 {
			reqs = append(reqs, crawl.Request{Link: fmt.Sprintf("http://%s/page%d", a, k)})
		}

		// The flood: a page a second, and a refused notice for each page
		// refused, sent again when its verdict says, for the flood's
		// length.
		length := flood
		if raceEnabled {
			length = floodRace
		}
		start := time.Now()
		sent, notices, verdicts := 0, 0, map[overlay.WithheldResult]int{}
		due := map[string]time.Time{} // refused pages' notices to send again
		notice := func(u string) {
			v, err := flooder.o.Withheld(ctx, overlay.WithheldNotice{Addr: a, URL: u, Holder: victim.h.ID(), AskedAt: time.Now(), Refused: true})
			switch {
			case errors.Is(err, overlay.ErrOverloaded): // beyond the coordinator's rate: later
				due[u] = time.Now().Add(time.Second)
				return
			case err != nil:
				t.Fatalf("the flooder's notice: %v", err)
			}
			notices++
			verdicts[v.Result]++
			delete(due, u)
			if v.Result == overlay.WithheldNoted {
				due[u] = time.Now().Add(v.Retry)
			}
		}
		submitted := false
		for i := 0; time.Since(start) < length && i < 1000; i++ {
			u := fmt.Sprintf("http://%s/flood%d", a, i)
			rs, err := requests.SendCrawlReceipts(ctx, flooder.h, victim.h.ID(), []crawl.Request{{Link: u}})
			if err != nil {
				t.Fatalf("flooding: %v", err)
			}
			sent++
			if rs[0].Sig == nil {
				notice(u)
			}
			for u, at := range due {
				if !time.Now().Before(at) {
					notice(u)
				}
			}
			if !submitted && i == 20 {
				if _, err := ix.Submit(ctx, reqs); err != nil {
					t.Fatal(err)
				}
				submitted = true
			}
			time.Sleep(time.Second)
		}

		// The victim kept its subnet.
		var takenBack int64
		for _, n := range append(nodes, ixn) {
			takenBack += n.o.Stats().TakenBack["refused"] + n.o.Stats().TakenBack["withheld"]
		}
		ixn.o.Invalidate(tree.Range(id))
		if d, ok, err := ixn.o.Resolve(ctx, a); err != nil || !ok || d.Node != victim.h.ID() || takenBack != 0 {
			t.Fatalf("after the flood: the subnet %v, %v, %v; %d taken back; want kept by the flooded node", d.Node, ok, err, takenBack)
		}
		mu.Lock()
		asks, refusals := judged, refusedJudges
		mu.Unlock()
		if refusals != 0 {
			t.Errorf("the flooded node refused %d of %d judges' requests", refusals, asks)
		}
		if verdicts[overlay.WithheldTakenBack] != 0 || verdicts[overlay.WithheldTaken] == 0 {
			t.Errorf("the flooder's notices: %v", verdicts)
		}

		during := 0
		for _, r := range reqs {
			if _, err := ix.Index().Get(ctx, r.Link); err == nil {
				during++
			}
		}
		// Every page the indexer submitted is indexed once the flood ends.
		p2ptest.WaitFor(t, 5*patience, func() error {
			for _, r := range reqs {
				if _, err := ix.Index().Get(ctx, r.Link); err != nil {
					return fmt.Errorf("%s not indexed: %w", r.Link, err)
				}
			}
			return nil
		})
		t.Logf("flood of %v (patience %v, grace %v; a page every %v, room %d): %d pages sent, %d refused notices answered (%v); "+
			"judges' lone requests %d, refused 0; the subnet kept; the indexer's %d pages: %d indexed during the flood, all by %v after it ended",
			length, patience, grace, delay, room, sent, notices, verdicts, asks, len(reqs), during, time.Since(start)-length)
	})
}
