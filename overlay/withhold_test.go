package overlay

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/internal/cooldown"
	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

// TestWithholdingJudged (withholding): a notice that a node left
// a crawl request unanswered is noted; the same notice after the grace,
// the page fetched by an auditor of another place, takes the subnet back
// ("withheld") and keeps the node out of it in the replicated shard state.
// A page no auditor can fetch (a dead web server) is not held against the
// node. A holder that coordinates the shard recuses itself, and the asker
// takes no answer about a node from that node: its deputy judges.
func TestWithholdingJudged(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		const n = 6
		const grace = 30 * time.Second
		deadWeb := RefetcherFunc(func(ctx context.Context, url string) (Page, error) {
			if strings.Contains(url, "dead.test") {
				return Page{}, errors.New("connection refused")
			}
			pg, err := honestRefetcher(ctx, url)
			pg.NoIndex = strings.Contains(url, "noindex.test")
			return pg, err
		})
		nodes := make([]*node, n)
		for i := range n {
			nodes[i] = r.node(i, append(auditOpts(deadWeb), Withholding(WithholdConfig{Grace: grace, Exclusion: time.Hour}))...)
		}
		ids := make([]peer.ID, n)
		for i, nd := range nodes {
			ids[i] = nd.h.ID()
		}
		index := func(p peer.ID) int { return slices.Index(ids, p) }
		tree := mustTree(t)
		a := netip.AddrFrom4([4]byte{127, 2, 200, 7}) // withheld, taken back
		b := netip.AddrFrom4([4]byte{127, 2, 201, 7}) // a dead site
		c := netip.AddrFrom4([4]byte{127, 2, 202, 7}) // held by the shard's coordinator
		e := netip.AddrFrom4([4]byte{127, 2, 203, 7}) // a page that asks not to be indexed
		ids3 := []netip.Addr{a, b, c, e}
		for i := range ids3 {
			for j := range i {
				if tree.SmallestNonUnary(ids3[i]) == tree.SmallestNonUnary(ids3[j]) {
					t.Fatalf("%v and %v share a subnet", ids3[i], ids3[j])
				}
			}
		}
		ref := nodes[0].o.coord.rangeShard(tree.SmallestNonUnary(a))
		if ref.key(tree.ID()) != nodes[0].o.coord.rangeShard(tree.SmallestNonUnary(c)).key(tree.ID()) {
			t.Fatal("a and c are in different shards")
		}
		key := ref.key(tree.ID())
		order := kb.SortClosestPeers(slices.Clone(ids), kb.ConvertKey(string(key[:])))
		coord, dep, holder, asker := nodes[index(order[0])], nodes[index(order[1])], nodes[index(order[3])], nodes[index(order[n-1])]

		// The coordinator, as holder of c, lies about itself: every
		// notice about it is "not the holder".
		honest := coord.o.handlers[AuditID][pb.Message_WITHHELD]
		coord.o.handlers[AuditID][pb.Message_WITHHELD] = func(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
			if string(req.GetWithheld().GetHolder()) == string(coord.h.ID()) {
				m := newMsg(pb.Message_WITHHELD_VERDICT)
				m.WithheldVerdict = &pb.WithheldVerdict{Result: pb.WithheldVerdict_NOT_HOLDER, Holder: []byte(coord.h.ID())}
				return m, nil
			}
			return honest(ctx, from, req)
		}
		joinSwarm(t, nodes)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		for _, own := range []struct {
			nd *node
			a  netip.Addr
		}{{holder, a}, {holder, b}, {coord, c}, {holder, e}} {
			if d, err := own.nd.o.Delegate(ctx, "http://"+own.a.String()+"/", own.a); err != nil || d.Node != own.nd.h.ID() {
				t.Fatalf("delegating %v: %+v, %v", own.a, d, err)
			}
		}
		notice := func(addr netip.Addr, url string, h *node) (WithheldVerdict, error) {
			return asker.o.Withheld(ctx, signedNotice(t, addr, url, h, time.Now().Add(-time.Hour)))
		}
		start := time.Now()

		// Noted, then judged after the grace: taken back.
		urlA := "http://" + a.String() + "/page"
		v, err := notice(a, urlA, holder)
		if err != nil || v.Result != WithheldNoted || v.Retry <= 0 || v.Retry > grace+time.Second || v.Coordinator != coord.h.ID() || v.Deputy {
			t.Fatalf("first notice: %+v, %v", v, err)
		}
		time.Sleep(grace / 2)
		if v, err = notice(a, urlA, holder); err != nil || v.Result != WithheldNoted || v.Retry > grace/2+time.Second {
			t.Fatalf("a notice within the grace: %+v, %v", v, err)
		}
		time.Sleep(v.Retry)
		if v, err = notice(a, urlA, holder); err != nil || v.Result != WithheldTakenBack {
			t.Fatalf("a notice after the grace: %+v, %v", v, err)
		}
		took := time.Since(start)
		if got := coord.o.Stats().TakenBack["withheld"]; got != 1 {
			t.Errorf("taken back for withholding: %d, want 1", got)
		}
		asker.o.Invalidate(tree.Range(tree.SmallestNonUnary(a)))
		d, ok, err := asker.o.Resolve(ctx, a)
		if err != nil || !ok || d.Node == holder.h.ID() || d.Orphaned {
			t.Fatalf("the subnet after it was taken back: %+v, %v, %v", d, ok, err)
		}
		if v, err = notice(a, urlA, holder); err != nil || v.Result != WithheldNotHolder {
			t.Errorf("a notice about the old holder: %+v, %v", v, err)
		}
		// The exclusion is in the shard's state at the coordinator and its
		// replicas, and load balancing cannot hand the subnet back.
		ra := tree.Range(tree.SmallestNonUnary(a))
		if ex := coord.o.coord.withheldFrom(mustShard(t, coord, ref), ra, time.Now()); !slices.Equal(ex, []peer.ID{holder.h.ID()}) {
			t.Errorf("kept out of the subnet at the coordinator: %v", ex)
		}
		eventually(t, 10*time.Second, func() error {
			var got []peer.ID
			_ = dep.o.coord.st.scan(key, pb.Entry_WITHHELD, func(e *pb.Entry) bool {
				var we pb.WithheldEntry
				if proto.Unmarshal(e.GetValue(), &we) == nil {
					got = append(got, peer.ID(we.GetPeer()))
				}
				return true
			})
			if !slices.Equal(got, []peer.ID{holder.h.ID()}) {
				return fmt.Errorf("the replica's exclusions: %v", got)
			}
			return nil
		})
		if _, err := coord.o.coord.reassign(ctx, mustShard(t, coord, ref), tree.SmallestNonUnary(a), d.Node, holder.h.ID()); !errors.Is(err, ErrForbidden) {
			t.Errorf("reassigning the subnet to the node that withheld it: %v", err)
		}

		// A dead web server is not blamed on the volunteer, nor a page
		// that asks not to be indexed (the crawler makes no record of it).
		for _, tc := range []struct {
			addr netip.Addr
			url  string
		}{{b, "http://dead.test/x"}, {e, "http://noindex.test/x"}} {
			if v, err = notice(tc.addr, tc.url, holder); err != nil || v.Result != WithheldNoted {
				t.Fatalf("notice of %s: %+v, %v", tc.url, v, err)
			}
			time.Sleep(v.Retry)
			if v, err = notice(tc.addr, tc.url, holder); err != nil || v.Result != WithheldUnconfirmed {
				t.Fatalf("notice of %s after the grace: %+v, %v", tc.url, v, err)
			}
			if d, ok, err := coord.o.Resolve(ctx, tc.addr); err != nil || !ok || d.Node != holder.h.ID() {
				t.Errorf("the subnet of %s: %+v, %v, %v", tc.url, d, ok, err)
			}
		}
		if got := coord.o.Stats().TakenBack["withheld"]; got != 1 {
			t.Errorf("taken back for withholding after the dead site and the noindex page: %d, want 1", got)
		}

		// The holder coordinates the shard: its deputy judges, whatever
		// it answers. An honest one recuses itself.
		urlC := "http://" + c.String() + "/page"
		eventually(t, 30*time.Second, func() error {
			v, err = notice(c, urlC, coord)
			if err != nil || v.Result != WithheldNoted {
				return fmt.Errorf("notice about the coordinator: %+v, %v", v, err)
			}
			return nil
		})
		if !v.Deputy || v.Coordinator != dep.h.ID() {
			t.Fatalf("notice about the coordinator judged by %s (deputy %v), want its deputy %s", v.Coordinator, v.Deputy, dep.h.ID())
		}
		time.Sleep(v.Retry)
		if v, err = notice(c, urlC, coord); err != nil || v.Result != WithheldConfirmed || v.Coordinator != dep.h.ID() {
			t.Fatalf("notice about the coordinator after the grace: %+v, %v", v, err)
		}
		m := newMsg(pb.Message_WITHHELD)
		m.Withheld = withheldPB(t, coord, c, urlC, coord)
		if _, err := honest(ctx, asker.h.ID(), m); !errors.Is(err, ErrRecused) {
			t.Errorf("an honest coordinator's notice about itself: %v, want recused", err)
		}
		// A node cannot accuse itself, nor name a node that is no peer id.
		m.Withheld.Holder = []byte(asker.h.ID())
		if _, err := honest(ctx, asker.h.ID(), m); !errors.Is(err, ErrForbidden) {
			t.Errorf("a notice about the sender: %v", err)
		}
		m.Withheld.Holder = []byte("nope")
		if _, err := honest(ctx, asker.h.ID(), m); !errors.Is(err, ErrMalformed) {
			t.Errorf("a notice naming no peer: %v", err)
		}
		t.Logf("taken back %v after the first notice (grace %v); the nodes of the dead site and the noindex page kept them; the coordinator's deputy %s confirmed",
			took.Round(time.Second), grace, dep.h.ID())
	})
}

