package overlay

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/overlay/pb"
)

// honestRefetcher fetches every page as it truly is.
var honestRefetcher = RefetcherFunc(func(ctx context.Context, url string) (Page, error) {
	return Page{URL: url, FinalURL: url, Status: 200, Fingerprint: truth(url), At: time.Now()}, nil
})

// auditOpts are the audit options of these tests: two confirmed
// disagreements on two hosts convict.
func auditOpts(ref Refetcher) []Option {
	return []Option{WithRefetcher(ref), WithEvidenceOpener(EvidenceOpenerFunc(openTestEvidence)),
		Audits(AuditConfig{MinDisagreements: 2, MinHosts: 2, Ratio: 0.5})}
}

// TestAuditSelfCoordinator (no node judges itself): a fabricator
// that coordinates the shard of its subnet, and whose overlay answers
// every audit of itself with "agree, not convicted", is judged by its
// deputy, the next peer nearest the shard key, and convicted there: the
// asker takes no verdict about a node from that node, whether or not it
// names the author, and the deputy's refetches never ask the author. An
// honest coordinator recuses itself from an audit of its own record.
func TestAuditSelfCoordinator(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		const n = 6
		nodes := make([]*node, n)
		for i := range n {
			nodes[i] = r.node(i, auditOpts(honestRefetcher)...)
		}
		ids := make([]peer.ID, n)
		for i, nd := range nodes {
			ids[i] = nd.h.ID()
		}
		index := func(p peer.ID) int { return slices.Index(ids, p) }
		// The fabricator: the coordinator of the first shard, 127.0/16;
		// its deputy the next peer nearest the shard's key.
		a := netip.AddrFrom4([4]byte{127, 0, 200, 7})
		tree := mustTree(t)
		ref := nodes[0].o.coord.rangeShard(tree.SmallestNonUnary(a))
		key := ref.key(tree.ID())
		order := kb.SortClosestPeers(slices.Clone(ids), kb.ConvertKey(string(key[:])))
		fab, dep := nodes[index(order[0])], nodes[index(order[1])]
		asker := nodes[index(order[n-1])]

		// The fabricator's overlay lies about itself: every audit of its
		// records agrees, and it is never convicted.
		var lies atomic.Int64
		honest := fab.o.handlers[AuditID][pb.Message_AUDIT]
		fab.o.handlers[AuditID][pb.Message_AUDIT] = func(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
			c, err := openTestEvidence(req.GetAudit().GetEvidence(), req.GetAudit().GetUrl())
			if (err == nil && c.Node == fab.h.ID()) || len(req.GetAudit().GetConviction()) > 0 {
				lies.Add(1)
				m := newMsg(pb.Message_AUDIT_VERDICT)
				m.AuditVerdict = &pb.AuditVerdict{Result: pb.AuditVerdict_AGREE, Node: []byte(fab.h.ID()), Agreed: 1}
				return m, nil
			}
			return honest(ctx, from, req)
		}
		joinSwarm(t, nodes)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()

		d, err := fab.o.Delegate(ctx, "http://"+a.String()+"/", a)
		if err != nil || d.Node != fab.h.ID() {
			t.Fatalf("delegating %v to the fabricator: %+v, %v", a, d, err)
		}
		if c := asker.o.Coordinator(ctx, tree.SmallestNonUnary(a)); c != fab.h.ID() {
			t.Fatalf("the shard's coordinator is %s, not the fabricator %s", c, fab.h.ID())
		}
		sk := fab.h.Peerstore().PrivKey(fab.h.ID())
		audit := func(url string, named bool) (AuditVerdict, error) {
			req := AuditRequest{Addr: a, URL: url, Evidence: testEvidence(t, sk, url, truth(url)^0xffffffff)}
			if named {
				req.Node = fab.h.ID()
			}
			return asker.o.Audit(ctx, req)
		}

		// The first audit does not name the author: the verdict does, and
		// it comes from the author itself, so the deputy is asked. (The
		// deputy may not hold the replicated delegation yet: not
		// delegated, then, until it does.)
		var v AuditVerdict
		eventually(t, 30*time.Second, func() error {
			v, err = audit("http://fab-a.test/", false)
			if err != nil || v.Result == AuditNotDelegated {
				return fmt.Errorf("first audit: %+v, %v", v, err)
			}
			return nil
		})
		if v.Result != AuditDisagree || !v.Deputy || v.Coordinator != dep.h.ID() || v.Node != fab.h.ID() || v.Convicted {
			t.Fatalf("first fabricated record: %+v, want a disagreement judged by the deputy %s", v, dep.h.ID())
		}
		// The second names it; two disagreements on two hosts convict.
		if v, err = audit("http://fab-b.test/", true); err != nil || v.Result != AuditDisagree || !v.Convicted || v.Coordinator != dep.h.ID() {
			t.Fatalf("second fabricated record: %+v, %v", v, err)
		}
		for _, p := range v.Pages {
			if p.Peer == fab.h.ID() {
				t.Fatalf("the fabricator refetched its own record: %+v", v)
			}
		}
		if lies.Load() < 2 {
			t.Errorf("the fabricator was asked %d times, want each audit first at it", lies.Load())
		}
		if c := dep.o.Convicted(); !slices.Contains(c, fab.h.ID()) {
			t.Errorf("the deputy's convicted nodes: %v", c)
		}
		if v, err = audit("http://fab-c.test/", true); err != nil || !v.Convicted {
			t.Errorf("audit after the conviction: %+v, %v", v, err)
		}

		// An honest coordinator recuses itself; a deputy that is not the
		// next nearest peer redirects.
		msg := func(deputy bool) *pb.Message {
			url := "http://fab-d.test/"
			m := newMsg(pb.Message_AUDIT)
			m.Audit = &pb.Audit{Snapshot: fab.o.sid[:], Addr: addrBytes(a), Url: url,
				Evidence: testEvidence(t, sk, url, truth(url)^0xffffffff), Deputy: deputy}
			return m
		}
		if _, err := honest(ctx, asker.h.ID(), msg(false)); !errors.Is(err, ErrRecused) {
			t.Errorf("an honest coordinator's audit of itself: %v, want recused", err)
		}
		if _, err := asker.o.request(ctx, order[2], auditSpec, msg(true), pb.Message_AUDIT_VERDICT); !errors.Is(err, ErrNotCoordinator) {
			t.Errorf("a deputy's audit at the third nearest peer: %v, want a redirect", err)
		}
	})
}

