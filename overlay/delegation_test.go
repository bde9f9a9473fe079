package overlay

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

// probingDelegator gives the subnet to the asker, as requesterDelegator
// does, after having the asker probe it (so decisions carry probe
// results), and records every request.
type probingDelegator struct {
	mu   sync.Mutex
	reqs []DelegateRequest
}

func (d *probingDelegator) Delegate(ctx context.Context, req DelegateRequest, env DelegationEnv) (peer.ID, error) {
	d.mu.Lock()
	d.reqs = append(d.reqs, req)
	d.mu.Unlock()
	if _, err := env.Probe(ctx, req.From, "http://"+req.Addr.String()+"/", env.Tree().Range(req.Subnet)); err != nil {
		return "", err
	}
	return req.From, nil
}

func (d *probingDelegator) requests() []DelegateRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.reqs)
}

// TestOwnSubnetClaim: a joining node is delegated its own subnet at once
// (paper III.D), over a delegation made by search but not over another
// node's own claim, and only from an address in that subnet. Nodes listen
// on TCP only: on loopback QUIC dials do not leave from the bound address.
func TestOwnSubnetClaim(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		const n = 6
		nodes := make([]*node, n)
		// A long liveness timeout on every node, the late ones included (any of
		// them may coordinate a shard): under -race on a loaded machine a
		// node's heartbeats may lag past the default, and its orphaned subnet
		// would rightly go to the twin below.
		slow := Liveness(200*time.Millisecond, 30*time.Second)
		for i := range n {
			nodes[i] = r.nodeWith(nodeAddr(i), nil, nil, OwnAddress(nodeAddr(i)), Announce(time.Second), slow)
		}
		joinSwarm(t, nodes)
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		tree := mustTree(t)
		owns := func(nd *node, a netip.Addr) error {
			r := tree.Range(tree.SmallestNonUnary(a))
			for _, d := range nd.o.Owned() {
				if d.Subnet == r {
					if !d.Own {
						return fmt.Errorf("%s holds %s, not as its own", nd.addr, r)
					}
					return nil
				}
			}
			return fmt.Errorf("%s does not hold %s", nd.addr, r)
		}
		for _, nd := range nodes {
			eventually(t, 30*time.Second, func() error { return owns(nd, nd.addr) })
			// Early claims may meet coordinators whose views of the closest
			// peers still differ; a lost claim is made again.
			other := nodes[(slices.Index(nodes, nd)+1)%n]
			eventually(t, 30*time.Second, func() error {
				other.o.Invalidate(tree.Range(tree.SmallestNonUnary(nd.addr)))
				if d, ok, err := other.o.Resolve(ctx, nd.addr); err != nil || !ok || d.Node != nd.h.ID() || !d.Own {
					return fmt.Errorf("%s resolves %s's subnet to %v own=%v (%v, %v)", other.addr, nd.addr, d.Node, d.Own, ok, err)
				}
				return nil
			})
		}

		// A subnet delegated by search is taken over by the node that lives in
		// it when it joins.
		home := netip.MustParseAddr("127.2.9.1")
		if d, err := nodes[1].o.Delegate(ctx, "http://127.2.9.9/", netip.MustParseAddr("127.2.9.9")); err != nil || d.Node != nodes[1].h.ID() {
			t.Fatalf("searched delegation: %v, %v", d.Node, err)
		}
		late := r.nodeWith(home, nil, nil, OwnAddress(home), slow)
		joinSwarm(t, []*node{nodes[0], late})
		eventually(t, 30*time.Second, func() error { return owns(late, home) })
		// Both say what changed and why: the late node gained its own
		// subnet, node 1 lost the one it was delegated.
		homeRange := tree.Range(tree.SmallestNonUnary(home))
		changed := func(nd *node, gained, own bool, reason string) error {
			for _, c := range nd.o.Changes() {
				if c.Subnet == homeRange && c.Gained == gained && c.Own == own && c.Reason == reason {
					return nil
				}
			}
			return fmt.Errorf("%s: no change of %s (gained %v, own %v: %q) in %+v", nd.addr, homeRange, gained, own, reason, nd.o.Changes())
		}
		if err := changed(late, true, true, reasonOwnClaimed); err != nil {
			t.Error(err)
		}
		if err := changed(nodes[1], true, false, reasonDelegated); err != nil {
			t.Error(err)
		}
		eventually(t, 30*time.Second, func() error { return changed(nodes[1], false, false, reasonLost) })

		// A second node in an own-claimed subnet does not take it over.
		twin := netip.MustParseAddr("127.1.1.2") // node 1 is 127.1.1.1
		second := r.nodeWith(twin, nil, nil, OwnAddress(twin), slow)
		joinSwarm(t, []*node{nodes[0], second})
		d, err := second.o.ClaimOwn(ctx)
		if err != nil || d.Node != nodes[1].h.ID() {
			t.Fatalf("second claim of 127.1.1.0/24: %v (the twin %v; writer %v, epoch %d, own %v), %v; want node 1 keeping it", d.Node, d.Node == second.h.ID(), d.Writer == second.h.ID(), d.Epoch, d.Own, err)
		}

		// A claim from outside the subnet is refused.
		forged := newMsg(pb.Message_DELEGATE)
		target := netip.MustParseAddr("127.3.50.1")
		sid := tree.ID()
		forged.Delegate = &pb.Delegate{Snapshot: sid[:], Addr: target.AsSlice(), Own: true}
		_, err = nodes[2].o.askCoordinator(ctx, nodes[2].o.coord.rangeShard(tree.SmallestNonUnary(target)), forged, pb.Message_DELEGATION)
		if !errors.Is(err, ErrForbidden) {
			t.Fatalf("forged own claim: %v, want ErrForbidden", err)
		}

		// Inter-node RTTs: a node knows its own from the peerstore and others'
		// from their announcements.
		eventually(t, 30*time.Second, func() error {
			o := nodes[0].o
			if _, ok := o.Between(nodes[0].h.ID(), nodes[1].h.ID()); !ok {
				return errors.New("no RTT to a connected peer")
			}
			for _, a := range nodes[1:] {
				for _, b := range nodes[1:] {
					if a != b {
						if _, ok := o.Between(a.h.ID(), b.h.ID()); ok {
							return nil
						}
					}
				}
			}
			return errors.New("no announced RTT between two other peers")
		})
		// Announcements carry the subnet counts.
		eventually(t, 30*time.Second, func() error {
			for _, pi := range nodes[0].o.Peers() {
				if pi.ID == nodes[3].h.ID() && pi.Subnets >= 1 {
					return nil
				}
			}
			return errors.New("node 3's subnet count not announced")
		})
	})
}

