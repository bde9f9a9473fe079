package overlay

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/internal/p2ptest"
	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

// TestCarry: a swarm holding delegations under one snapshot switches to the
// next (p2ptest.NextTree: a merge, a split, a removal); every node carries
// its delegations, and the coordinators of the new snapshot record each as
// thesis 7.5.3 says: unchanged and split ranges keep their node, the merged
// range goes to the node Propagate prefers whichever carries first, the
// removed range is dropped. No carried range runs the delegation procedure,
// no range is held by two nodes, fresh decisions wait for the carry window,
// and a carry with a forged or foreign record is refused.
func TestCarry(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		nodes := r.swarm(6)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		oldTree, newTree := mustTree(t), p2ptest.NextTree(t)
		held := []struct {
			node int
			addr string
		}{
			{1, "127.0.8.5"},  // merged with .9 into 127.0.8.0/23: starts first, so it wins
			{2, "127.0.9.5"},  // merged: loses to 127.0.8.0/24
			{3, "127.1.10.5"}, // split into two /25
			{4, "127.2.20.5"}, // removed
			{5, "127.3.30.5"}, // unchanged
			{0, "127.1.40.5"}, // unchanged
		}
		for _, h := range held {
			a := netip.MustParseAddr(h.addr)
			if d, err := nodes[h.node].o.Delegate(ctx, "http://"+h.addr+"/", a); err != nil || d.Node != nodes[h.node].h.ID() {
				t.Fatalf("delegating %s to node %d: %v %v", h.addr, h.node, d.Node, err)
			}
		}
		for _, nd := range nodes {
			eventually(t, time.Minute, func() error {
				if len(nd.o.Owned()) == 0 {
					return fmt.Errorf("%s owns nothing yet", nd.addr)
				}
				return nil
			})
		}

		oldRec, err := ownedRecord(nodes[5], "127.3.30.0/24")
		if err != nil {
			t.Fatal(err)
		}

		// The switch: every node restarts its overlay on the new tree,
		// the merge's loser first, so that the winner must replace it.
		switched := time.Now()
		dels := switchSwarm(t, ctx, nodes, []int{2, 0, 1, 3, 4, 5}, oldTree, newTree, switched)

		// Fresh decisions wait for the carry window.
		fresh := netip.MustParseAddr("127.3.99.5")
		if _, err := nodes[0].o.Delegate(ctx, "http://127.3.99.5/", fresh); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "switching snapshots") {
			t.Fatalf("a fresh decision in the carry window: %v, want ErrUnavailable", err)
		}

		want := map[string]int{ // new range → node
			"127.0.8.0/23":    1,
			"127.1.10.0/25":   3,
			"127.1.10.128/25": 3,
			"127.3.30.0/24":   5,
			"127.1.40.0/24":   0,
		}
		owners := func() map[string][]int {
			out := map[string][]int{}
			for i, nd := range nodes {
				for _, d := range nd.o.Owned() {
					out[d.Subnet.String()] = append(out[d.Subnet.String()], i)
				}
			}
			return out
		}
		eventually(t, 2*time.Minute, func() error {
			got := owners()
			for r, i := range want {
				if o := got[r]; len(o) != 1 || o[0] != i {
					return fmt.Errorf("%s held by nodes %v, want %d", r, o, i)
				}
			}
			for r, o := range got {
				if _, ok := want[r]; !ok {
					return fmt.Errorf("%s held by nodes %v, want nobody", r, o)
				}
			}
			return nil
		})
		took := time.Since(switched)

		// Every node resolves each carried range to its node, as the
		// coordinators recorded it, with the range it came from.
		lost, doubled := 0, 0
		for r, i := range want {
			nr := subnet.RangeOf(netip.MustParsePrefix(r))
			d, ok, err := nodes[(i+1)%len(nodes)].o.Resolve(ctx, nr.Start)
			if err != nil || !ok || d.Node != nodes[i].h.ID() || !d.CarriedFrom.Valid() {
				lost++
				t.Errorf("%s resolves to %v (%v %v), carried from %s; want node %d", r, d.Node, ok, err, d.CarriedFrom, i)
			}
		}
		for _, o := range owners() {
			if len(o) > 1 {
				doubled++
			}
		}
		runs := 0
		for _, d := range dels {
			d.mu.Lock()
			for _, n := range d.runs {
				runs += n
			}
			d.mu.Unlock()
		}
		if runs != 0 {
			t.Errorf("carrying ran the delegation procedure %d times", runs)
		}
		t.Logf("rollover: %d subnets, %d lost, %d doubled, %.1f s to switch", len(want), lost, doubled, took.Seconds())

		// A carry of another node's record, to a range its old one does
		// not carry to, or of a record of the new snapshot is refused.
		newRec, err := ownedRecord(nodes[5], "127.3.30.0/24")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name string
			by   *node
			rec  *pb.SignedRecord
			to   string
			want error
		}{
			{"another node's record", nodes[4], oldRec, "127.3.30.0/24", ErrForbidden},
			{"to a range it does not carry to", nodes[5], oldRec, "127.3.31.0/24", ErrForbidden},
			{"a record of the new snapshot", nodes[5], newRec, "127.3.30.0/24", ErrWrongSnapshot},
		} {
			if _, err := askCarry(ctx, c.by, c.rec, c.to); !errors.Is(err, c.want) {
				t.Errorf("%s: %v, want %v", c.name, err, c.want)
			}
		}

		// After the window, fresh decisions are made again.
		time.Sleep(swarmLiveness)
		if d, err := nodes[0].o.Delegate(ctx, "http://127.3.99.5/", fresh); err != nil || d.Node != nodes[0].h.ID() {
			t.Fatalf("a fresh decision after the carry window: %v %v", d.Node, err)
		}
	})
}