func mustShard(t *testing.T, nd *node, ref shardRef) *shard {
	t.Helper()
	sh, err := nd.o.coord.shard(ref)
	if err != nil {
		t.Fatal(err)
	}
	return sh
}

// TestWithheldNoteSurvivesTakeover (withholding): the grace of a
// withholding notice runs from its first noting, also when the coordinator
// that noted it is gone by the second notice: the replica taking the shard
// over finds the note in the shard's state and judges at once rather than
// noting it afresh.
func TestWithheldNoteSurvivesTakeover(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		const grace = 30 * time.Second
		a := netip.AddrFrom4([4]byte{127, 2, 200, 7})
		order, _ := withholdSwarm(t, r, grace, a)
		coord, next, holder, asker := order[0], order[1], order[3], order[len(order)-1]
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		if d, err := holder.o.Delegate(ctx, "http://"+a.String()+"/", a); err != nil || d.Node != holder.h.ID() {
			t.Fatalf("delegating %v: %+v, %v", a, d, err)
		}
		u := "http://" + a.String() + "/page"
		notice := func() (WithheldVerdict, error) {
			return asker.o.Withheld(ctx, signedNotice(t, a, u, holder, time.Now().Add(-time.Hour)))
		}
		v, err := notice()
		if err != nil || v.Result != WithheldNoted || v.Coordinator != coord.h.ID() {
			t.Fatalf("first notice: %+v, %v", v, err)
		}
		coord.stop()
		time.Sleep(grace)
		// The next notice reaches the replica now nearest, once it holds
		// the shard; it must not start the grace again.
		eventually(t, 2*time.Minute, func() error {
			v, err = notice()
			return err
		})
		if v.Result != WithheldTakenBack || v.Coordinator != next.h.ID() {
			t.Fatalf("a notice after the grace, the noting coordinator gone: %+v, want taken back by %s", v, next.h.ID())
		}
		if got := next.o.Stats().TakenBack["withheld"]; got != 1 {
			t.Errorf("taken back for withholding by the new coordinator: %d, want 1", got)
		}
	})
}

