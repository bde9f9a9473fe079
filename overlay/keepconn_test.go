package overlay

import (
	"context"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/internal/p2ptest"
)

// beatValue is p's heartbeat tag value in h's connection manager, 0 when
// it has none.
func beatValue(h host.Host, p peer.ID) int {
	synctest.Wait() // bumps and decays run on the manager's goroutine
	if ti := h.ConnManager().GetTagInfo(p); ti != nil {
		return ti.Tags[beatTag]
	}
	return 0
}

// TestBeatKeeper: a bump ranks a peer at beatTagValue or more as long as
// bumps come every heartbeat, and the tag goes within three intervals of
// the last one.
func TestBeatKeeper(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		net := p2ptest.NewNet(t)
		h := net.Host(t, nil, nodeAddr(0))
		other := net.Host(t, nil, nodeAddr(1))
		if err := h.Connect(t.Context(), peer.AddrInfo{ID: other.ID(), Addrs: other.Addrs()}); err != nil {
			t.Fatal(err)
		}
		k := newBeatKeeper(h, 30*time.Second)
		if k.tag == nil {
			t.Fatal("the host's connection manager does not decay tags")
		}
		defer k.close()
		for i := range 10 {
			k.bump(other.ID())
			if v := beatValue(h, other.ID()); v < beatTagValue {
				t.Fatalf("beat %d: value %d, want at least %d", i, v, beatTagValue)
			}
			time.Sleep(30 * time.Second)
			if v := beatValue(h, other.ID()); v < beatTagValue {
				t.Fatalf("a heartbeat after beat %d: value %d, want at least %d", i, v, beatTagValue)
			}
		}
		time.Sleep(time.Minute)
		if v := beatValue(h, other.ID()); v == 0 {
			t.Fatalf("tag gone 1.5 min after the last beat, want it kept for three intervals")
		}
		time.Sleep(2 * time.Minute)
		if v := beatValue(h, other.ID()); v != 0 {
			t.Fatalf("value %d 3.5 min after the last beat, want the tag gone", v)
		}
	})
}

// TestHeartbeatTagsBothEnds: a heartbeat tags the connection between a
// crawler and its shard's coordinator at both ends, so that the connection
// manager keeps it over a routing-table peer's when it trims.
func TestHeartbeatTagsBothEnds(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		// Heartbeats once an hour: this test sends them.
		nodes := r.swarm(6, Liveness(time.Hour, 10*time.Hour), Maintenance(time.Hour, time.Hour))
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		tree := mustTree(t)
		for i := range 30 {
			// A /24 in each of the tree's four shards in turn; the
			// delegator gives a subnet to the node that asks, and the
			// askers take turns: most are not the coordinator.
			a := netip.AddrFrom4([4]byte{127, byte(i % 4), byte(100 + i), 9})
			d, err := nodes[i%len(nodes)].o.Delegate(ctx, "http://"+a.String()+"/", a)
			if err != nil {
				t.Fatal(err)
			}
			var holder *node
			for _, n := range nodes {
				if n.h.ID() == d.Node {
					holder = n
				}
			}
			key := holder.o.coord.rangeShard(tree.SmallestNonUnary(a)).key(tree.ID())
			holder.o.heartbeatAll(ctx)
			holder.o.mu.Lock()
			coord, ok := holder.o.coordFor[key]
			holder.o.mu.Unlock()
			if !ok || coord == holder.h.ID() {
				continue // the holder coordinates the shard itself
			}
			var c *node
			for _, n := range nodes {
				if n.h.ID() == coord {
					c = n
				}
			}
			if v := beatValue(holder.h, coord); v < beatTagValue {
				t.Errorf("crawler %s: its coordinator %s tagged %d, want at least %d", holder.addr, c.addr, v, beatTagValue)
			}
			if v := beatValue(c.h, holder.h.ID()); v < beatTagValue {
				t.Errorf("coordinator %s: its crawler %s tagged %d, want at least %d", c.addr, holder.addr, v, beatTagValue)
			}
			return
		}
		t.Fatal("every subnet's holder coordinated its shard")
	})
}