// TestBlockIndexAndReassign: decisions reach the block shard above their
// shards with their probe results; only a subnet's coordinator indexes it
// and only a plausible coordinator moves a subnet of another shard.
func TestBlockIndexAndReassign(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		const n = 10
		nodes := make([]*node, n)
		dels := make([]*probingDelegator, n)
		for i := range n {
			dels[i] = &probingDelegator{}
			nodes[i] = r.node(i, WithDelegator(dels[i]))
		}
		joinSwarm(t, nodes)
		ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
		defer cancel()
		tree := mustTree(t)

		// One decision in each of the four /16 shards, asked by nodes 1-4.
		var subnets []subnet.Range
		for k := range 4 {
			a := netip.MustParseAddr(fmt.Sprintf("127.%d.100.1", k))
			asker := nodes[k+1]
			d, err := asker.o.Delegate(ctx, "http://"+a.String()+"/", a)
			if err != nil || d.Node != asker.h.ID() {
				t.Fatalf("delegate %s: %v, %v", a, d.Node, err)
			}
			subnets = append(subnets, d.Subnet)
		}
		slash8, _ := tree.Find(subnet.RangeOf(netip.MustParsePrefix("127.0.0.0/8")))
		near, _ := tree.Find(subnet.RangeOf(netip.MustParsePrefix("127.2.0.0/16")))
		eventually(t, 30*time.Second, func() error {
			ixs, err := nodes[7].o.Block(ctx, slash8, near)
			if err != nil {
				return err
			}
			for _, r := range subnets {
				i := slices.IndexFunc(ixs, func(ix IndexedDelegation) bool { return ix.Subnet == r })
				if i < 0 {
					return fmt.Errorf("block 127/8 misses %s", r)
				}
				if len(ixs[i].Probes) != 1 || ixs[i].Probes[0].Peer != ixs[i].Node || ixs[i].Probes[0].RTT != 10*time.Millisecond {
					return fmt.Errorf("%s indexed with probes %+v", r, ixs[i].Probes)
				}
			}
			// Nearest to 127.2/16 first.
			if ixs[0].Subnet != subnets[2] {
				return fmt.Errorf("first entry %s, want %s", ixs[0].Subnet, subnets[2])
			}
			return nil
		})

		// A block update from a node that did not write the record is refused.
		sr, _, ok, err := func() (*pb.SignedRecord, Delegation, bool, error) {
			id, _ := tree.Find(subnets[0])
			coord := nodes[0].o.Coordinator(ctx, id)
			for _, nd := range nodes {
				if nd.h.ID() == coord {
					sh, err := nd.o.coord.shard(nd.o.coord.rangeShard(id))
					if err != nil {
						return nil, Delegation{}, false, err
					}
					return nd.o.coord.lookup(sh, subnets[0])
				}
			}
			return nil, Delegation{}, false, errors.New("coordinator not in the swarm")
		}()
		if err != nil || !ok {
			t.Fatalf("reading the record of %s: %v %v", subnets[0], ok, err)
		}
		upd := newMsg(pb.Message_BLOCK_UPDATE)
		sid := tree.ID()
		upd.BlockUpdate = &pb.BlockUpdate{Snapshot: sid[:], Block: rangeToPB(tree.Range(slash8)), Record: sr}
		forger := nodes[9]
		if w, _ := openRecord(tree.ID(), sr); peer.ID(w.GetWriter()) == forger.h.ID() {
			forger = nodes[8]
		}
		if _, err := forger.o.askCoordinator(ctx, forger.o.coord.blockShard(slash8), upd, pb.Message_OK); !errors.Is(err, ErrForbidden) {
			t.Fatalf("forged block update: %v, want ErrForbidden", err)
		}

		// Reassign subnet 0 (node 1's) to node 6, on behalf of a decision in
		// another shard (subnet 1's), by that shard's coordinator.
		tID, _ := tree.Find(subnets[0])
		cause, _ := tree.Find(subnets[1])
		var coord, outsider *node
		key := nodes[0].o.coord.rangeShard(cause).key(tree.ID())
		closest := nodes[0].o.coord.closestPeers(ctx, key, true)
		// The outsider is the node farthest from the shard's key by XOR
		// distance, not one merely absent from node 0's list: the
		// receiving coordinator ranks a peer by its own view, and one it
		// has not met if it is nearer than its sixth (coordinator.ranked).
		ids := make([]peer.ID, len(nodes))
		for i, nd := range nodes {
			ids[i] = nd.h.ID()
		}
		byDistance := kb.SortClosestPeers(ids, kb.ConvertKey(string(key[:])))
		for _, nd := range nodes {
			if nd.h.ID() == closest[0] {
				coord = nd
			}
			if nd.h.ID() == byDistance[len(byDistance)-1] {
				outsider = nd
			}
		}
		if coord == nil || outsider == nil {
			t.Fatalf("no coordinator or outsider among %d closest peers", len(closest))
		}
		if _, err := outsider.o.reassign(ctx, tID, nodes[1].h.ID(), nodes[6].h.ID(), cause); !errors.Is(err, ErrForbidden) {
			t.Fatalf("reassign by an outsider: %v, want ErrForbidden", err)
		}
		if _, err := coord.o.reassign(ctx, tID, nodes[2].h.ID(), nodes[6].h.ID(), cause); !errors.Is(err, ErrNotFound) {
			t.Fatalf("reassign naming the wrong node: %v, want ErrNotFound", err)
		}
		d, err := coord.o.reassign(ctx, tID, nodes[1].h.ID(), nodes[6].h.ID(), cause)
		if err != nil || d.Node != nodes[6].h.ID() {
			t.Fatalf("reassign: %v, %v", d.Node, err)
		}
		nodes[5].o.Invalidate(subnets[0])
		if got, ok, err := nodes[5].o.Resolve(ctx, subnets[0].Start.Next()); err != nil || !ok || got.Node != nodes[6].h.ID() {
			t.Fatalf("after the move %s resolves to %v (%v, %v)", subnets[0], got.Node, ok, err)
		}
		// The new node is told; the old one learns at its next heartbeat.
		eventually(t, 30*time.Second, func() error {
			if !slices.ContainsFunc(nodes[6].o.Owned(), func(d Delegation) bool { return d.Subnet == subnets[0] }) {
				return errors.New("node 6 not told of its new subnet")
			}
			if slices.ContainsFunc(nodes[1].o.Owned(), func(d Delegation) bool { return d.Subnet == subnets[0] }) {
				return errors.New("node 1 still believes it holds the moved subnet")
			}
			return nil
		})
	})
}

