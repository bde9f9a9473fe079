package overlay

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

// TestHeartbeatTakesUpLostAssignment: a subnet, or a part of one split
// apart, whose ASSIGN never reached its node (here refused, as a node refuses a writer it does not yet count
// among the shard's coordinators) is taken up by that node from its
// coordinator's heartbeat acks, which list it as the node's. Without it
// the subnet stays delegated to a node that never crawls it, and is never
// orphaned, since the node heartbeats the shard for its other subnets.
func TestHeartbeatTakesUpLostAssignment(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		const n = 5
		del := &preferDelegator{}
		nodes := make([]*node, n)
		for i := range nodes {
			nodes[i] = r.node(i, WithDelegator(del))
		}
		tree := mustTree(t)
		kept, lost := netip.MustParseAddr("127.1.77.7"), netip.MustParseAddr("127.1.78.7")
		keptID, lostID := tree.SmallestNonUnary(kept), tree.SmallestNonUnary(lost)
		ref := nodes[0].o.coord.rangeShard(lostID)
		if nodes[0].o.coord.rangeShard(keptID) != ref || keptID == lostID {
			t.Fatalf("%v and %v: want two ranges of one shard", kept, lost)
		}
		// The node: the farthest from the shard's key, so that its
		// coordinator is another node and tells it with an ASSIGN.
		order := nearestFirst(nodes, ref.key(tree.ID()))
		x, asker := order[n-1], order[n-2]
		lostRange := tree.Range(lostID)
		split := netip.MustParseAddr("127.1.79.7") // a range the asker holds and splits
		part := subnet.RangeOf(netip.MustParsePrefix("127.1.79.128/25"))
		var refused atomic.Int64
		honest := x.o.handlers[CoordinateID][pb.Message_ASSIGN]
		x.o.handlers[CoordinateID][pb.Message_ASSIGN] = func(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
			if d, err := x.o.openDelegation(req.GetAssign().GetRecord()); err == nil && (d.Subnet == lostRange || d.Subnet == part) {
				refused.Add(1)
				return nil, fmt.Errorf("%w: refused by the test", ErrForbidden)
			}
			return honest(ctx, from, req)
		}
		joinSwarm(t, nodes)
		del.mu.Lock()
		del.prefer = []peer.ID{x.h.ID()}
		del.mu.Unlock()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()

		holds := func(r subnet.Range) bool {
			_, ok := ownsRange(x, r)
			return ok
		}
		if d, err := asker.o.Delegate(ctx, "http://"+kept.String()+"/", kept); err != nil || d.Node != x.h.ID() {
			t.Fatalf("delegating %v: %v, %v; want %v", kept, d.Node, err, x.h.ID())
		}
		eventually(t, 10*time.Second, func() error {
			if !holds(tree.Range(keptID)) {
				return fmt.Errorf("the node does not hold %v", kept)
			}
			return nil
		})
		if d, err := asker.o.Delegate(ctx, "http://"+lost.String()+"/", lost); err != nil || d.Node != x.h.ID() {
			t.Fatalf("delegating %v: %v, %v; want %v", lost, d.Node, err, x.h.ID())
		}
		eventually(t, 10*time.Second, func() error {
			if refused.Load() == 0 {
				return fmt.Errorf("no ASSIGN of %v refused yet", lostRange)
			}
			return nil
		})
		if holds(lostRange) {
			t.Fatalf("the node holds %v though its ASSIGN was refused", lostRange)
		}
		// Heartbeats every second: two acks list it, then it is taken up.
		eventually(t, 10*time.Second, func() error {
			if !holds(lostRange) {
				return fmt.Errorf("the node does not hold %v (%d ASSIGNs refused)", lostRange, refused.Load())
			}
			return nil
		})
		if got := x.o.Stats().Adopted; got != 1 {
			t.Errorf("Stats.Adopted = %d, want 1", got)
		}
		// Still the node's at the coordinator: taken up, not re-decided.
		d, ok, err := asker.o.Lookup(ctx, lostID)
		if err != nil || !ok || d.Node != x.h.ID() || d.Orphaned {
			t.Errorf("the coordinator's delegation of %v: %+v, %v, %v; want the node's", lostRange, d, ok, err)
		}
		if !holds(tree.Range(keptID)) {
			t.Errorf("the node no longer holds %v", kept)
		}

		// A part: the asker holds a range of the shard and splits it; the
		// part goes to the node, whose ASSIGN is refused again.
		del.mu.Lock()
		del.prefer = []peer.ID{asker.h.ID()}
		del.mu.Unlock()
		holdRange(ctx, t, asker, split)
		del.mu.Lock()
		del.prefer = []peer.ID{x.h.ID()}
		del.mu.Unlock()
		before := refused.Load()
		if d, err := asker.o.Split(ctx, "http://127.1.79.200/", netip.MustParseAddr("127.1.79.200"), 80*time.Millisecond); err != nil || d.Subnet != part || d.Node != x.h.ID() {
			t.Fatalf("split: %s to %v, %v; want %s to the node", d.Subnet, d.Node, err, part)
		}
		eventually(t, 10*time.Second, func() error {
			if refused.Load() == before {
				return fmt.Errorf("no ASSIGN of %v refused yet", part)
			}
			return nil
		})
		eventually(t, 10*time.Second, func() error {
			if !holds(part) {
				return fmt.Errorf("the node does not hold the part %v", part)
			}
			return nil
		})
		if got := x.o.Stats().Adopted; got != 2 {
			t.Errorf("Stats.Adopted = %d, want 2", got)
		}
	})
}

