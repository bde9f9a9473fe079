package overlay

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/micra-net/micra/subnet"
)

// partition splits peers into groups; while on, connections between
// groups are refused at every stage the gater sees.
type partition struct {
	on    atomic.Bool
	mu    sync.Mutex
	group map[peer.ID]int
}

func (p *partition) cut(a, b peer.ID) bool {
	if !p.on.Load() {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ga, okA := p.group[a]
	gb, okB := p.group[b]
	return okA && okB && ga != gb
}

// gater is one node's view of the partition.
type gater struct {
	self peer.ID
	p    *partition
}

func (g gater) InterceptPeerDial(p peer.ID) bool { return !g.p.cut(g.self, p) }
func (g gater) InterceptAddrDial(p peer.ID, _ ma.Multiaddr) bool {
	return !g.p.cut(g.self, p)
}
func (g gater) InterceptAccept(network.ConnMultiaddrs) bool { return true }
func (g gater) InterceptSecured(_ network.Direction, p peer.ID, _ network.ConnMultiaddrs) bool {
	return !g.p.cut(g.self, p)
}
func (g gater) InterceptUpgraded(c network.Conn) (bool, control.DisconnectReason) {
	return !g.p.cut(g.self, c.RemotePeer()), 0
}

// newGatedNode starts a node at a whose host consults the partition.
func newGatedNode(r *rig, a netip.Addr, part *partition, group int) *node {
	t := r.t
	t.Helper()
	sk, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(sk)
	if err != nil {
		t.Fatal(err)
	}
	part.mu.Lock()
	part.group[id] = group
	part.mu.Unlock()
	return r.nodeWith(a, sk, gater{id, part})
}

// TestPartitionHeals splits a swarm in two (RELIABILITY.md scenario 4): each
// side keeps delegating, the same subnet is delegated on both sides to
// different nodes, and the subnets of nodes on the other side are
// orphaned. After the partition heals, every subnet decided in any phase
// resolves to one owner at every node, and no two nodes hold the same
// subnet.
func TestPartitionHeals(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		const n = 8
		part := &partition{group: map[peer.ID]int{}}
		nodes := make([]*node, n)
		for i := range n {
			nodes[i] = newGatedNode(r, nodeAddr(i), part, i*2/n)
		}
		joinSwarm(t, nodes)
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		tree := mustTree(t)
		var decided []netip.Addr // one address per subnet decided in any phase
		delegate := func(asker *node, a netip.Addr) Delegation {
			t.Helper()
			var err error
			for range 40 { // a side may need a few rounds to find its coordinators
				var d Delegation
				if d, err = asker.o.Delegate(ctx, "http://"+a.String()+"/", a); err == nil {
					decided = append(decided, a)
					return d
				}
				time.Sleep(250 * time.Millisecond)
			}
			t.Fatalf("%s delegating %s: %v", asker.addr, a, err)
			return Delegation{}
		}
		target := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{127, byte(i % 4), byte(100 + i), 9}) } // a /24 each, over the four shards

		// Before: a few subnets, asked from both halves.
		for i := range 6 {
			delegate(nodes[i%n], target(i))
		}

		// The partition: no connection between the halves.
		part.on.Store(true)
		for _, a := range nodes {
			for _, b := range nodes {
				if part.cut(a.h.ID(), b.h.ID()) {
					_ = a.h.Network().ClosePeer(b.h.ID())
				}
			}
		}
		conflict := target(20)
		// The same subnet on both sides: each side's coordinator decides it.
		da, db := delegate(nodes[1], conflict), delegate(nodes[n-1], conflict)
		if da.Node == db.Node || da.Writer == db.Writer {
			t.Fatalf("the partition did not split the decision on %s: both sides got %s from %s", da.Subnet, da.Node, da.Writer)
		}
		t.Logf("during the partition %s went to %s (epoch %d) on one side and %s (epoch %d) on the other",
			da.Subnet, da.Node, da.Epoch, db.Node, db.Epoch)
		for i := 21; i < 25; i++ {
			delegate(nodes[i%n], target(i))
		}
		// Long enough for each side to take the other's nodes for dead.
		time.Sleep(2 * swarmLiveness)

		// Heal: the halves meet again through node 0.
		part.on.Store(false)
		boot := peer.AddrInfo{ID: nodes[0].h.ID(), Addrs: nodes[0].h.Addrs()}
		for _, nd := range nodes[n/2:] {
			if err := nd.h.Connect(ctx, boot); err != nil {
				t.Fatalf("reconnecting %s: %v", nd.addr, err)
			}
		}
		for _, nd := range nodes {
			if err := nd.o.Bootstrap(ctx); err != nil {
				t.Logf("bootstrap after healing: %v", err)
			}
		}
		healed := time.Now()
		eventually(t, 90*time.Second, func() error {
			for _, a := range decided {
				r := tree.Range(tree.SmallestNonUnary(a))
				var first peer.ID
				for _, nd := range nodes {
					nd.o.Invalidate(r)
					d, ok, err := nd.o.Resolve(ctx, a)
					if err != nil || !ok {
						return fmt.Errorf("%s resolves %s: ok=%v, %v", nd.addr, r, ok, err)
					}
					if first == "" {
						first = d.Node
					} else if d.Node != first {
						return fmt.Errorf("%s resolves %s to %s, another node to %s", nd.addr, r, d.Node, first)
					}
				}
				holders := 0
				for _, nd := range nodes {
					for _, d := range nd.o.Owned() {
						if d.Subnet == r {
							holders++
						}
					}
				}
				if holders > 1 {
					return fmt.Errorf("%s held by %d nodes", r, holders)
				}
			}
			return nil
		})
		t.Logf("%d subnets decided before and during the partition (one on both sides) agree at all %d nodes %v after healing",
			len(uniqueRanges(tree, decided)), n, time.Since(healed).Round(100*time.Millisecond))
	})
}

func uniqueRanges(tree *subnet.Tree, as []netip.Addr) map[subnet.Range]bool {
	out := map[subnet.Range]bool{}
	for _, a := range as {
		out[tree.Range(tree.SmallestNonUnary(a))] = true
	}
	return out
}
