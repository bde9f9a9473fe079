package delegate_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/bootstrap"
	"github.com/micra-net/micra/internal/p2ptest"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/overlay/delegate"
	"github.com/micra-net/micra/overlay/overlaytest"
	"github.com/micra-net/micra/subnet"
)

// TestMeshHandOff runs a load-balancing hand-off end to end: node A is
// nearest to two subnets in different shards; when it is full and the
// second is decided, A keeps the new one and hands the first, whose other
// probe is almost as near, to B, through a REASSIGN to the first subnet's
// coordinator. Probes answer from a table; the threshold is low enough
// that every node is asked, so the probe results exist.
func TestMeshHandOff(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		net := p2ptest.NewNet(t)
		ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
		// RTTs by node and probed host.
		table := []map[string]time.Duration{
			{"127.1.10.9": ms(10), "127.2.20.9": ms(10)},   // A
			{"127.1.10.9": ms(12), "127.2.20.9": ms(100)},  // B
			{"127.1.10.9": ms(200), "127.2.20.9": ms(150)}, // C
		}
		var capacity, load atomic.Uint64
		var dels []*delegate.Delegator
		var nodes []*overlaytest.Node
		for i := range table {
			// No cache of other shards' indexes: the second decision must see the
			// first in the block index however the two are timed. No pending
			// loads: A's declared load already counts the first subnet, and a
			// coordinator that decided both (one run in three) would add it
			// again, leaving no hand-off that makes room.
			d, err := delegate.New(delegate.Pure(), delegate.Threshold(ms(5)), delegate.CacheTTL(0),
				delegate.LoadBalancing(true, 100, 0), delegate.Logger(debugLogger()))
			if err != nil {
				t.Fatal(err)
			}
			dels = append(dels, d)
			prober := overlay.ProberFunc(func(_ context.Context, u string) (time.Duration, error) {
				pu, err := url.Parse(u)
				if err != nil {
					return 0, err
				}
				if rtt, ok := table[i][pu.Hostname()]; ok {
					return rtt, nil
				}
				return 0, errors.New("unreachable")
			})
			opts := []overlay.Option{overlay.WithDelegator(d), overlay.WithProber(prober), overlay.Announce(time.Second)}
			if i == 0 {
				opts = append(opts, overlay.WithLoad(func() (uint64, uint64) { return capacity.Load(), load.Load() }))
			}
			nodes = append(nodes, overlaytest.NewNode(t, net, i, opts...))
		}
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		boot := []peer.AddrInfo{{ID: nodes[0].Host.ID(), Addrs: nodes[0].Host.Addrs()}}
		for _, n := range nodes[1:] {
			if _, err := bootstrap.Join(ctx, n.Host, n.Host.ID(), boot); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		for _, n := range nodes {
			wg.Go(func() { _ = n.Overlay.Bootstrap(ctx) })
		}
		wg.Wait()
		a, b := nodes[0].Host.ID(), nodes[1].Host.ID()
		name := map[peer.ID]string{a: "A", b: "B", nodes[2].Host.ID(): "C"}

		first := netip.MustParseAddr("127.1.10.9")
		d, err := nodes[2].Overlay.Delegate(ctx, "http://127.1.10.9/", first)
		if err != nil || d.Node != a {
			t.Fatalf("first subnet: %s, %v; want A", name[d.Node], err)
		}
		// The first decision reaches the block index above both shards (sent
		// in the background), where the second decision's search finds it with
		// its probes: wait for it, or a loaded machine decides the second
		// before the coordinator can know what A holds.
		tree := overlaytest.Tree(t)
		secondID := tree.SmallestNonUnary(netip.MustParseAddr("127.2.20.9"))
		top, _ := tree.Find(subnet.Range{Start: netip.MustParseAddr("127.0.0.0"), End: netip.MustParseAddr("127.255.255.255")})
		p2ptest.WaitFor(t, 30*time.Second, func() error {
			ix, err := nodes[2].Overlay.Block(ctx, top, secondID)
			if err != nil {
				return err
			}
			for _, e := range ix {
				if e.Subnet == tree.Range(tree.SmallestNonUnary(first)) && len(e.Probes) > 0 {
					return nil
				}
			}
			return fmt.Errorf("the first decision is not in the block index of 127.0.0.0/8 yet")
		})
		// A declares itself full; every node hears it.
		capacity.Store(1000)
		load.Store(1000)
		p2ptest.WaitFor(t, 30*time.Second, func() error {
			for _, n := range nodes[1:] {
				if !slices.ContainsFunc(n.Overlay.Peers(), func(pi overlay.PeerInfo) bool {
					return pi.ID == a && pi.Capacity == 1000 && pi.Subnets == 1
				}) {
					return fmt.Errorf("%s has not heard that A is full", n.Addr)
				}
			}
			return nil
		})
		second := netip.MustParseAddr("127.2.20.9")
		d, err = nodes[2].Overlay.Delegate(ctx, "http://127.2.20.9/", second)
		if err != nil || d.Node != a {
			t.Fatalf("second subnet: %s, %v; want A, which hands the first on", name[d.Node], err)
		}
		var handOffs int64
		for _, dl := range dels {
			handOffs += dl.Stats().HandOffs
		}
		if handOffs != 1 {
			t.Errorf("%d hand-offs, want 1", handOffs)
		}
		nodes[2].Overlay.Invalidate(tree.Range(tree.SmallestNonUnary(first)))
		got, ok, err := nodes[2].Overlay.Resolve(ctx, first)
		if err != nil || !ok || got.Node != b {
			t.Fatalf("first subnet after the hand-off: %s (%v, %v); want B", name[got.Node], ok, err)
		}
	})
}

// debugLogger logs to stderr with MICRA_DEBUG set, else nowhere.
func debugLogger() *slog.Logger {
	if os.Getenv("MICRA_DEBUG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
