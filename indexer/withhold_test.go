package indexer

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
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

// crawlersOnly is the requester delegator that never picks the indexer:
// a subnet goes to the node that asked, or, when it is excluded or is the
// indexer (a coordinator deciding an orphan asks for itself), to the
// smallest peer id that is neither.
type crawlersOnly struct{ ix peer.ID }

func (d crawlersOnly) Delegate(ctx context.Context, req overlay.DelegateRequest, env overlay.DelegationEnv) (peer.ID, error) {
	if req.From != d.ix && !slices.Contains(req.Exclude, req.From) {
		return req.From, nil
	}
	for _, p := range env.Peers() {
		if p.ID != d.ix && !slices.Contains(req.Exclude, p.ID) {
			return p.ID, nil
		}
	}
	return "", overlay.ErrNoCandidate
}

// fakeWeb answers every refetch: each page is there.
var fakeWeb = overlay.RefetcherFunc(func(ctx context.Context, url string) (overlay.Page, error) {
	return overlay.Page{URL: url, FinalURL: url, Status: 200, Fingerprint: fingerprint(url), At: time.Now()}, nil
})

// pageRecord is the record of a new page u of the fake web, fetched now.
func pageRecord(u string) crawl.Record {
	return crawl.Record{URL: u, FinalURL: u, Time: time.Now(), Status: 200, Type: crawl.TypeHTML, Change: crawl.ChangeNew,
		Title: "page " + u, Size: 1000, Fingerprint: fingerprint(u), Keywords: []crawl.Keyword{{Term: "page", Weight: 65535}}}
}

// fingerprint is a page's fingerprint on the fake web: one of its own.
func fingerprint(url string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(url))
	return h.Sum64() | 1
}

// TestWithholdingNodeLosesItsSubnet: four crawlers and an
// indexer; one crawler accepts the crawl requests of its subnets and never
// crawls them. Once a request has gone unanswered past the indexer's
// patience, the indexer tells the subnet's coordinator, which takes the
// subnet back after its grace (an auditor fetched the page) and gives it
// to another node; the indexer submits the request there, and every seed
// is indexed. Asserted: each withheld subnet moves within one patience
// period after its request went unanswered; every seed is indexed; the
// honest nodes keep theirs; the coordinators count the subnets as taken
// back, "withheld".
func TestWithholdingNodeLosesItsSubnet(t *testing.T) { withholding(t, false) }

// TestRefusingNodeLosesItsSubnet: as
// TestWithholdingNodeLosesItsSubnet, but the bad crawler takes none of the
// requests of its subnets (it answers that it would not crawl them now),
// so no receipt names it. Once it has refused a request through the
// indexer's patience, the indexer sends a refused notice; the coordinator
// sends it the request itself, and when it refuses again after the grace
// the subnet is taken back ("refused").
func TestRefusingNodeLosesItsSubnet(t *testing.T) { withholding(t, true) }

