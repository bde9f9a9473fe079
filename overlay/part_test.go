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

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

// partDelegator gives a range to the node that asked and a part to `to`
// (after having it probe the part, so that the part's won RTT is stored),
// or to the holder when `to` is unset; it records every request.
type partDelegator struct {
	mu   sync.Mutex
	to   peer.ID
	reqs []DelegateRequest
}

func (d *partDelegator) Delegate(ctx context.Context, req DelegateRequest, env DelegationEnv) (peer.ID, error) {
	d.mu.Lock()
	d.reqs = append(d.reqs, req)
	to := d.to
	d.mu.Unlock()
	if !req.IsPart() {
		return req.From, nil
	}
	if to == "" {
		return req.Holder, nil
	}
	if _, err := env.Probe(ctx, to, "http://"+req.Addr.String()+"/", req.Part); err != nil {
		return "", err
	}
	return to, nil
}

func (d *partDelegator) send(to peer.ID) {
	d.mu.Lock()
	d.to = to
	d.mu.Unlock()
}

func (d *partDelegator) requests() []DelegateRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.reqs)
}

func (d *partDelegator) last() DelegateRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.reqs[len(d.reqs)-1]
}

// partSwarm starts n nodes sharing one partDelegator and joins them.
func partSwarm(t *testing.T, r *rig, n int) (*partDelegator, []*node) {
	t.Helper()
	pd := &partDelegator{}
	nodes := make([]*node, n)
	for i := range nodes {
		nodes[i] = r.nodeWith(nodeAddr(i), nil, nil, WithDelegator(pd))
	}
	joinSwarm(t, nodes)
	return pd, nodes
}

// holdRange has holder delegated the smallest non-unary range of site and
// returns it.
func holdRange(ctx context.Context, t *testing.T, holder *node, site netip.Addr) subnet.Range {
	t.Helper()
	s := mustTree(t).Range(mustTree(t).SmallestNonUnary(site))
	if d, err := holder.o.Delegate(ctx, "http://"+site.String()+"/", site); err != nil || d.Node != holder.h.ID() || d.Subnet != s {
		t.Fatalf("range delegation: %v %s, %v", d.Node, d.Subnet, err)
	}
	return s
}

func ownsRange(nd *node, r subnet.Range) (Delegation, bool) {
	for _, d := range nd.o.Owned() {
		if d.Subnet == r {
			return d, true
		}
	}
	return Delegation{}, false
}

