package delegate_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/internal/p2ptest"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/overlay/delegate"
	"github.com/micra-net/micra/overlay/overlaytest"
	"github.com/micra-net/micra/subnet"
)

// TestMeshNodeThatDoesNotProbe: a node that does not probe, and that the
// others do not know for one (it has not announced it), is asked in
// decisions, first, but never given a subnet, not even one nobody reaches
// (which the first node asked that probed keeps).
func TestMeshNodeThatDoesNotProbe(t *testing.T) {
	for _, guided := range []bool{false, true} {
		t.Run(fmt.Sprintf("guided=%v", guided), func(t *testing.T) {
			p2ptest.Bubble(t, func(t *testing.T) {
				net := p2ptest.NewNet(t)
				nodes := startNoProbeMesh(t, net, guided)
				silent := nodes[2].Host.ID()
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
				defer cancel()

				tree := overlaytest.Tree(t)
				seen := map[subnet.ID]bool{}
				var sites []netip.Addr
				for a := 1; a < 4 && len(sites) < 24; a++ {
					for b := 1; b < 250 && len(sites) < 24; b += 7 {
						addr := netip.AddrFrom4([4]byte{127, byte(a), byte(b), 9})
						if id := tree.SmallestNonUnary(addr); !seen[id] {
							seen[id] = true
							sites = append(sites, addr)
						}
					}
				}
				var wg sync.WaitGroup
				got := make([]overlay.Delegation, len(sites))
				errs := make([]error, len(sites))
				for i, a := range sites {
					wg.Go(func() { got[i], errs[i] = nodes[i%2].Overlay.Delegate(ctx, "http://"+a.String()+"/", a) })
				}
				wg.Wait()
				for i, a := range sites {
					switch {
					case errs[i] != nil:
						t.Errorf("%v: %v", a, errs[i])
					case got[i].Node == silent:
						t.Errorf("%v: %s went to the node that does not probe", a, got[i].Subnet)
					}
				}
			})
		})
	}
}

// startNoProbeMesh starts three joined nodes with a Delegator each (micra's
// guided search or the paper's) whose probes all fail, but node 2's: it
// does not probe, announces nothing for an hour, and has the lowest peer
// ID, so that a search asking everybody in turn asks it first.
func startNoProbeMesh(t *testing.T, net *p2ptest.Net, guided bool) []*overlaytest.Node {
	t.Helper()
	keys := make([]crypto.PrivKey, 3)
	ids := make([]peer.ID, 3)
	for i := range keys {
		sk, _, err := crypto.GenerateEd25519Key(nil)
		if err != nil {
			t.Fatal(err)
		}
		keys[i] = sk
		if ids[i], err = peer.IDFromPrivateKey(sk); err != nil {
			t.Fatal(err)
		}
	}
	lowest := slices.Index(ids, slices.Min(ids))
	keys[lowest], keys[2] = keys[2], keys[lowest]
	fails := overlay.ProberFunc(func(context.Context, string) (time.Duration, error) {
		return 0, errors.New("unreachable")
	})
	var nodes []*overlaytest.Node
	for i := range 3 {
		opts := []delegate.Option{delegate.Logger(debugLogger())}
		if !guided {
			opts = append(opts, delegate.Pure())
		}
		d, err := delegate.New(opts...)
		if err != nil {
			t.Fatal(err)
		}
		prober := overlay.WithProber(fails)
		if i == 2 {
			prober = overlay.WithProber(nil)
		}
		a := overlaytest.Addr(i)
		n := &overlaytest.Node{Host: net.Host(t, keys[i], a), Addr: a, DB: overlaytest.DB(t)}
		n.Overlay, err = overlay.New(n.Host, overlaytest.Tree(t), n.DB,
			append(overlaytest.Options(), overlay.WithDelegator(d), prober, overlay.Announce(time.Hour))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Stop)
		nodes = append(nodes, n)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, n := range nodes[1:] {
		if err := n.Host.Connect(ctx, peer.AddrInfo{ID: nodes[0].Host.ID(), Addrs: nodes[0].Host.Addrs()}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() { _ = n.Overlay.Bootstrap(ctx) })
	}
	wg.Wait()
	return nodes
}