// switchSwarm switches nodes, in order, from oldTree to newTree as a node
// does at a release's activation (a new overlay on the same host and
// database, with Previous), then bootstraps them; it returns each node's
// new delegator.
func switchSwarm(t *testing.T, ctx context.Context, nodes []*node, order []int, oldTree, newTree *subnet.Tree, activation time.Time) []*requesterDelegator {
	t.Helper()
	dels := make([]*requesterDelegator, len(nodes))
	for _, i := range order {
		nd := nodes[i]
		nd.o.Close()
		dels[i] = &requesterDelegator{}
		o, err := New(nd.h, newTree, nd.db, append(swarmOpts(), WithDelegator(dels[i]), Previous(oldTree, activation), Logger(testLogger()))...)
		if err != nil {
			t.Fatal(err)
		}
		nd.o = o
		t.Cleanup(func() { o.Close() })
	}
	for _, nd := range nodes {
		if err := nd.o.Bootstrap(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return dels
}

// ownedRecord returns the signed record of nd's delegation of range r
// as nd stored it.
func ownedRecord(nd *node, r string) (*pb.SignedRecord, error) {
	var sr pb.SignedRecord
	err := nd.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(ownedKey(rangeKey(subnet.RangeOf(netip.MustParsePrefix(r)))))
		if err != nil {
			return err
		}
		return it.Value(func(v []byte) error { return proto.Unmarshal(v, &sr) })
	})
	return &sr, err
}

// askCarry has nd carry rec to range r's coordinator.
func askCarry(ctx context.Context, nd *node, rec *pb.SignedRecord, r string) (*pb.Message, error) {
	nr := subnet.RangeOf(netip.MustParsePrefix(r))
	id, _ := nd.o.tree.Find(nr)
	req := newMsg(pb.Message_CARRY)
	req.Carry = &pb.Carry{Snapshot: nd.o.sid[:], Record: rec, Subnet: rangeToPB(nr)}
	return nd.o.askCoordinator(ctx, nd.o.coord.rangeShard(id), req, pb.Message_DELEGATION)
}