// TestWithholdingCoordinatorGivesUp (no node judges itself): a
// node that holds a subnet of the shard it coordinates and leaves a crawl
// request unanswered is judged by its deputy; told the deputy's verdict,
// its coordinator code takes the subnet back from itself and keeps itself
// out of it. A confirmation from a peer outside the shard's replica set is
// refused.
func TestWithholdingCoordinatorGivesUp(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		const grace = 30 * time.Second
		a := netip.AddrFrom4([4]byte{127, 2, 202, 7})
		order, ref := withholdSwarm(t, r, grace, a)
		coord, dep, asker := order[0], order[1], order[len(order)-1]
		tree := mustTree(t)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		if d, err := coord.o.Delegate(ctx, "http://"+a.String()+"/", a); err != nil || d.Node != coord.h.ID() {
			t.Fatalf("delegating %v to its shard's coordinator: %+v, %v", a, d, err)
		}
		u := "http://" + a.String() + "/page"

		// A far peer posing as the deputy is refused.
		m := newMsg(pb.Message_WITHHELD)
		m.Withheld = withheldPB(t, coord, a, u, coord)
		m.Withheld.Confirmed = true
		if _, err := coord.o.handleWithheld(ctx, asker.h.ID(), m); !errors.Is(err, ErrForbidden) {
			t.Fatalf("a confirmation from outside the replica set: %v, want forbidden", err)
		}

		notice := func() (WithheldVerdict, error) {
			return asker.o.Withheld(ctx, signedNotice(t, a, u, coord, time.Now().Add(-time.Hour)))
		}
		v, err := notice()
		if err != nil || v.Result != WithheldNoted || !v.Deputy || v.Coordinator != dep.h.ID() {
			t.Fatalf("first notice: %+v, %v; want noted by the deputy %s", v, err, dep.h.ID())
		}
		time.Sleep(v.Retry)
		if v, err = notice(); err != nil || v.Result != WithheldTakenBack || !v.Deputy {
			t.Fatalf("a notice after the grace: %+v, %v; want taken back, through the deputy", v, err)
		}
		if got := coord.o.Stats().TakenBack["withheld"]; got != 1 {
			t.Errorf("taken back for withholding at the coordinator: %d, want 1", got)
		}
		asker.o.Invalidate(tree.Range(tree.SmallestNonUnary(a)))
		d, ok, err := asker.o.Resolve(ctx, a)
		if err != nil || !ok || d.Node == coord.h.ID() || d.Orphaned {
			t.Fatalf("the subnet after its coordinator gave it up: %+v, %v, %v", d, ok, err)
		}
		sh := mustShard(t, coord, ref)
		ra := tree.Range(tree.SmallestNonUnary(a))
		if ex := coord.o.coord.withheldFrom(sh, ra, time.Now()); !slices.Contains(ex, coord.h.ID()) {
			t.Errorf("the coordinator does not keep itself out of the subnet: %v", ex)
		}
		if _, err := coord.o.coord.reassign(ctx, sh, tree.SmallestNonUnary(a), d.Node, coord.h.ID()); !errors.Is(err, ErrForbidden) {
			t.Errorf("reassigning the subnet to the coordinator that gave it up: %v", err)
		}
		if v, err = notice(); err != nil || v.Result != WithheldNotHolder {
			t.Errorf("a notice about the old holder: %+v, %v", v, err)
		}
		// Restarted, it still keeps itself out, until the exclusion ends.
		coord.o.Close()
		o2, err := New(coord.h, tree, coord.db, append(append(swarmOpts(), WithDelegator(coord.del)), append(auditOpts(honestRefetcher),
			Withholding(WithholdConfig{Grace: grace, Exclusion: time.Hour}))...)...)
		if err != nil {
			t.Fatal(err)
		}
		defer o2.Close()
		if !o2.coord.selfWithheld.excluded(ra, time.Now()) {
			t.Error("after a restart, the coordinator no longer keeps itself out of the subnet it gave up")
		}
		if o2.coord.selfWithheld.excluded(ra, time.Now().Add(time.Hour+time.Second)) {
			t.Error("after a restart, the coordinator keeps itself out of the subnet past the exclusion")
		}
	})
}