// withholding runs the two tests above: the bad crawler takes the
// requests and crawls none, or (refuse) takes none.
func withholding(t *testing.T, refuse bool) {
	p2ptest.Bubble(t, func(t *testing.T) {
		const (
			patience = time.Minute
			grace    = 20 * time.Second
		)
		nodes, ixn := withholdRig(t, grace)
		ctx := t.Context()
		tree := overlaytest.Tree(t)

		// Seeds: one site in each of twelve subnets. The withholder takes
		// the subnets of the first four whose shard another node
		// coordinates, and of the first two whose shard it coordinates
		// itself, if any (judged by its deputy, given up by its own
		// coordinator code; RELIABILITY.md §11).
		withholder := nodes[1]
		var seeds []netip.Addr
		for s := range 3 {
			for k := range 4 {
				seeds = append(seeds, netip.AddrFrom4([4]byte{127, byte(s), byte(200 + k), 7}))
			}
		}
		holderOf := map[netip.Addr]*tnode{}
		withheld, selfHeld := 0, 0
		for i, a := range seeds {
			id := tree.SmallestNonUnary(a)
			nd := nodes[[]int{0, 2, 3}[i%3]]
			if self := ixn.o.Coordinator(ctx, id) == withholder.h.ID(); (self && selfHeld < 2) || (!self && withheld-selfHeld < 4) {
				nd = withholder
				withheld++
				if self {
					selfHeld++
				}
			}
			if d, err := nd.o.Delegate(ctx, "http://"+a.String()+"/", a); err != nil || d.Node != nd.h.ID() {
				t.Fatalf("delegating %v: %+v, %v", a, d, err)
			}
			holderOf[a] = nd
		}
		if withheld < 2 {
			t.Fatalf("the withholder holds %d subnets", withheld)
		}

		cr := serveCrawlers(t, nodes, withholder, refuse)
		ix := startIndexer(t, ixn, CrawlPatience(patience, 6))
		var reqs []crawl.Request
		for _, a := range seeds {
			reqs = append(reqs, crawl.Request{Link: "http://" + a.String() + "/", Depth: 1})
		}
		start := time.Now()
		res, err := ix.Submit(ctx, reqs)
		switch {
		case err != nil:
			t.Fatal(err)
		case !refuse && (len(res.Failed) > 0 || res.Sent[withholder.h.ID()] != withheld):
			t.Fatalf("submit: %+v", res)
		case refuse && (len(res.Failed) != withheld || res.Sent[withholder.h.ID()] != 0):
			t.Fatalf("submit: %+v; want the refuser's %d failed", res, withheld)
		}
		for _, f := range res.Failed {
			if !errors.Is(f.Err, requests.ErrNotTaken) || f.Node != withholder.h.ID() {
				t.Errorf("a request failed: %+v; want not taken by the refuser", f)
			}
		}
		// Withheld: unanswered past the patience, noticed then. Refused:
		// refused at once, and again at the resubmission a patience later,
		// noticed then.
		unanswered := start.Add(patience)
		reason := "withheld"
		if refuse {
			reason = "refused"
		}

		// Every withheld subnet moves; each move's time is taken.
		moved := map[netip.Addr]time.Duration{}
		for time.Since(start) < 5*patience && len(moved) < withheld {
			time.Sleep(time.Second)
			for a, nd := range holderOf {
				if _, ok := moved[a]; ok || nd != withholder {
					continue
				}
				ixn.o.Invalidate(tree.Range(tree.SmallestNonUnary(a)))
				if d, ok, err := ixn.o.Resolve(ctx, a); err == nil && ok && !d.Orphaned && d.Node != withholder.h.ID() {
					moved[a] = time.Since(unanswered)
				}
			}
		}
		if len(moved) < withheld {
			t.Fatalf("%d of the %d withheld subnets moved in %v", len(moved), withheld, 5*patience)
		}
		var worst time.Duration
		for _, d := range moved {
			worst = max(worst, d)
		}
		if worst > patience {
			t.Errorf("a withheld subnet moved %v after its request went unanswered, want within the patience (%v)", worst, patience)
		}

		// Every seed is indexed in the end.
		p2ptest.WaitFor(t, 5*patience, func() error {
			for _, a := range seeds {
				if _, err := ix.Index().Get(ctx, "http://"+a.String()+"/"); err != nil {
					return fmt.Errorf("seed %v not indexed: %w", a, err)
				}
			}
			return nil
		})
		for _, a := range seeds {
			doc, _ := ix.Index().Get(ctx, "http://"+a.String()+"/")
			if doc.Provenance.Node == withholder.h.ID().String() || (holderOf[a] != withholder && doc.Provenance.Node != holderOf[a].h.ID().String()) {
				t.Errorf("seed %v delivered by %s", a, doc.Provenance.Node)
			}
		}
		all := time.Since(start)
		var takenBack int64
		for _, n := range append(nodes, ixn) {
			takenBack += n.o.Stats().TakenBack[reason]
		}
		if takenBack != int64(withheld) {
			t.Errorf("%d subnets taken back, %s, want %d", takenBack, reason, withheld)
		}
		for a, nd := range holderOf {
			if nd == withholder {
				continue
			}
			if d, ok, err := ixn.o.Resolve(ctx, a); err != nil || !ok || d.Node != nd.h.ID() {
				t.Errorf("an honest node's subnet %v: %+v, %v, %v", a, d, ok, err)
			}
		}
		st := ix.Stats()
		// Two notices a subnet: noted, then judged.
		if st.Pending != 0 || st.WithheldTaken != uint64(withheld) || st.WithheldSent != uint64(2*withheld) || st.WithheldOwed != 0 {
			t.Errorf("indexer: %+v", st)
		}
		cr.mu.Lock()
		defer cr.mu.Unlock()
		taken := cr.taken
		byWithholder := taken[withholder.h.ID()]
		delete(taken, withholder.h.ID())
		var others []int
		for _, n := range taken {
			others = append(others, n)
		}
		slices.Sort(others)
		t.Logf("%s: patience %v, grace %v: %d of %d subnets (%d of a shard the bad crawler coordinates); moved %v to %v after their requests went unanswered a patience (worst %v); "+
			"every seed indexed %v after submission; notices sent %d, subnets taken back %d, requests resent %d; requests taken: bad crawler %d, others %v",
			reason, patience, grace, withheld, len(seeds), selfHeld, minDur(moved), worst, worst, all.Round(time.Second), st.WithheldSent, takenBack, st.Resent,
			byWithholder, others)
	})
}