// TestSplit: the holder of a range has the part holding a far server
// searched apart; the part is recorded in the range's shard, resolved by
// address as the most specific delegation, held and heartbeated by its
// node, split again by that node, and orphaned with its node, after which
// its sites fall back to the range's delegation. Only the holder may
// split, and the address a delegation was decided for splits nothing.
func TestSplit(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		pd, nodes := partSwarm(t, r, 5)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		tree := mustTree(t)
		holder, asker, far := nodes[1], nodes[0], nodes[3]
		site := netip.MustParseAddr("127.2.5.10")
		s := holdRange(ctx, t, holder, site)

		farSite := netip.MustParseAddr("127.2.5.200")
		if _, err := nodes[2].o.Split(ctx, "http://127.2.5.200/", farSite, 80*time.Millisecond); !errors.Is(err, ErrForbidden) {
			t.Fatalf("split by a node that does not hold the range: %v, want ErrForbidden", err)
		}
		if d, err := holder.o.Split(ctx, "http://127.2.5.10/", site, 80*time.Millisecond); err != nil || d.Subnet != s {
			t.Fatalf("split at the address the range was decided for: %s, %v; want the range itself", d.Subnet, err)
		}

		pd.send(far.h.ID())
		part := subnet.RangeOf(netip.MustParsePrefix("127.2.5.128/25")) // holds .200, not .10
		d, err := holder.o.Split(ctx, "http://127.2.5.200/", farSite, 80*time.Millisecond)
		if err != nil || d.Subnet != part || d.Node != far.h.ID() || d.Addr != farSite {
			t.Fatalf("split: %s to %v for %v, %v; want %s to node 3 for %v", d.Subnet, d.Node, d.Addr, err, part, farSite)
		}
		req := pd.last()
		if !req.IsPart() || req.Part != part || req.Holder != holder.h.ID() || req.Observed != 80*time.Millisecond || req.Subnet != tree.SmallestNonUnary(site) {
			t.Fatalf("the delegator was asked %+v", req)
		}
		// A second split of the same part is not searched again.
		n := len(pd.requests())
		if _, err := holder.o.Split(ctx, "http://127.2.5.201/", netip.MustParseAddr("127.2.5.201"), 80*time.Millisecond); !errors.Is(err, ErrForbidden) {
			t.Fatalf("split of a part another node holds: %v, want ErrForbidden", err)
		}
		if len(pd.requests()) != n {
			t.Fatal("a refused split ran the delegation procedure")
		}

		// Resolution by address gives the most specific delegation, from
		// any node; the holder knows the part at once.
		inner := subnet.RangeOf(netip.MustParsePrefix("127.2.5.128/26")) // split below: holds .130, not .200
		resolves := func(nd *node, a netip.Addr, want Delegation) error {
			for _, r := range []subnet.Range{s, part, inner} {
				nd.o.Invalidate(r)
			}
			got, ok, err := nd.o.Resolve(ctx, a)
			if err != nil || !ok || got.Subnet != want.Subnet || got.Node != want.Node {
				return fmt.Errorf("%s resolves %v to %s on %v (%v, %v); want %s on %v", nd.addr, a, got.Subnet, got.Node, ok, err, want.Subnet, want.Node)
			}
			return nil
		}
		for _, c := range []struct {
			a    netip.Addr
			want Delegation
		}{{farSite, Delegation{Subnet: part, Node: far.h.ID()}}, {site, Delegation{Subnet: s, Node: holder.h.ID()}}} {
			if err := resolves(asker, c.a, c.want); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := nodes[4].o.Delegate(ctx, "http://127.2.5.250/", netip.MustParseAddr("127.2.5.250")); err != nil || got.Subnet != part || got.Node != far.h.ID() {
			t.Fatalf("Delegate of an address in the part: %s on %v, %v", got.Subnet, got.Node, err)
		}
		if got, ok := holder.o.Cached(farSite); !ok || got.Node != far.h.ID() {
			t.Fatalf("the holder's Cached(%v): %v %v", farSite, got.Node, ok)
		}
		if got, ok := holder.o.Cached(site); !ok || got.Node != holder.h.ID() {
			t.Fatalf("the holder's Cached(%v): %v %v", site, got.Node, ok)
		}

		// The part's node holds it, knows the probe it won it with, and
		// keeps it through its heartbeats.
		eventually(t, 20*time.Second, func() error {
			if _, ok := ownsRange(far, part); !ok {
				return fmt.Errorf("node 3 does not hold %s", part)
			}
			return nil
		})
		if rtt, ok := far.o.WonRTT(part); !ok || rtt != 10*time.Millisecond {
			t.Fatalf("node 3 won %s with %v (%v); want its 10 ms probe", part, rtt, ok)
		}
		time.Sleep(4 * swarmLiveness)
		if _, ok := ownsRange(far, part); !ok {
			t.Fatalf("node 3 lost %s to its heartbeats", part)
		}
		if got, ok := far.o.Cached(netip.MustParseAddr("127.2.5.222")); !ok || got.Subnet != part || got.Node != far.h.ID() {
			t.Fatalf("node 3's Cached in its part: %s %v %v", got.Subnet, got.Node, ok)
		}

		// The part's node splits it again; the part of the part stays
		// with it when nobody is nearer, won with its own observation.
		pd.send("")
		d, err = far.o.Split(ctx, "http://127.2.5.130/", netip.MustParseAddr("127.2.5.130"), 60*time.Millisecond)
		if err != nil || d.Subnet != inner || d.Node != far.h.ID() {
			t.Fatalf("split of a part: %s to %v, %v; want %s kept", d.Subnet, d.Node, err, inner)
		}
		if rtt, ok := far.o.WonRTT(inner); !ok || rtt != 60*time.Millisecond {
			t.Fatalf("node 3 won %s with %v (%v); want its 60 ms observation", inner, rtt, ok)
		}
		if err := resolves(asker, netip.MustParseAddr("127.2.5.131"), Delegation{Subnet: inner, Node: far.h.ID()}); err != nil {
			t.Fatal(err)
		}

		// The part's node leaves: its parts are orphaned, not decided
		// again, and their sites fall back to the range's holder.
		far.stop()
		eventually(t, 6*swarmLiveness, func() error {
			return errors.Join(resolves(asker, farSite, Delegation{Subnet: s, Node: holder.h.ID()}),
				resolves(asker, netip.MustParseAddr("127.2.5.131"), Delegation{Subnet: s, Node: holder.h.ID()}))
		})
		if slices.ContainsFunc(pd.requests()[n:], func(r DelegateRequest) bool { return r.Reason == "orphaned" }) {
			t.Fatal("an orphaned part was decided again")
		}
	})
}