// withholdSwarm is shardSwarm with honest refetchers and the given
// withholding grace.
func withholdSwarm(t *testing.T, r *rig, grace time.Duration, a netip.Addr) ([]*node, shardRef) {
	t.Helper()
	return shardSwarm(t, r, a, append(auditOpts(honestRefetcher), Withholding(WithholdConfig{Grace: grace, Exclusion: time.Hour}))...)
}

// shardSwarm starts and joins six nodes with opts and returns them nearest
// the key of a's shard first, and that shard.
func shardSwarm(t *testing.T, r *rig, a netip.Addr, opts ...Option) ([]*node, shardRef) {
	t.Helper()
	nodes := make([]*node, 6)
	for i := range nodes {
		nodes[i] = r.node(i, opts...)
	}
	tree := mustTree(t)
	ref := nodes[0].o.coord.rangeShard(tree.SmallestNonUnary(a))
	nodes = nearestFirst(nodes, ref.key(tree.ID()))
	joinSwarm(t, nodes)
	return nodes, ref
}

// TestWithheldPartJudged: a page in a part of a range delegated apart
// (Split) is judged against the part's node, not the range's: the part's
// node is noted, then loses the part after the grace; the page's sites
// fall back to the range's node, and the part's node is kept out of the
// part.
func TestWithheldPartJudged(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		const grace = 30 * time.Second
		site, far := netip.MustParseAddr("127.2.5.10"), netip.MustParseAddr("127.2.5.200")
		pd := &partDelegator{}
		order, ref := shardSwarm(t, r, site, append(auditOpts(honestRefetcher),
			Withholding(WithholdConfig{Grace: grace, Exclusion: time.Hour}), WithDelegator(pd))...)
		coord, holder, withholder, asker := order[0], order[2], order[3], order[5]
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		s := holdRange(ctx, t, holder, site)
		pd.send(withholder.h.ID())
		part := subnet.RangeOf(netip.MustParsePrefix("127.2.5.128/25"))
		if d, err := holder.o.Split(ctx, "http://127.2.5.200/", far, 80*time.Millisecond); err != nil || d.Subnet != part || d.Node != withholder.h.ID() {
			t.Fatalf("split: %s to %v, %v; want %s to the withholder", d.Subnet, d.Node, err, part)
		}
		u := "http://127.2.5.200/page"
		notice := func(h *node) (WithheldVerdict, error) {
			return asker.o.Withheld(ctx, signedNotice(t, far, u, h, time.Now().Add(-time.Hour)))
		}
		if v, err := notice(holder); err != nil || v.Result != WithheldNotHolder {
			t.Fatalf("a notice naming the range's node for a page of the part: %+v, %v; want not the holder", v, err)
		}
		v, err := notice(withholder)
		if err != nil || v.Result != WithheldNoted || v.Coordinator != coord.h.ID() {
			t.Fatalf("first notice: %+v, %v; want noted by %s", v, err, coord.h.ID())
		}
		time.Sleep(v.Retry)
		if v, err = notice(withholder); err != nil || v.Result != WithheldTakenBack {
			t.Fatalf("a notice after the grace: %+v, %v; want taken back", v, err)
		}
		if got := coord.o.Stats().TakenBack["withheld"]; got != 1 {
			t.Errorf("taken back for withholding: %d, want 1", got)
		}
		for _, rg := range []subnet.Range{s, part} {
			asker.o.Invalidate(rg)
		}
		if d, ok, err := asker.o.Resolve(ctx, far); err != nil || !ok || d.Subnet != s || d.Node != holder.h.ID() {
			t.Errorf("the part's page after it was taken back: %s on %v (%v, %v); want the range %s on its node", d.Subnet, d.Node, ok, err, s)
		}
		if ex := coord.o.coord.withheldFrom(mustShard(t, coord, ref), part, time.Now()); !slices.Equal(ex, []peer.ID{withholder.h.ID()}) {
			t.Errorf("kept out of the part: %v", ex)
		}
		if v, err = notice(withholder); err != nil || v.Result != WithheldNotHolder {
			t.Errorf("a notice about the part's old node: %+v, %v", v, err)
		}
	})
}

