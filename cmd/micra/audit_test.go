package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/indexer"
	"github.com/micra-net/micra/indexer/index"
	"github.com/micra-net/micra/internal/poll"
	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/internal/world/worldtest"
	"github.com/micra-net/micra/node"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/results"
)

// fabricator makes a node publish records it did not crawl: every parsed
// page gets other keywords, another title and a fingerprint that matches
// nothing (what a volunteer faking work, or a hijacked one seeding spam,
// would send). Everything else about the records is genuine.
// It fabricates once on is set: a volunteer that turns bad.
type fabricator struct {
	crawl.Sink
	on *atomic.Bool
}

const fabricatedTerm = "fabricatedzz"

func (f fabricator) Results(ctx context.Context, b crawl.Batch) error {
	if !f.on.Load() {
		return f.Sink.Results(ctx, b)
	}
	recs, err := crawl.DecodeBatch(b.Data)
	if err != nil {
		return err
	}
	for i := range recs {
		if r := &recs[i]; r.Fingerprint != 0 {
			r.Fingerprint = ^r.Fingerprint
			r.Title = "Cheap pills, casino bonus"
			r.Keywords = []crawl.Keyword{{Term: fabricatedTerm, Weight: 65535}, {Term: "casino", Weight: 40000}}
		}
	}
	nb, err := crawl.EncodeBatch(recs)
	if err != nil {
		return err
	}
	return f.Sink.Results(ctx, nb)
}