// TestSplitConvicted: a node convicted by audits gets no part, neither
// as the one the search picks nor as a holder asking for a split.
func TestSplitConvicted(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		pd, nodes := partSwarm(t, r, 4)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		tree := mustTree(t)
		holder, other := nodes[1], nodes[3]
		site := netip.MustParseAddr("127.2.5.10")
		holdRange(ctx, t, holder, site)
		id := tree.SmallestNonUnary(site)
		convict := func(p peer.ID) {
			coord := holder.o.Coordinator(ctx, id)
			for _, nd := range nodes {
				if nd.h.ID() != coord {
					continue
				}
				c := nd.o.coord
				sh, err := c.ensureOwner(ctx, c.rangeShard(id))
				if err != nil {
					t.Fatal(err)
				}
				v, _ := proto.Marshal(&pb.AuditEntry{Peer: []byte(p), ConvictedMs: time.Now().UnixMilli()})
				if _, err := c.write(ctx, sh, 1, func(int, uint64, uint64) (*pb.Entry, error) {
					return &pb.Entry{Kind: pb.Entry_AUDIT, Key: []byte(p), Value: v}, nil
				}); err != nil {
					t.Fatal(err)
				}
				c.convictions.invalidate()
				return
			}
			t.Fatalf("coordinator %s is no test node", coord)
		}

		// The search picks a convicted node: no part.
		convict(other.h.ID())
		pd.send(other.h.ID())
		far := netip.MustParseAddr("127.2.5.200")
		if _, err := holder.o.Split(ctx, "http://127.2.5.200/", far, 80*time.Millisecond); !errors.Is(err, ErrNoCandidate) {
			t.Fatalf("a part for a convicted node: %v, want ErrNoCandidate", err)
		}
		// The holder is convicted: it may not split (its range is being
		// taken from it, after which it holds nothing to split).
		convict(holder.h.ID())
		pd.send("")
		if d, err := holder.o.Split(ctx, "http://127.2.5.200/", far, 80*time.Millisecond); !errors.Is(err, ErrForbidden) && !errors.Is(err, ErrNotFound) {
			t.Fatalf("a split by a convicted holder: %s to %v, %v; want ErrForbidden or ErrNotFound", d.Subnet, d.Node, err)
		}
		for _, nd := range nodes {
			for _, d := range nd.o.Owned() {
				if d.Subnet != tree.Range(id) && tree.Range(id).ContainsRange(d.Subnet) {
					t.Errorf("%s holds part %s", nd.addr, d.Subnet)
				}
			}
		}
	})
}