// fixedSchedule opens at a fixed time.
type fixedSchedule struct{ open time.Time }

func (s fixedSchedule) NextOpen(t time.Time) time.Time {
	if t.Before(s.open) {
		return s.open
	}
	return t
}

func TestProbeWindows(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		const wait = 1500 * time.Millisecond
		a := r.node(0)
		soon := r.node(1, ProbeWindows(fixedSchedule{time.Now().Add(wait)}, 5*time.Second))
		late := r.node(2, ProbeWindows(fixedSchedule{time.Now().Add(time.Hour)}, 5*time.Second))
		for _, b := range []*node{soon, late} {
			if err := a.h.Connect(t.Context(), peer.AddrInfo{ID: b.h.ID(), Addrs: b.h.Addrs()}); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		rtt, err := a.o.Probe(t.Context(), soon.h.ID(), "http://127.0.0.9/")
		if err != nil || rtt != 10*time.Millisecond {
			t.Fatalf("probe waiting for the window: %v, %v", rtt, err)
		}
		if took := time.Since(start); took < wait/2 {
			t.Errorf("probe answered after %v, before the window opened", took)
		}
		if _, err := a.o.Probe(t.Context(), late.h.ID(), "http://127.0.0.9/"); !errors.Is(err, ErrUnavailable) {
			t.Errorf("probe far outside the window: %v, want ErrUnavailable", err)
		}
		if _, err := New(a.h, mustTree(t), memDB(t), WithDelegator(&requesterDelegator{}), ProbeWindows(fixedSchedule{}, time.Hour)); err == nil {
			t.Error("a probe wait beyond the probe deadline was accepted")
		}
	})
}