// TestOwnedByShard: the heartbeats' index of owned subnets by shard
// follows every own and disown, parts included.
func TestOwnedByShard(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		nd := r.node(0)
		o, tree := nd.o, mustTree(t)
		check := func(when string) {
			t.Helper()
			want := map[[32]byte]map[string]struct{}{}
			for k, d := range o.owned {
				key, ok := o.ownedShard(d.Subnet)
				if !ok {
					t.Fatalf("%s: %s in no shard", when, d.Subnet)
				}
				if want[key] == nil {
					want[key] = map[string]struct{}{}
				}
				want[key][k] = struct{}{}
			}
			if len(want) != len(o.ownedIn) {
				t.Fatalf("%s: %d shards indexed, want %d", when, len(o.ownedIn), len(want))
			}
			for key, ks := range want {
				if len(o.ownedIn[key]) != len(ks) {
					t.Fatalf("%s: shard %x indexes %d subnets, want %d", when, key[:4], len(o.ownedIn[key]), len(ks))
				}
				for k := range ks {
					if _, ok := o.ownedIn[key][k]; !ok {
						t.Fatalf("%s: a subnet missing from its shard's index", when)
					}
				}
			}
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		var ds []Delegation
		for _, a := range []string{"127.1.7.1", "127.1.8.1", "127.2.7.1", "127.3.9.1"} {
			ds = append(ds, Delegation{Subnet: tree.Range(tree.SmallestNonUnary(netip.MustParseAddr(a)))})
		}
		part := Delegation{Subnet: subnet.RangeOf(netip.MustParsePrefix("127.1.7.128/25"))}
		for _, d := range ds {
			o.own(d, false)
		}
		o.own(part, true)
		o.own(ds[0], false) // again
		check("after owning")
		if len(o.ownedIn) != 3 {
			t.Fatalf("%d shards indexed, want 3", len(o.ownedIn))
		}
		o.disown(string(rangeKey(ds[0].Subnet)), false)
		o.disown(string(rangeKey(part.Subnet)), true)
		o.disown(string(rangeKey(ds[3].Subnet)), false)
		o.disown(string(rangeKey(ds[3].Subnet)), false) // again
		check("after disowning")
		if len(o.ownedIn) != 2 || o.ownedParts != 0 {
			t.Fatalf("%d shards indexed, %d parts, want 2 and 0", len(o.ownedIn), o.ownedParts)
		}
	})
}