// withholdRig starts four crawler overlays and an indexer's (the last)
// on a simulated network, joined, with a delegator that never picks the
// indexer, a web where every page is there, and the withholding grace.
func withholdRig(t *testing.T, grace time.Duration) ([]*tnode, *tnode) {
	t.Helper()
	net := p2ptest.NewNet(t)
	ixKey := resultstest.Key(t)
	ixID, err := peer.IDFromPrivateKey(ixKey)
	if err != nil {
		t.Fatal(err)
	}
	opts := []overlay.Option{overlay.WithDelegator(crawlersOnly{ixID}), overlay.WithRefetcher(fakeWeb),
		overlay.Withholding(overlay.WithholdConfig{Grace: grace})}
	all := make([]*tnode, 5)
	for i := range all {
		// A coordinator sends a node that refused an indexer's request
		// the request itself, on the crawl protocol, as node does.
		o := append(slices.Clip(opts), overlay.AskCrawl(func(ctx context.Context, p peer.ID, link string) ([]byte, time.Time) {
			rs, err := requests.SendCrawlReceipts(ctx, all[i].h, p, []crawl.Request{{Link: link}})
			if err != nil || rs[0].Sig == nil {
				return nil, time.Time{}
			}
			return rs[0].Sig, rs[0].At
		}))
		if i == 4 {
			all[i] = newTNode(t, net, i, ixKey, nil, append(o, overlay.NoCrawl())...)
		} else {
			all[i] = newTNode(t, net, i, nil, nil, o...)
		}
	}
	nodes, ixn := all[:4], all[4]
	join(t, nodes[0], append(nodes[1:], ixn)...)
	return nodes, ixn
}

// crawlers counts the crawl requests each node took (serveCrawlers).
type crawlers struct {
	mu    sync.Mutex
	taken map[peer.ID]int
}

// serveCrawlers makes each of nodes a crawler: honest ones publish a
// record of each requested page through an outbox; withholder takes the
// requests and does nothing, or, refuse, takes none of those whose
// senders ask for receipts.
func serveCrawlers(t *testing.T, nodes []*tnode, withholder *tnode, refuse bool) *crawlers {
	t.Helper()
	c := &crawlers{taken: map[peer.ID]int{}}
	for _, n := range nodes {
		ob := startOutbox(t, n, n.db)
		id := n.h.ID()
		take := func(ctx context.Context, _ peer.ID, reqs []crawl.Request) error {
			c.mu.Lock()
			c.taken[id] += len(reqs)
			c.mu.Unlock()
			if id == withholder.h.ID() {
				return nil
			}
			var recs []crawl.Record
			for _, r := range reqs {
				recs = append(recs, pageRecord(r.Link))
			}
			return ob.Results(ctx, resultstest.Batch(t, recs))
		}
		promise := func(ctx context.Context, from peer.ID, reqs []crawl.Request) ([]bool, error) {
			taken := make([]bool, len(reqs))
			if refuse && id == withholder.h.ID() {
				return taken, nil
			}
			for i := range taken {
				taken[i] = true
			}
			return taken, take(ctx, from, reqs)
		}
		remove, err := requests.ServeCrawlRequests(n.h, take, requests.Promises(promise),
			requests.Logger(quiet()), requests.Egress(egress.Policy{AllowPrivate: true}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(remove)
	}
	return c
}

func minDur(m map[netip.Addr]time.Duration) time.Duration {
	first := true
	var out time.Duration
	for _, d := range m {
		if first || d < out {
			out, first = d, false
		}
	}
	return out
}