// TestAuditSelfCoordinatorGivesUp (no node judges itself): a
// fabricator whose crawler alters pages but whose overlay is micra's
// coordinates the shard of its subnet. Its deputy convicts it and tells
// it; it gives its subnet away ("convicted") and leaves itself out of the
// decision. A conviction sent by a peer outside the shard's replica set is
// refused.
func TestAuditSelfCoordinatorGivesUp(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		a := netip.AddrFrom4([4]byte{127, 0, 200, 7})
		order, _ := shardSwarm(t, r, a, auditOpts(honestRefetcher)...)
		fab, dep, asker := order[0], order[1], order[len(order)-1]
		tree := mustTree(t)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		if d, err := fab.o.Delegate(ctx, "http://"+a.String()+"/", a); err != nil || d.Node != fab.h.ID() {
			t.Fatalf("delegating %v to the fabricator: %+v, %v", a, d, err)
		}
		sk := fab.h.Peerstore().PrivKey(fab.h.ID())

		// A peer that is not the shard's replica cannot convict it.
		forged, err := proto.Marshal(&pb.AuditEntry{Peer: []byte(fab.h.ID()), Disagreed: 3, ConvictedMs: time.Now().UnixMilli()})
		if err != nil {
			t.Fatal(err)
		}
		m := newMsg(pb.Message_AUDIT)
		m.Audit = &pb.Audit{Snapshot: fab.o.sid[:], Addr: addrBytes(a), Url: "http://fab-x.test/", Conviction: forged}
		if _, err := asker.o.request(ctx, fab.h.ID(), auditSpec, m, pb.Message_AUDIT_VERDICT); !errors.Is(err, ErrForbidden) {
			t.Fatalf("a conviction from outside the replica set: %v, want forbidden", err)
		}

		audit := func(url string) (AuditVerdict, error) {
			return asker.o.Audit(ctx, AuditRequest{Addr: a, URL: url, Node: fab.h.ID(),
				Evidence: testEvidence(t, sk, url, truth(url)^0xffffffff)})
		}
		eventually(t, 30*time.Second, func() error {
			v, err := audit("http://fab-a.test/")
			if err != nil || v.Result != AuditDisagree || !v.Deputy {
				return fmt.Errorf("first audit: %+v, %v", v, err)
			}
			return nil
		})
		if v, err := audit("http://fab-b.test/"); err != nil || !v.Convicted || v.Coordinator != dep.h.ID() {
			t.Fatalf("second fabricated record: %+v, %v; want convicted by the deputy", v, err)
		}
		eventually(t, 30*time.Second, func() error {
			asker.o.Invalidate(tree.Range(tree.SmallestNonUnary(a)))
			d, ok, err := asker.o.Resolve(ctx, a)
			if err != nil || !ok || d.Orphaned || d.Node == fab.h.ID() {
				return fmt.Errorf("the fabricator's subnet: %+v, %v, %v", d, ok, err)
			}
			return nil
		})
		if got := fab.o.Stats().TakenBack["convicted"]; got != 1 {
			t.Errorf("subnets the fabricator gave up as convicted: %d, want 1", got)
		}
		if !fab.o.coord.convicted()[fab.h.ID()] {
			t.Error("the fabricator does not count itself convicted")
		}
	})
}