// signedNotice is a notice about h's crawl request for u, with h's receipt
// of it taken at at.
func signedNotice(t *testing.T, a netip.Addr, u string, h *node, at time.Time) WithheldNotice {
	t.Helper()
	sig, err := SignReceipt(h.h.Peerstore().PrivKey(h.h.ID()), u, at)
	if err != nil {
		t.Fatal(err)
	}
	return WithheldNotice{Addr: a, URL: u, Holder: h.h.ID(), AskedAt: at, Receipt: sig}
}

// withheldPB is signedNotice on the wire, to coord's snapshot, taken an
// hour ago.
func withheldPB(t *testing.T, coord *node, a netip.Addr, u string, h *node) *pb.Withheld {
	n := signedNotice(t, a, u, h, time.Now().Add(-time.Hour))
	return &pb.Withheld{Snapshot: coord.o.sid[:], Addr: addrBytes(a), Url: u, Holder: []byte(h.h.ID()),
		AskedMs: n.AskedAt.UnixMilli(), Receipt: n.Receipt}
}

// TestWithheldNeedsReceipt: a withholding notice is judged only on the
// holder's receipt of the request (a notice is evidence, not a
// peer's word): one without a receipt, with another node's, with the
// receipt of another page or with its time changed is refused and notes
// nothing; and a receipt younger than the grace is not noted yet, so the
// holder has had the request two graces before it is judged.
func TestWithheldNeedsReceipt(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		const grace = 30 * time.Second
		a := netip.AddrFrom4([4]byte{127, 2, 200, 7})
		order, _ := withholdSwarm(t, r, grace, a)
		coord, holder, asker := order[0], order[3], order[len(order)-1]
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		if d, err := holder.o.Delegate(ctx, "http://"+a.String()+"/", a); err != nil || d.Node != holder.h.ID() {
			t.Fatalf("delegating %v: %+v, %v", a, d, err)
		}
		u := "http://" + a.String() + "/page"
		took := time.Now()
		good := withheldPB(t, coord, a, u, holder)
		forged := withheldPB(t, coord, a, u, asker) // the asker's own signature
		forged.Holder = good.Holder
		other := withheldPB(t, coord, a, u+"2", holder) // the receipt of another page
		other.Url = u
		for _, c := range []struct {
			name string
			w    *pb.Withheld
			want error
		}{
			{"no receipt", &pb.Withheld{Snapshot: good.Snapshot, Addr: good.Addr, Url: u, Holder: good.Holder, AskedMs: good.AskedMs}, ErrMalformed},
			{"another node's signature", forged, ErrForbidden},
			{"another page's receipt", other, ErrForbidden},
			{"its time changed", &pb.Withheld{Snapshot: good.Snapshot, Addr: good.Addr, Url: u, Holder: good.Holder, AskedMs: good.AskedMs - 1, Receipt: good.Receipt}, ErrForbidden},
		} {
			m := newMsg(pb.Message_WITHHELD)
			m.Withheld = c.w
			if _, err := asker.o.request(ctx, coord.h.ID(), auditSpec, m, pb.Message_WITHHELD_VERDICT); !errors.Is(err, c.want) {
				t.Errorf("%s: %v, want %v", c.name, err, c.want)
			}
		}
		if n := coord.o.Stats().WithheldNotices; n != 0 {
			t.Errorf("%d notices counted after the refused ones, want 0", n)
		}
		// A receipt taken now: not noted until it is a grace old.
		fresh := signedNotice(t, a, u, holder, time.Now())
		v, err := asker.o.Withheld(ctx, fresh)
		if err != nil || v.Result != WithheldNoted || v.Retry < grace-time.Second || v.Retry > grace+time.Second {
			t.Fatalf("a notice with a receipt just taken: %+v, %v; want noted, again after the grace", v, err)
		}
		time.Sleep(v.Retry)
		if v, err = asker.o.Withheld(ctx, fresh); err != nil || v.Result != WithheldNoted || v.Retry < grace-time.Second {
			t.Fatalf("the notice a grace after the receipt: %+v, %v; want noted now, its grace to run", v, err)
		}
		time.Sleep(v.Retry)
		if v, err = asker.o.Withheld(ctx, fresh); err != nil || v.Result != WithheldTakenBack {
			t.Fatalf("the notice two graces after the receipt: %+v, %v; want taken back", v, err)
		}
		t.Logf("taken back %v after the receipt (grace %v)", time.Since(took).Round(time.Second), grace)
	})
}