// TestCarryProbes: the probe results stored in the shards of one snapshot
// are carried, after the switch to the next (p2ptest.NextTree), to the
// shards of the ranges Propagate takes their ranges to (the same range,
// both halves of a split, the merged range; none for a removed one), and
// every node then drops the previous snapshot's shards.
func TestCarryProbes(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		nodes := r.swarm(4, WithDelegator(&probingDelegator{}))
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		oldTree, newTree := mustTree(t), p2ptest.NextTree(t)
		probed := map[string]int{"127.0.9.5": 1, "127.1.10.5": 2, "127.3.30.5": 3, "127.2.20.5": 0} // address → node
		for a, i := range probed {
			if _, err := nodes[i].o.Delegate(ctx, "http://"+a+"/", netip.MustParseAddr(a)); err != nil {
				t.Fatalf("delegating %s: %v", a, err)
			}
		}
		want := map[string]int{ // new range → the node whose probe it holds
			"127.0.8.0/23":    1, // merged
			"127.1.10.0/25":   2, // split
			"127.1.10.128/25": 2,
			"127.3.30.0/24":   3, // unchanged
		}
		switchSwarm(t, ctx, nodes, []int{0, 1, 2, 3}, oldTree, newTree, time.Now())
		stored := func(r subnet.Range) []ProbeResult {
			id, _ := newTree.Find(r)
			var out []ProbeResult
			for _, nd := range nodes {
				out = append(out, nd.o.coord.probesOf(nd.o.coord.rangeShard(id).key(nd.o.sid), r, 0)...)
			}
			return out
		}
		eventually(t, 2*time.Minute, func() error {
			for s, i := range want {
				ps := stored(subnet.RangeOf(netip.MustParsePrefix(s)))
				if !slices.ContainsFunc(ps, func(p ProbeResult) bool { return p.Peer == nodes[i].h.ID() && p.RTT == 10*time.Millisecond }) {
					return fmt.Errorf("%s: stored probes %v, want node %d's", s, ps, i)
				}
			}
			for i, nd := range nodes {
				metas, err := nd.o.coord.st.allMetas()
				if err != nil {
					return err
				}
				for key, m := range metas {
					if ref, err := nd.o.coord.shardRefFromPB(m.GetShard()); err != nil || ref.key(nd.o.sid) != key {
						return fmt.Errorf("node %d keeps a shard of another snapshot (%v)", i, m.GetShard())
					}
				}
			}
			return nil
		})
		if ps := stored(subnet.RangeOf(netip.MustParsePrefix("127.2.0.0/16"))); slices.ContainsFunc(ps, func(p ProbeResult) bool { return p.Peer == nodes[0].h.ID() }) {
			t.Errorf("the removed range's probe was carried to 127.2.0.0/16: %v", ps)
		}

		// Probes carried to a range the old one does not nest with are
		// refused.
		ask := func(from, to string) error {
			fr, tr := subnet.RangeOf(netip.MustParsePrefix(from)), subnet.RangeOf(netip.MustParsePrefix(to))
			id, _ := newTree.Find(tr)
			req := newMsg(pb.Message_CARRY_PROBES)
			req.CarryProbes = &pb.CarryProbes{Snapshot: nodes[0].o.sid[:], Probes: []*pb.CarriedProbe{{From: rangeToPB(fr),
				Probe: &pb.ProbeEntry{Subnet: rangeToPB(tr), Peer: []byte(nodes[0].h.ID()), RttMicros: 1000, AtMs: time.Now().UnixMilli()}}}}
			_, err := nodes[0].o.askCoordinator(ctx, nodes[0].o.coord.rangeShard(id), req, pb.Message_OK)
			return err
		}
		if err := ask("127.3.30.0/24", "127.1.10.0/25"); !errors.Is(err, ErrForbidden) {
			t.Errorf("a probe carried to a range it does not nest with: %v, want ErrForbidden", err)
		}
	})
}
