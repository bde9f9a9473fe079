package swarm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/indexer"
	"github.com/micra-net/micra/internal/p2ptest"
	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/internal/world/worldtest"
	"github.com/micra-net/micra/node"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/subnet"
)

// TestRollover: 20 nodes and an indexer crawl an emulated Internet whose
// registry then changes (world.UpdateRegistry: splits, merges, removals
// and new ranges in the world's own RPSL files). A release of the new
// snapshot is published through one node; every peer fetches it and
// switches at the activation time, and the delegations held before are
// carried as thesis 7.5.3 says (subnet.Propagate on the delegations held
// at the publication is the expectation). It checks that every peer runs
// the new snapshot within one liveness period of the activation, that no
// delegated subnet is lost or held twice, that crawling goes on, and that
// every result batch reaches the indexer.
func TestRollover(t *testing.T) {
	switch {
	case testing.Short():
		t.Skip("starts 20 nodes")
	case raceEnabled:
		t.Skip("20 whole nodes under the race detector take many minutes; the switch's parts have their -race tests (overlay TestCarry, results, node)")
	}
	const (
		nodes    = 20
		scale    = 0.05
		liveness = 20 * time.Second
		lead     = 20 * time.Second // from the publication to the activation
	)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	run := worldtest.Start(t, worldtest.Params(4, 100, nodes), world.TimeScale(scale))
	w := run.World()
	oldTree, err := w.Tree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keyFile, pub, err := subnet.NewReleaseKey()
	if err != nil {
		t.Fatal(err)
	}
	key, err := subnet.ParseReleaseKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{subnet.FormatReleaseKey(pub)}
	// Releases are fetched within two seconds of being seen, and a node
	// that knows none asks for one every five.
	timing := overlay.ReleaseTiming(2*time.Second, 5*time.Second)
	dir := t.TempDir()
	var logger *slog.Logger
	if f := os.Getenv("MICRA_TEST_LOG"); f != "" {
		lf, err := os.Create(f)
		if err != nil {
			t.Fatal(err)
		}
		defer lf.Close()
		logger = slog.New(slog.NewTextHandler(lf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	s, err := Start(ctx, run, oldTree, Config{Dir: dir, Scale: scale, Threshold: 50 * time.Millisecond,
		// Parts split off by calibration are not carried (they are
		// searched again); the test measures the carried delegations.
		Split: -1, SnapshotKeys: keys, Liveness: liveness, Logger: logger,
		// A second between two requests to a server: sites are still
		// being crawled when the registry changes.
		NodeOptions: []node.Option{node.OverlayOptions(timing), node.CrawlOptions(crawl.Politeness(time.Second, time.Second))}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	h0 := s.Nodes[0].Overlay().Host()
	ri, err := node.StartIndexer(ctx, node.IndexerConfig{
		DataDir: filepath.Join(dir, "indexer"), Listen: []string{"/ip4/127.0.0.1/tcp/0"}, AllowPrivateNetworks: true, // the emulated Internet is on loopback
		Bootstrap: []peer.AddrInfo{{ID: h0.ID(), Addrs: h0.Addrs()}}, HTTP: "127.0.0.1:0",
		Tree: oldTree, SnapshotKeys: keys, JoinNow: true,
		Host: []overlay.HostOption{overlay.Reachability(network.ReachabilityPublic), overlay.NoRelayService()},
		Overlay: []overlay.Option{overlay.Announce(2 * time.Second), overlay.NoCrawl(), timing,
			overlay.Liveness(liveness/10, liveness), overlay.Maintenance(liveness/4, 30*time.Second)},
		Delegate: s.DelegateOptions("indexer"),
		Indexer:  []indexer.Option{indexer.AnnounceEvery(2 * time.Second)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ri.Close() })

	// Crawl every site from its home page.
	var sites []world.Site
	for _, st := range w.Sites() {
		if st.Hostile == world.NotHostile && st.Kind != world.CDNSite {
			sites = append(sites, st)
		}
	}
	for i, st := range sites {
		if _, err := s.Nodes[i%nodes].Submit(ctx, crawl.Request{Link: run.URL(st), Depth: 3}); err != nil {
			t.Fatalf("submitting %s: %v", st.Name, err)
		}
	}
	held := func() map[subnet.Range][]peer.ID {
		out := map[subnet.Range][]peer.ID{}
		for _, n := range s.Nodes {
			for _, d := range n.Overlay().Owned() {
				if !d.Orphaned && d.Node == n.ID() {
					out[d.Subnet] = append(out[d.Subnet], n.ID())
				}
			}
		}
		return out
	}
	p2ptest.WaitFor(t, 3*time.Minute, func() error {
		h := held()
	next:
		for _, st := range sites {
			for r := range h {
				if r.Contains(st.Addrs[0]) {
					continue next
				}
			}
			return fmt.Errorf("%s (%s) not delegated yet", st.Name, st.Addrs[0])
		}
		return nil
	})

	// The registry changes, preferring the ranges delegated now.
	before := held()
	var dels []subnet.Delegation
	var addrs []netip.Addr
	for r, ps := range before {
		if len(ps) > 1 {
			t.Fatalf("%s held by %d nodes before the switch", r, len(ps))
		}
		dels = append(dels, subnet.Delegation{Range: r, Owner: string(ps[0])})
		addrs = append(addrs, r.Start)
	}
	files, changes, err := world.UpdateRegistry(w.Registry(), 1, 3, addrs...)
	if err != nil {
		t.Fatal(err)
	}
	newTree, err := world.BuildTree(ctx, files)
	if err != nil {
		t.Fatal(err)
	}
	want, dropped := subnet.Propagate(oldTree, newTree, dels)
	cases := map[subnet.Case]int{}
	for _, c := range want {
		cases[c.Case]++
	}
	t.Logf("registry update: %d split, %d merged, %d removed, %d added; of %d delegated subnets %d unchanged, %d split, %d merged into, %d removed",
		len(changes.Split), len(changes.Merged), len(changes.Removed), len(changes.Added),
		len(dels), cases[subnet.Unchanged], cases[subnet.Split], cases[subnet.Merged], len(dropped))
	if cases[subnet.Split] == 0 || cases[subnet.Merged] == 0 || len(dropped) == 0 {
		t.Fatalf("the update does not touch the delegated subnets in all three ways: %v, %d dropped", cases, len(dropped))
	}

	// Publish, and watch every peer switch.
	var file bytes.Buffer
	if err := newTree.WriteSnapshot(&file); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(lead)
	rel, raw, err := subnet.NewRelease(key, file.Bytes(), oldTree.ID(), at.Add(-subnet.MinReleaseLead), at)
	if err != nil {
		t.Fatal(err)
	}
	activation := rel.Activation // as the release holds it
	if err := s.Nodes[nodes-1].Overlay().PublishRelease(ctx, raw, file.Bytes()); err != nil {
		t.Fatal(err)
	}
	peers := func() []func() *overlay.Overlay {
		out := []func() *overlay.Overlay{ri.Overlay}
		for _, n := range s.Nodes {
			out = append(out, n.Overlay)
		}
		return out
	}()
	var mu sync.Mutex
	switchedAt := make([]time.Time, len(peers))
	var fetchedAtSwitch int64
	p2ptest.WaitFor(t, lead+liveness+time.Minute, func() error {
		mu.Lock()
		defer mu.Unlock()
		missing := 0
		for i, o := range peers {
			if switchedAt[i].IsZero() && o().Tree().ID() == newTree.ID() {
				switchedAt[i] = time.Now()
			}
			if switchedAt[i].IsZero() {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d peers run the old snapshot", missing, len(peers))
		}
		return nil
	})
	last := slices.MaxFunc(switchedAt, func(a, b time.Time) int { return a.Compare(b) })
	took := last.Sub(activation)
	for _, n := range s.Nodes {
		fetchedAtSwitch += n.CrawlStats().Fetched
	}
	if took > liveness {
		t.Errorf("the last peer switched %v after the activation; want within one liveness period (%v)", took, liveness)
	}

	// The carried delegations, as Propagate says.
	count := func() (lost, doubled int, msg string) {
		h := held()
		var bad []string
		for _, c := range want {
			if got := h[c.Range]; !slices.Contains(got, peer.ID(c.Owner)) {
				lost++
				bad = append(bad, fmt.Sprintf("%s (%s from %s) held by %v, want %s", c.Range, c.Case, c.From, got, peer.ID(c.Owner).ShortString()))
			}
		}
		for r, ps := range h {
			if len(ps) > 1 {
				doubled++
				bad = append(bad, fmt.Sprintf("%s held by %d nodes", r, len(ps)))
			}
		}
		return lost, doubled, strings.Join(bad, "; ")
	}
	var lost, doubled int
	p2ptest.WaitFor(t, activation.Add(3*liveness).Sub(time.Now())+time.Minute, func() error {
		var msg string
		if lost, doubled, msg = count(); lost+doubled > 0 {
			return fmt.Errorf("%d lost, %d doubled: %s", lost, doubled, msg)
		}
		return nil
	})
	t.Logf("rollover: %d subnets, %d lost, %d doubled, %.1f s to switch", len(dels), lost, doubled, took.Seconds())

	// Crawling goes on, and every batch reaches the indexer.
	p2ptest.WaitFor(t, 2*time.Minute, func() error {
		var fetched int64
		for _, n := range s.Nodes {
			fetched += n.CrawlStats().Fetched
		}
		if fetched <= fetchedAtSwitch {
			return fmt.Errorf("%d pages fetched, as many as at the switch", fetched)
		}
		return nil
	})
	// After the carry window, the former holders of removed ranges hand
	// the requests still queued for them on, and the ranges now holding
	// their sites are delegated afresh.
	var gone []world.Site
	for _, st := range sites {
		if slices.ContainsFunc(dropped, func(d subnet.Delegation) bool { return d.Range.Contains(st.Addrs[0]) }) {
			gone = append(gone, st)
		}
	}
	var handed int64
	redelegated := 0
	p2ptest.WaitFor(t, activation.Add(liveness).Sub(time.Now())+time.Minute, func() error {
		if time.Now().Before(activation.Add(liveness + 5*time.Second)) {
			return errors.New("the carry window is open")
		}
		handed, redelegated = 0, 0
		for _, n := range s.Nodes {
			handed += n.CrawlStats().HandedOff
		}
		h := held()
		for _, st := range gone {
			for r := range h {
				if r.Contains(st.Addrs[0]) {
					redelegated++
					break
				}
			}
		}
		if handed > 0 && redelegated == 0 {
			return fmt.Errorf("%d requests handed on, none of the %d sites of removed ranges delegated afresh", handed, len(gone))
		}
		return nil
	})
	t.Logf("%d queued requests handed on by nodes that no longer hold their subnet; %d of the %d sites of removed ranges delegated afresh", handed, redelegated, len(gone))

	// A node restarted on its configured (old) snapshot runs the one it
	// switched to, with the delegations it held.
	k := 1
	kept := map[subnet.Range]bool{}
	for _, d := range s.Nodes[k].Overlay().Owned() {
		kept[d.Subnet] = true
	}
	if err := s.Nodes[k].Close(); err != nil {
		t.Fatal(err)
	}
	nk, err := s.newNode(run, oldTree, k, s.Nodes[k].Addr, s.Nodes[0].Addrs())
	if err != nil {
		t.Fatal(err)
	}
	s.Nodes[k].Node = nk
	if got := nk.Overlay().Tree().ID(); got != newTree.ID() {
		t.Fatalf("restarted node runs %s, want the released %s", got.Short(), newTree.ID().Short())
	}
	if err := nk.Join(ctx); err != nil {
		t.Fatal(err)
	}
	p2ptest.WaitFor(t, liveness, func() error {
		for r := range kept {
			if !slices.ContainsFunc(nk.Overlay().Owned(), func(d overlay.Delegation) bool { return d.Subnet == r }) {
				return fmt.Errorf("the restarted node lost %s", r)
			}
		}
		return nil
	})

	p2ptest.WaitFor(t, 3*time.Minute, func() error {
		for i, n := range s.Nodes {
			if st := n.OutboxStats(); st.Batches > 0 {
				return fmt.Errorf("node %d has %d batches not acknowledged (%+v); indexer %+v", i, st.Batches, st, ri.Indexer().Stats())
			}
		}
		return nil
	})
}