// TestRefusedJudged: a node that will not take a crawl request
// leaves no receipt; a refused notice has the coordinator send it the
// request itself. Taken: TAKEN, with the holder's receipt, and a refusal
// noted before is over. Refused: noted at once, and judged after the
// grace when the holder refuses again: taken back ("refused"). A refused
// notice with a receipt is malformed.
func TestRefusedJudged(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		const grace = 30 * time.Second
		a := netip.AddrFrom4([4]byte{127, 2, 200, 7})
		var mu sync.Mutex
		takes := map[peer.ID]bool{}
		keys := map[peer.ID]crypto.PrivKey{}
		asked := 0
		ask := AskCrawl(func(ctx context.Context, p peer.ID, link string) ([]byte, time.Time) {
			mu.Lock()
			defer mu.Unlock()
			asked++
			if !takes[p] {
				return nil, time.Time{}
			}
			at := time.Now().Truncate(time.Millisecond)
			sig, err := SignReceipt(keys[p], link, at)
			if err != nil {
				t.Error(err)
			}
			return sig, at
		})
		order, _ := shardSwarm(t, r, a, append(auditOpts(honestRefetcher), ask,
			Withholding(WithholdConfig{Grace: grace, Exclusion: time.Hour}))...)
		coord, holder, asker := order[0], order[3], order[len(order)-1]
		for _, nd := range order {
			keys[nd.h.ID()] = nd.h.Peerstore().PrivKey(nd.h.ID())
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		if d, err := holder.o.Delegate(ctx, "http://"+a.String()+"/", a); err != nil || d.Node != holder.h.ID() {
			t.Fatalf("delegating %v: %+v, %v", a, d, err)
		}
		// The coordinator judges the holder's subnet, the asker does not.
		if !holder.o.Judges(ctx, a, coord.h.ID()) || holder.o.Judges(ctx, a, asker.h.ID()) {
			t.Errorf("judges of the subnet: the coordinator %v, the asker %v", holder.o.Judges(ctx, a, coord.h.ID()), holder.o.Judges(ctx, a, asker.h.ID()))
		}
		u := "http://" + a.String() + "/page"
		refusedNotice := WithheldNotice{Addr: a, URL: u, Holder: holder.h.ID(), AskedAt: time.Now(), Refused: true}
		setTakes := func(b bool) {
			mu.Lock()
			takes[holder.h.ID()] = b
			mu.Unlock()
		}

		// Refused to the asker, refused to the coordinator: noted at once.
		v, err := asker.o.Withheld(ctx, refusedNotice)
		if err != nil || v.Result != WithheldNoted || v.Retry <= 0 || v.Retry > grace+time.Second {
			t.Fatalf("first refused notice: %+v, %v; want noted for the grace", v, err)
		}
		// A refusal does not make the host busy: another of its pages is
		// asked at once.
		second := refusedNotice
		second.URL = "http://" + a.String() + "/second"
		if v2, err := asker.o.Withheld(ctx, second); err != nil || v2.Result != WithheldNoted || v2.Retry < grace-time.Second {
			t.Fatalf("a second page of a host the holder refused: %+v, %v; want asked and noted", v2, err)
		}
		// The holder takes it from the coordinator: TAKEN, its receipt
		// verified, and the refusal noted is over.
		time.Sleep(v.Retry)
		setTakes(true)
		if v, err = asker.o.Withheld(ctx, refusedNotice); err != nil || v.Result != WithheldTaken ||
			VerifyReceipt(holder.h.ID(), u, v.ReceiptAt, v.Receipt) != nil {
			t.Fatalf("a refused notice the holder then took: %+v, %v; want taken with its receipt", v, err)
		}
		setTakes(false)
		askedNow := func() int {
			mu.Lock()
			defer mu.Unlock()
			return asked
		}
		// Another page of the host within the grace: the holder took one
		// from the coordinator, and is not asked for another until the
		// grace is over; nothing is noted. A page of another host is.
		other := refusedNotice
		other.URL = "http://" + a.String() + "/other"
		busy, err := asker.o.Withheld(ctx, other)
		if err != nil || busy.Result != WithheldNoted || busy.Retry < grace-time.Second || busy.Retry > grace+time.Second || askedNow() != 3 {
			t.Fatalf("another page of a host the holder took a request of: %+v, %v, asked %d times; want to come back after the grace, not asked",
				busy, err, askedNow())
		}
		named := refusedNotice
		named.URL = "http://named.test/page"
		if v, err = asker.o.Withheld(ctx, named); err != nil || v.Result != WithheldNoted || askedNow() != 4 {
			t.Fatalf("a page of another host: %+v, %v, asked %d times; want asked and noted", v, err, askedNow())
		}
		time.Sleep(busy.Retry)
		if v, err = asker.o.Withheld(ctx, refusedNotice); err != nil || v.Result != WithheldNoted || v.Retry < grace-time.Second || askedNow() != 5 {
			t.Fatalf("refused again after taking it, past the grace: %+v, %v; want asked and noted afresh", v, err)
		}
		// Refused again after the grace: taken back.
		time.Sleep(v.Retry)
		if v, err = asker.o.Withheld(ctx, refusedNotice); err != nil || v.Result != WithheldTakenBack {
			t.Fatalf("refused after the grace: %+v, %v; want taken back", v, err)
		}
		if got := coord.o.Stats().TakenBack; got["refused"] != 1 || got["withheld"] != 0 {
			t.Errorf("taken back by reason: %v, want 1 refused", got)
		}
		asker.o.Invalidate(holder.o.tree.Range(holder.o.tree.SmallestNonUnary(a)))
		if d, ok, err := asker.o.Resolve(ctx, a); err != nil || !ok || d.Node == holder.h.ID() {
			t.Errorf("the subnet after it was taken back: %+v, %v, %v", d, ok, err)
		}
		if n := askedNow(); n != 6 {
			t.Errorf("the holder was asked %d times, want once per notice but the one within the grace (6)", n)
		}

		// A refused notice has no receipt.
		with := signedNotice(t, a, u, holder, time.Now().Add(-time.Hour))
		with.Refused = true
		if _, err := asker.o.Withheld(ctx, with); !errors.Is(err, ErrMalformed) {
			t.Errorf("a refused notice with a receipt: %v, want malformed", err)
		}
		m := newMsg(pb.Message_WITHHELD)
		m.Withheld = withheldPB(t, coord, a, u, holder)
		m.Withheld.Refused = true
		if _, err := asker.o.request(ctx, coord.h.ID(), auditSpec, m, pb.Message_WITHHELD_VERDICT); !errors.Is(err, ErrMalformed) {
			t.Errorf("a refused notice with a receipt, on the wire: %v, want malformed", err)
		}
	})
}