// TestAuditPlaces (Sybil limits): auditors from one /24 count as
// one place. Two lying auditors of one /24, ranked first by their stored
// probes, cannot confirm each other's disagreement with an honest node's
// records, and cannot clear a fabricator of their /24 by agreeing with it:
// the honest auditors behind them settle both.
func TestAuditPlaces(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		const n = 6
		a := netip.AddrFrom4([4]byte{127, 1, 200, 7}) // the honest node's subnet
		fa := netip.AddrFrom4([4]byte{127, 1, 201, 7})
		tree := mustTree(t)
		key := shardRef{kind: pb.ShardRef_RANGE, anchor: tree.Range(anchorIn(tree, 0, tree.SmallestNonUnary(a)))}.key(tree.ID())
		// Roles by distance to the shard's key: the coordinator first,
		// then the honest node, the two liars, the asker, the fabricator.
		keys := make([]crypto.PrivKey, n)
		ids := make([]peer.ID, n)
		for i := range keys {
			var err error
			if keys[i], _, err = crypto.GenerateEd25519Key(nil); err != nil {
				t.Fatal(err)
			}
			ids[i], _ = peer.IDFromPrivateKey(keys[i])
		}
		order := kb.SortClosestPeers(slices.Clone(ids), kb.ConvertKey(string(key[:])))
		skOf := func(p peer.ID) crypto.PrivKey { return keys[slices.Index(ids, p)] }
		liarRef := RefetcherFunc(func(ctx context.Context, url string) (Page, error) {
			fp := ^truth(url) // frames the honest node
			if strings.Contains(url, "fab") {
				fp = truth(url) ^ 0xffffffff // clears the fabricator of its /24
			}
			return Page{URL: url, FinalURL: url, Status: 200, Fingerprint: fp, At: time.Now()}, nil
		})
		sybil := func(i byte) netip.Addr { return netip.AddrFrom4([4]byte{127, 3, 50, i}) }
		roles := []struct {
			addr netip.Addr
			ref  Refetcher
		}{
			{nodeAddr(0), honestRefetcher}, {nodeAddr(1), honestRefetcher}, {sybil(1), liarRef}, {sybil(2), liarRef},
			{nodeAddr(2), honestRefetcher}, {sybil(3), honestRefetcher},
		}
		nodes := make([]*node, n)
		for i, ro := range roles {
			nodes[i] = r.nodeWith(ro.addr, skOf(order[i]), nil, auditOpts(ro.ref)...)
		}
		coord, hon, liar1, liar2, asker, fab := nodes[0], nodes[1], nodes[2], nodes[3], nodes[4], nodes[5]
		joinSwarm(t, nodes)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		for _, own := range []struct {
			nd *node
			a  netip.Addr
		}{{hon, a}, {fab, fa}} {
			if d, err := own.nd.o.Delegate(ctx, "http://"+own.a.String()+"/", own.a); err != nil || d.Node != own.nd.h.ID() {
				t.Fatalf("delegating %v: %+v, %v", own.a, d, err)
			}
		}
		// The liars' probes of both subnets are the best the coordinator
		// stores: they are the first auditors asked.
		c := coord.o.coord
		sh, err := c.ensureOwner(ctx, c.rangeShard(tree.SmallestNonUnary(a)))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []netip.Addr{a, fa} {
			for k, l := range []*node{liar1, liar2} {
				rg := tree.Range(tree.SmallestNonUnary(s))
				v, _ := proto.Marshal(&pb.ProbeEntry{Subnet: rangeToPB(rg), Peer: []byte(l.h.ID()), RttMicros: int64(k + 1), AtMs: time.Now().UnixMilli()})
				if _, err := c.write(ctx, sh, 1, func(int, uint64, uint64) (*pb.Entry, error) {
					return &pb.Entry{Kind: pb.Entry_PROBE, Key: append(rangeKey(rg), l.h.ID()...), Value: v}, nil
				}); err != nil {
					t.Fatal(err)
				}
			}
		}
		audit := func(nd *node, at netip.Addr, url string, fp uint64) AuditVerdict {
			t.Helper()
			v, err := asker.o.Audit(ctx, AuditRequest{Addr: at, URL: url, Node: nd.h.ID(),
				Evidence: testEvidence(t, nd.h.Peerstore().PrivKey(nd.h.ID()), url, fp)})
			if err != nil || v.Coordinator != coord.h.ID() {
				t.Fatalf("audit of %s: %+v, %v", url, v, err)
			}
			return v
		}
		for j := range 4 {
			url := fmt.Sprintf("http://site-%d.test/", j)
			v := audit(hon, a, url, truth(url))
			if v.Result != AuditInconclusive || v.Convicted || len(v.Pages) < 3 || v.Pages[0].Peer != liar1.h.ID() || v.Pages[1].Peer != liar2.h.ID() {
				t.Fatalf("honest record %s: %+v, want the second liar not counted and an honest auditor contradicting the first", url, v)
			}
		}
		for j := range 2 {
			url := fmt.Sprintf("http://fab-%d.test/", j)
			v := audit(fab, fa, url, truth(url)^0xffffffff)
			if v.Result != AuditDisagree || slices.ContainsFunc(v.Pages, func(p AuditPage) bool { return p.Peer == liar1.h.ID() || p.Peer == liar2.h.ID() }) {
				t.Fatalf("fabricated record %s: %+v, want a disagreement without its /24's auditors", url, v)
			}
			if j == 1 && !v.Convicted {
				t.Fatalf("the fabricator is not convicted after two disagreements: %+v", v)
			}
		}
		if got := coord.o.Convicted(); !slices.Equal(got, []peer.ID{fab.h.ID()}) {
			t.Errorf("convicted: %v, want only the fabricator", got)
		}
	})
}