// TestRedelegate: a re-delegation asks the procedure again with fresh
// probes, unless the decision is recent.
func TestRedelegate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		interval time.Duration
		runs     int
	}{{"re-decided with fresh probes", 0, 2}, {"too soon: unchanged", time.Hour, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			simulate(t, func(t *testing.T, r *rig) {
				del := &probingDelegator{}
				a := r.node(0, WithDelegator(del), RedelegateInterval(tc.interval))
				b := r.node(1, WithDelegator(&probingDelegator{}), RedelegateInterval(tc.interval))
				joinSwarm(t, []*node{a, b})
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				// Both nodes' coordinators are candidates: ask from each node
				// and count the runs of whichever decided.
				target := netip.MustParseAddr("127.1.77.7")
				d, err := a.o.Delegate(ctx, "http://127.1.77.7/", target)
				if err != nil || d.Node != a.h.ID() {
					t.Fatalf("delegate: %v, %v", d.Node, err)
				}
				if _, err := b.o.Recalibrate(ctx, target, ""); !errors.Is(err, ErrNotFound) {
					t.Fatalf("recalibrating another node's subnet: %v, want ErrNotFound", err)
				}
				before := time.Now()
				d2, err := a.o.Recalibrate(ctx, target, "")
				if err != nil || d2.Node != a.h.ID() {
					t.Fatalf("recalibrate: %v, %v", d2.Node, err)
				}
				var reqs []DelegateRequest
				for _, nd := range []*probingDelegator{del, b.o.cfg.delegator.(*probingDelegator)} {
					reqs = append(reqs, nd.requests()...)
				}
				if len(reqs) != tc.runs {
					t.Fatalf("procedure ran %d times, want %d", len(reqs), tc.runs)
				}
				if tc.runs == 2 {
					r := reqs[1]
					if r.Reason != "calibration" || r.Fresh.Before(before) || r.Addr != target || r.From != a.h.ID() {
						t.Errorf("re-delegation request %+v", r)
					}
					if d2.Seq == d.Seq && d2.Epoch == d.Epoch {
						t.Error("no new decision recorded")
					}
				} else if d2.Seq != d.Seq || d2.Epoch != d.Epoch {
					t.Error("a recent decision was replaced")
				}
			})
		})
	}
}