// TestHostAsksBounded: a coordinator asks a node for one page of a host
// per grace; a full table asks nobody (a refusal's judging waits) until
// its entries are older than the grace, and a forgotten ask frees its
// entry.
func TestHostAsksBounded(t *testing.T) {
	h := cooldown.New[string](maxHostAsks)
	t0 := time.Unix(1_000_000, 0)
	const grace = time.Minute
	if _, ok := h.Use("n\x00h", t0, grace); !ok {
		t.Fatal("the first ask refused")
	}
	if left, ok := h.Use("n\x00h", t0.Add(time.Second), grace); ok || left != grace-time.Second {
		t.Errorf("a second ask within the grace: %v, %v; want none for the rest", left, ok)
	}
	for i := 1; i < maxHostAsks; i++ {
		if _, ok := h.Use(fmt.Sprint("n\x00h", i), t0, grace); !ok {
			t.Fatalf("ask %d refused", i)
		}
	}
	if left, ok := h.Use("n\x00full", t0.Add(time.Second), grace); ok || left != grace {
		t.Errorf("an ask with the table full: %v, %v; want none for a grace", left, ok)
	}
	h.Forget("n\x00h1")
	if _, ok := h.Use("n\x00full", t0.Add(time.Second), grace); !ok {
		t.Error("an ask after a release refused")
	}
	if _, ok := h.Use("n\x00later", t0.Add(grace), grace); !ok {
		t.Error("an ask once the others are a grace old refused")
	}
}
