package overlay

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/overlay/pb"
)

// TestOwnerEntriesFollowChanges: the heartbeat's list of a node's subnets,
// kept between heartbeats, is every time what a scan of the shard finds,
// through new delegations and an orphaning. A stale list would have its
// node drop a subnet it holds.
func TestOwnerEntriesFollowChanges(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		nodes := r.swarm(4, Liveness(time.Hour, 10*time.Hour), Maintenance(time.Hour, time.Hour))
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		tree := mustTree(t)
		next := 0
		delegate := func(n int) {
			t.Helper()
			for range n {
				// /24s of one shard (127.1/16); the delegator gives each to
				// the node that asks, and the askers take turns.
				a := netip.AddrFrom4([4]byte{127, 1, byte(100 + next), 9})
				if _, err := nodes[next%len(nodes)].o.Delegate(ctx, "http://"+a.String()+"/", a); err != nil {
					t.Fatal(err)
				}
				next++
			}
		}
		delegate(6)
		key := nodes[0].o.coord.rangeShard(tree.SmallestNonUnary(netip.MustParseAddr("127.1.100.9"))).key(tree.ID())
		var c *coordinator
		var sh *shard
		for _, n := range nodes {
			n.o.coord.mu.Lock()
			s, ok := n.o.coord.shards[key]
			n.o.coord.mu.Unlock()
			if ok {
				s.mu.Lock()
				owned := s.owned
				s.mu.Unlock()
				if owned {
					c, sh = n.o.coord, s
				}
			}
		}
		if sh == nil {
			t.Fatal("no node coordinates the shard")
		}
		check := func(when string) {
			t.Helper()
			total := 0
			for _, n := range nodes {
				want := scanOwned(t, c, key, n.h.ID())
				got, truncated := c.ownerEntries(sh, n.h.ID())
				if truncated || !slices.Equal(rangeKeys(t, got), want) {
					t.Errorf("%s: node %s: heartbeat list %v, a scan finds %v", when, n.addr, rangeKeys(t, got), want)
				}
				total += len(got)
			}
			if total == 0 {
				t.Fatalf("%s: no subnets listed", when)
			}
		}
		check("after 6 delegations")
		check("again, unchanged")
		delegate(6)
		check("after 6 more")
		// Orphan one of a node's subnets, as liveness does; the delegator
		// gives it to the coordinator, which decides again.
		victim := nodes[1].h.ID()
		before := scanOwned(t, c, key, victim)
		var d Delegation
		if err := c.st.scan(key, pb.Entry_DELEGATION, func(e *pb.Entry) bool {
			dd, err := c.entryDelegation(e)
			if err == nil && dd.Node == victim && !dd.Orphaned {
				d = dd
				return false
			}
			return true
		}); err != nil || d.Node == "" {
			t.Fatalf("no delegation of node 1 found (%v)", err)
		}
		if err := c.orphan(ctx, sh, d, nil, "test"); err != nil {
			t.Fatal(err)
		}
		if got, _ := c.ownerEntries(sh, victim); len(got) != len(before)-1 {
			t.Errorf("node 1 listed with %d subnets after one of its %d was orphaned", len(got), len(before))
		}
		check("after the orphaning")
	})
}

// scanOwned is the subnets of shard key delegated to p, by a scan of the
// coordinator's store, as sorted strings.
func scanOwned(t *testing.T, c *coordinator, key [32]byte, p peer.ID) []string {
	var out []string
	if err := c.st.scan(key, pb.Entry_DELEGATION, func(e *pb.Entry) bool {
		if d, err := c.entryDelegation(e); err == nil && d.Node == p && !d.Orphaned {
			out = append(out, d.Subnet.String())
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// rangeKeys is rs as sorted strings.
func rangeKeys(t *testing.T, rs []*pb.Range) []string {
	var out []string
	for _, r := range rs {
		rg, err := rangeFromPB(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rg.String())
	}
	slices.Sort(out)
	return out
}
