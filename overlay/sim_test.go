package overlay

import (
	"context"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/bootstrap"
)

// TestSimSwarm runs a swarm on simlibp2p's simulated network under
// testing/synctest: QUIC between every pair of nodes with a per-pair link
// latency (2–41 ms one way), on virtual time, so that the run measures the
// protocol's round trips rather than the machine's two cores. Every node
// joins through node 0 and claims its own subnet; then the shard
// coordinators agree with the global truth (the XOR-closest node), every
// node's own subnet resolves to it from another node, and concurrent
// delegate requests for one empty subnet from every node yield one
// decision. 30 nodes; MICRA_LONG=1: 200; -short and -race: 10.
func TestSimSwarm(t *testing.T) {
	size := 30
	switch {
	case os.Getenv("MICRA_LONG") != "":
		size = 200
	case raceEnabled, testing.Short():
		size = 10
	}
	tree := mustTree(t)
	simulate(t, func(t *testing.T, r *rig) {
		// Production-like upkeep: the run lasts a few virtual seconds.
		upkeep := []Option{Maintenance(5*time.Second, 15*time.Second), Liveness(5*time.Second, time.Minute), Announce(time.Minute)}
		nodes := make([]*node, size)
		for i := range size {
			nodes[i] = r.nodeWith(nodeAddr(i), nil, nil, append(upkeep, OwnAddress(nodeAddr(i)))...)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute) // virtual
		defer cancel()
		t0 := time.Now()

		boot := []peer.AddrInfo{{ID: nodes[0].h.ID(), Addrs: nodes[0].h.Addrs()}}
		var wg sync.WaitGroup
		for _, n := range nodes[1:] {
			wg.Go(func() {
				if _, err := bootstrap.Join(ctx, n.h, n.h.ID(), boot); err != nil {
					t.Errorf("join %s: %v", n.addr, err)
				}
			})
		}
		wg.Wait()
		joined := time.Since(t0)
		for _, n := range nodes {
			wg.Go(func() {
				if err := n.o.Bootstrap(ctx); err != nil {
					t.Errorf("bootstrap %s: %v", n.addr, err)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		// Converged when every node's own claim succeeded and it knows its
		// shard's coordinator.
		for _, n := range nodes {
			wg.Go(func() {
				for i := 0; !n.o.ownDone.Load() && i < 60; i++ {
					time.Sleep(time.Second) // the heartbeats retry failed claims
				}
				if !n.o.ownDone.Load() {
					t.Errorf("node %s: own subnet never claimed", n.addr)
				}
				n.o.Coordinator(ctx, tree.SmallestNonUnary(n.addr))
			})
		}
		wg.Wait()
		converged := time.Since(t0)
		t.Logf("%d nodes: joined node 0 in %v, converged in %v (virtual), %d packets", size, joined, converged, r.net.Packets())

		// Coordinators agree, with each other and with the truth: the
		// node closest to the shard key.
		ids := make([]peer.ID, size)
		for i, n := range nodes {
			ids[i] = n.h.ID()
		}
		shards := map[[32]byte]netip.Addr{}
		for i := range 4 {
			a := netip.AddrFrom4([4]byte{127, byte(i), 250, 9})
			shards[nodes[0].o.coord.rangeShard(tree.SmallestNonUnary(a)).key(tree.ID())] = a
		}
		// Every node looks each shard up afresh, all at once: the virtual
		// clock then advances by a few lookups, not 4 × size of them (the
		// swarm's upkeep runs on the same clock and costs real CPU).
		for key, a := range shards {
			want := kb.SortClosestPeers(ids, kb.ConvertKey(string(key[:])))[0]
			for _, n := range nodes {
				wg.Go(func() {
					if got := n.o.coord.closestPeers(ctx, key, true)[0]; got != want {
						t.Errorf("shard of %s: node %s names %s, the closest node is %s", a, n.addr, got, want)
					}
				})
			}
		}
		wg.Wait()

		// Every node's own subnet is delegated to it, as another node
		// resolves it.
		for i, n := range nodes {
			other := nodes[(i+7)%size]
			wg.Go(func() {
				d, ok, err := other.o.Resolve(ctx, n.addr)
				if err != nil || !ok || d.Node != n.h.ID() || !d.Own {
					t.Errorf("node %s resolves %s to %s (own %v), %v, %v", other.addr, n.addr, d.Node, d.Own, ok, err)
				}
			})
		}
		wg.Wait()
		t.Logf("checked agreement and own subnets at %v (virtual)", time.Since(t0))

		// Every node asks at once for the same empty subnet: one decision.
		target := netip.MustParseAddr("127.1.250.9")
		id := tree.SmallestNonUnary(target)
		answers := make([]Delegation, size)
		for i, n := range nodes {
			wg.Go(func() {
				d, err := n.o.Delegate(ctx, "http://"+target.String()+"/", target)
				if err != nil {
					t.Errorf("delegate from %s: %v", n.addr, err)
				}
				answers[i] = d
			})
		}
		wg.Wait()
		runs := 0
		for i, n := range nodes {
			n.del.mu.Lock()
			runs += n.del.runs[id]
			n.del.mu.Unlock()
			if answers[i].Node != answers[0].Node || answers[i].Seq != answers[0].Seq || answers[i].Epoch != answers[0].Epoch {
				t.Errorf("two decisions for %s: %s and %s", target, answers[0].Node, answers[i].Node)
			}
		}
		if runs != 1 {
			t.Errorf("the delegation procedure ran %d times for one subnet", runs)
		}
		t.Logf("done at %v (virtual)", time.Since(t0))
	})
}