// TestPlaceSame: prefixes or ASes in common make one place; unknown
// places are one place among themselves and none with a known one.
func TestPlaceSame(t *testing.T) {
	tree := mustTree(t)
	at := func(addrs ...string) place {
		var p place
		for _, s := range addrs {
			p.addAddr(tree, netip.MustParseAddr(s))
		}
		return p
	}
	for _, c := range []struct {
		name string
		a, b place
		same bool
	}{
		{"one /24", at("192.0.2.1"), at("192.0.2.200"), true},
		{"two /24s", at("192.0.2.1"), at("192.0.3.1"), false},
		{"one /48", at("2001:db8:1::1"), at("2001:db8:1:ff::1"), true},
		{"two /48s", at("2001:db8:1::1"), at("2001:db8:2::1"), false},
		{"a shared address family", at("192.0.3.1", "2001:db8:1::1"), at("2001:db8:1:2::9"), true},
		{"mapped", at("::ffff:192.0.2.1"), at("192.0.2.9"), true},
		{"unknown and unknown", place{}, place{}, true},
		{"unknown and known", place{}, at("192.0.2.1"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.a.same(c.b); got != c.same || c.b.same(c.a) != c.same {
				t.Errorf("same = %v, want %v", got, c.same)
			}
		})
	}
	pl := place{prefixes: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}, asns: []uint32{64500}}
	if !pl.same(place{prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}, asns: []uint32{64500}}) {
		t.Error("one AS in two /24s is not one place")
	}
}