// TestWonRTT: the node a subnet is delegated to learns the probe it won it
// with, whether its coordinator is another node (the ASSIGN carries it) or
// itself: b's identity is drawn so that each of the two coordinates some of
// the four shards.
func TestWonRTT(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		tree := mustTree(t)
		a := r.node(0, WithDelegator(&probingDelegator{}))
		targets := []netip.Addr{netip.MustParseAddr("127.0.77.7"), netip.MustParseAddr("127.1.77.7"),
			netip.MustParseAddr("127.2.77.7"), netip.MustParseAddr("127.3.77.7")}
		var sk crypto.PrivKey
		for range 100 {
			k, _, err := crypto.GenerateEd25519Key(nil)
			if err != nil {
				t.Fatal(err)
			}
			id, _ := peer.IDFromPrivateKey(k)
			closer := 0
			for _, x := range targets {
				key := a.o.coord.rangeShard(tree.SmallestNonUnary(x)).key(tree.ID())
				if kb.Closer(id, a.h.ID(), string(key[:])) {
					closer++
				}
			}
			if closer > 0 && closer < len(targets) {
				sk = k
				break
			}
		}
		if sk == nil {
			t.Fatal("no identity splits the shards")
		}
		b := r.nodeWith(nodeAddr(1), sk, nil, WithDelegator(&probingDelegator{}))
		joinSwarm(t, []*node{a, b})
		writers := map[peer.ID]bool{}
		for _, target := range targets {
			d, err := a.o.Delegate(t.Context(), "http://"+target.String()+"/", target)
			if err != nil || d.Node != a.h.ID() {
				t.Fatalf("delegate %s: %v, %v", target, d.Node, err)
			}
			writers[d.Writer] = true
			rg := tree.Range(tree.SmallestNonUnary(target))
			eventually(t, 10*time.Second, func() error {
				if rtt, ok := a.o.WonRTT(rg); !ok || rtt != 10*time.Millisecond {
					return fmt.Errorf("won %s (decided by %s) with %v, %v; want the 10 ms probe", rg, d.Writer, rtt, ok)
				}
				return nil
			})
		}
		if !writers[a.h.ID()] || !writers[b.h.ID()] {
			t.Errorf("decided by %v only; want both the node itself and the other", writers)
		}
	})
}

// preferDelegator chooses the first node of prefer that the request does
// not exclude, counting its runs.
type preferDelegator struct {
	mu     sync.Mutex
	prefer []peer.ID
	runs   int
}

func (d *preferDelegator) Delegate(_ context.Context, req DelegateRequest, _ DelegationEnv) (peer.ID, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.runs++
	for _, p := range d.prefer {
		if !slices.Contains(req.Exclude, p) {
			return p, nil
		}
	}
	return "", ErrNoCandidate
}

// TestDecisionSkipsUnreachableWinner: a node chosen on its stored probes
// after it left without a word is not given the subnet; the procedure
// runs again without it. When nobody chosen can be reached, the decision
// fails rather than give the subnet to a departed node.
func TestDecisionSkipsUnreachableWinner(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		del := &preferDelegator{}
		nodes := make([]*node, 4)
		for i := range nodes {
			nodes[i] = r.node(i, WithDelegator(del))
		}
		joinSwarm(t, nodes)
		gone, live := nodes[3], nodes[2]
		r.net.Cut(gone.addr)
		gone.stop()
		time.Sleep(time.Minute) // the connections to it time out
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()

		del.mu.Lock()
		del.prefer = []peer.ID{gone.h.ID(), live.h.ID()}
		del.mu.Unlock()
		site := netip.MustParseAddr("127.1.77.7")
		d, err := nodes[0].o.Delegate(ctx, "http://127.1.77.7/", site)
		if err != nil || d.Node != live.h.ID() {
			t.Fatalf("delegate: %v, %v; want the live node %v", d.Node, err, live.h.ID())
		}
		if del.runs != 2 {
			t.Errorf("the procedure ran %d times, want 2 (the second without the departed node)", del.runs)
		}

		del.mu.Lock()
		del.prefer, del.runs = []peer.ID{gone.h.ID()}, 0
		del.mu.Unlock()
		other := netip.MustParseAddr("127.2.77.7")
		if d, err := nodes[1].o.Delegate(ctx, "http://127.2.77.7/", other); !errors.Is(err, ErrNoCandidate) {
			t.Fatalf("delegate with only the departed node chosen: %v, %v; want ErrNoCandidate", d.Node, err)
		}
	})
}