// TestAuditsConvictFabricator (RELIABILITY.md scenario 7): five volunteers crawl
// an emulated Internet and one of them, the one delegated the most sites,
// fabricates every record once the sites are delegated. The
// indexer has records audited by the nodes nearest to their subnets after
// their crawler; the fabricator's coordinators convict it and re-delegate
// every subnet with sites it held, the indexer flags it and search leaves
// its records out; no honest node is convicted or flagged.
func TestAuditsConvictFabricator(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("a five-node crawl of an emulated Internet; skipped under -short and -race")
	}
	const nodes = 5
	run := worldtest.Start(t, worldtest.Params(23, 60, nodes), world.TimeScale(0.05))
	w := run.World()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	tree, err := w.Tree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	if os.Getenv("MICRA_DEBUG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	dir := t.TempDir()
	ns := make([]*node.Node, nodes)
	bad := make([]atomic.Bool, nodes)
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, n := range ns {
			if n != nil {
				wg.Go(func() { n.Close() })
			}
		}
		wg.Wait()
	})
	start := func(i int, boot []string) {
		wn := w.Nodes()[i]
		res, err := run.Resolver(wn.Addr)
		if err != nil {
			t.Fatal(err)
		}
		cfg := node.DefaultConfig()
		cfg.DataDir = filepath.Join(dir, fmt.Sprintf("node-%d", i))
		cfg.Listen = []string{"/ip4/" + wn.Addr.String() + "/tcp/0"}
		cfg.Bootstrap = boot
		cfg.SourceAddr = wn.Addr.String()
		cfg.AllowPrivateNetworks = true
		cfg.AllowPorts = []uint16{uint16(run.Port())}
		cfg.Dashboard = "127.0.0.1:0"
		cfg.MemoryLimit, cfg.Bandwidth = "0", "0"
		opts := []node.Option{node.Tree(tree), node.Resolver(res), node.ProbeScale(run.TimeScale()),
			node.Logger(logger.With("node", i)),
			node.HostOptions(overlay.Reachability(network.ReachabilityPublic), overlay.NoRelayService()),
			node.OverlayOptions(overlay.Announce(time.Second)),
			node.CrawlOptions(crawl.Politeness(0, 0), crawl.Batching(8<<10, 500*time.Millisecond)),
			node.ResultOptions(results.Republish(300*time.Millisecond, 2*time.Second))}
		// Once bad, a node also refuses, as a coordinator, to judge its
		// own records (a fabricator would not convict itself).
		opener := overlay.EvidenceOpenerFunc(func(ev []byte, u string) (overlay.Claim, error) {
			c, err := results.OpenEvidence(ev, u)
			if err == nil && bad[i].Load() && c.Node == ns[i].ID() {
				return overlay.Claim{}, fmt.Errorf("%w: not judging myself", overlay.ErrBadEvidence)
			}
			return c, err
		})
		opts = append(opts, node.WrapResults(func(s crawl.Sink) crawl.Sink { return fabricator{s, &bad[i]} }),
			node.OverlayOptions(overlay.WithEvidenceOpener(opener)))
		n, err := node.New(cfg, opts...)
		if err != nil {
			t.Fatal(err)
		}
		ns[i] = n
		if err := n.Join(ctx); err != nil {
			t.Fatal(err)
		}
	}
	start(0, nil)
	for i := 1; i < nodes; i++ {
		start(i, ns[0].Addrs())
	}
	dns, err := run.Resolver(netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	h0 := ns[0].Overlay().Host()
	ri, err := node.StartIndexer(ctx, node.IndexerConfig{
		DataDir: filepath.Join(dir, "indexer"), Listen: []string{"/ip4/127.0.0.1/tcp/0"}, AllowPrivateNetworks: true, // the emulated Internet is on loopback
		Bootstrap: []peer.AddrInfo{{ID: h0.ID(), Addrs: h0.Addrs()}}, HTTP: "127.0.0.1:0",
		Tree: tree, Logger: logger.With("subsystem", "indexer"), JoinNow: true,
		Host:    []overlay.HostOption{overlay.Reachability(network.ReachabilityPublic), overlay.NoRelayService()},
		Overlay: []overlay.Option{overlay.Announce(time.Second), overlay.NoCrawl()},
		// Every record audited (a volunteer network samples 2 %): the test
		// wants the verdict within a small crawl.
		Indexer: []indexer.Option{indexer.AnnounceEvery(time.Second), indexer.Logger(logger.With("subsystem", "indexer")),
			indexer.DNS(dns), indexer.Audits(1, 10000)},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ri.Close()

	// Every site's subnet is delegated before anything is crawled, and
	// the node delegated the most sites in shards that other nodes
	// coordinate turns bad before its first page: a coordinator counts
	// each URL once, so a page it audited while the node was honest
	// cannot convict it later (a re-crawl of it comes back
	// inconclusive), and a fabrication found only among pages the node
	// had not yet delivered would depend on how far the crawl got first.
	// (In a network of five, a node often coordinates the shard of most
	// of its own sites, where it would judge itself; among thousands, a
	// shard's coordinator is its crawler one time in thousands.)
	var seeds []crawl.Request
	var seeded []world.Site
	for _, s := range w.Sites() {
		if s.Hostile == world.NotHostile && !s.Flaky {
			seeds = append(seeds, crawl.Request{Link: run.URL(s), Depth: 1})
			seeded = append(seeded, s)
		}
	}
	var (
		dmu      sync.Mutex
		derrs    []error
		dwg      sync.WaitGroup
		dworkers = make(chan struct{}, 8)
	)
	for i, s := range seeded {
		dworkers <- struct{}{}
		dwg.Go(func() {
			defer func() { <-dworkers }()
			if _, err := ns[0].Overlay().Delegate(ctx, seeds[i].Link, s.Addrs[0]); err != nil {
				dmu.Lock()
				derrs = append(derrs, fmt.Errorf("%s: %w", s.Name, err))
				dmu.Unlock()
			}
		})
	}
	dwg.Wait()
	if len(derrs) > 0 {
		t.Fatalf("delegating the sites' subnets: %v", derrs)
	}
	sites := map[peer.ID]map[string]netip.Addr{}
	judged := map[peer.ID]int{} // sites in shards coordinated by another node
	for _, s := range seeded {
		id := tree.SmallestNonUnary(s.Addrs[0])
		if d, ok, err := ns[0].Overlay().Resolve(ctx, s.Addrs[0]); err == nil && ok {
			if sites[d.Node] == nil {
				sites[d.Node] = map[string]netip.Addr{}
			}
			sites[d.Node][s.Name] = s.Addrs[0]
			if ns[0].Overlay().Coordinator(ctx, id) != d.Node {
				judged[d.Node]++
			}
		}
	}
	fab := 0
	for i, n := range ns {
		if judged[n.ID()] > judged[ns[fab].ID()] {
			fab = i
		}
	}
	fabID, fabSites := ns[fab].ID(), sites[ns[fab].ID()]
	if judged[fabID] < 3 {
		t.Fatalf("the fabricator holds %d sites in shards others coordinate; the world gives too few to test", judged[fabID])
	}
	bad[fab].Store(true)
	t.Logf("node %d, delegated %d sites (%d in shards others coordinate), fabricates from now on", fab, len(fabSites), judged[fabID])
	if res, err := ns[0].Submit(ctx, seeds...); err != nil || len(res.Failed) > 0 {
		t.Fatalf("submitting %d seeds: %+v, %v", len(seeds), res, err)
	}
	audits := func() map[peer.ID]indexer.NodeAudits {
		m := map[peer.ID]indexer.NodeAudits{}
		for _, na := range ri.Indexer().Audited() {
			m[na.Node] = na
		}
		return m
	}
	// Every subnet of a site whose pages the fabricator delivered (the
	// indexer stores them: that is where the harm is, and what tells the
	// coordinators) is taken from it, unless the fabricator coordinates
	// the subnet's shard itself (a coordinator is trusted for its shard). A
	// site it held and delivered nothing of is evidence of nothing. Both
	// are counted, not asserted.
	var silent, ownShard int
	waitFor(t, 3*time.Minute, "the fabricator flagged and every subnet of a site it delivered taken from it", func() error {
		if a := audits()[fabID]; !a.Flagged {
			return fmt.Errorf("fabricator not flagged: %+v", a)
		}
		delivered, err := ri.Indexer().Index().HostsOf(ctx, fabID.String(), 1000)
		if err != nil {
			return err
		}
		silent, ownShard = 0, 0
		for name, a := range fabSites {
			if !slices.Contains(delivered, name) {
				silent++
				continue
			}
			if ns[0].Overlay().Coordinator(ctx, tree.SmallestNonUnary(a)) == fabID {
				ownShard++
				continue
			}
			ns[0].Overlay().Invalidate(tree.Range(tree.SmallestNonUnary(a)))
			d, ok, err := ns[0].Overlay().Resolve(ctx, a)
			if err != nil || !ok || d.Node == fabID {
				coord := ns[0].Overlay().Coordinator(ctx, tree.SmallestNonUnary(a))
				convictedThere := false
				for _, n := range ns {
					if n.ID() == coord {
						convictedThere = slices.Contains(n.Overlay().Convicted(), fabID)
					}
				}
				return fmt.Errorf("site %s: delegated to %s (held %v, %v; %+v); coordinator %s convicted it: %v",
					name, d.Node, ok, err, d, coord, convictedThere)
			}
		}
		return nil
	})
	all := audits()
	byHonest := 0
	for i, n := range ns {
		if i != fab && slices.Contains(n.Overlay().Convicted(), fabID) {
			byHonest++
		}
	}
	// Flagged on another coordinator's word (a node's or the indexer's:
	// it coordinates shards too), not its own.
	if a := all[fabID]; a.FlaggedBy == "" || a.FlaggedBy == fabID {
		t.Errorf("the fabricator was flagged by %q", a.FlaggedBy)
	}
	for i, n := range ns {
		a := all[n.ID()]
		t.Logf("node %d%s: %+v", i, map[bool]string{true: " (fabricator)"}[i == fab], a)
		if i != fab && a.Flagged {
			t.Errorf("honest node %d flagged", i)
		}
		for _, p := range n.Overlay().Convicted() {
			if p != fabID {
				t.Errorf("node %d convicted honest node %s", i, p)
			}
		}
	}
	if st := ri.Indexer().Stats(); st.Flagged != 1 || st.Audits == 0 {
		t.Errorf("indexer stats %+v", st)
	}
	// Its records are stored but out of search.
	res, err := ri.Indexer().Index().Search(ctx, index.Query{Text: fabricatedTerm})
	if err != nil || len(res.Hits) != 0 {
		t.Errorf("search for the fabricated keyword: %v, %+v", err, res)
	}
	var exported distrustCounter
	if _, err := ri.Indexer().Index().Export(ctx, &exported); err != nil {
		t.Fatal(err)
	}
	if exported.n == 0 {
		t.Errorf("the fabricator's records are not kept (marked distrusted) in the export")
	}
	t.Logf("%d sites were the fabricator's (%d without a page it delivered, %d in shards it coordinates); %d honest nodes convicted it as coordinators; %d of its records exported as distrusted",
		len(fabSites), silent, ownShard, byHonest, exported.n)
}

// distrustCounter counts exported records marked distrusted.
type distrustCounter struct{ n int }

func (d *distrustCounter) Write(p []byte) (int, error) {
	for i := 0; i+len(`"distrusted":true`) <= len(p); i++ {
		if string(p[i:i+len(`"distrusted":true`)]) == `"distrusted":true` {
			d.n++
		}
	}
	return len(p), nil
}

func waitFor(t *testing.T, limit time.Duration, what string, cond func() error) {
	t.Helper()
	poll.Until(t, limit, what, cond)
}
