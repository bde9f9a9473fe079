package overlay

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/overlay/pb"
)

// testEvidence is the test's stand-in for a signed result batch: a node's
// signature over one URL and fingerprint.
//
//	len(id) u8 | id | len(url) u16 | url | fingerprint u64 | signature
func testEvidence(t testing.TB, sk crypto.PrivKey, url string, fp uint64) []byte {
	t.Helper()
	id, err := peer.IDFromPrivateKey(sk)
	if err != nil {
		t.Fatal(err)
	}
	b := append([]byte{byte(len(id))}, id...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(url)))
	b = append(b, url...)
	b = binary.BigEndian.AppendUint64(b, fp)
	sig, err := sk.Sign(b)
	if err != nil {
		t.Fatal(err)
	}
	return append(b, sig...)
}

// openTestEvidence verifies testEvidence.
func openTestEvidence(ev []byte, url string) (Claim, error) {
	bad := func(what string) (Claim, error) { return Claim{}, fmt.Errorf("%w: %s", ErrBadEvidence, what) }
	if len(ev) < 1 {
		return bad("empty")
	}
	n := int(ev[0])
	if len(ev) < 1+n+2 {
		return bad("short")
	}
	id, err := peer.IDFromBytes(ev[1 : 1+n])
	if err != nil {
		return bad("id")
	}
	ul := int(binary.BigEndian.Uint16(ev[1+n:]))
	end := 1 + n + 2 + ul + 8
	if len(ev) < end {
		return bad("short")
	}
	u := string(ev[1+n+2 : 1+n+2+ul])
	fp := binary.BigEndian.Uint64(ev[end-8:])
	pub, err := id.ExtractPublicKey()
	if err != nil {
		return bad("key")
	}
	if ok, err := pub.Verify(ev[:end], ev[end:]); err != nil || !ok {
		return bad("signature")
	}
	if u != url {
		return bad("no record of " + url)
	}
	return Claim{Node: id, URL: u, Status: 200, Fingerprint: fp, Time: time.Now()}, nil
}

// truth is the fingerprint every honest fetch of url finds.
func truth(url string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(url))
	return h.Sum64() | 1
}

// TestAudits: a coordinator verifies audit evidence, has other nodes refetch
// the page and convicts, after confirmed disagreements on several hosts, a
// node whose records were fabricated — re-delegating its subnets, refusing
// its own-subnet claims and telling every later auditor — while one lying
// auditor cannot convict an honest node, and forged, misdirected or
// stale evidence is refused or not counted.
func TestAudits(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		const n = 6
		const fabricator, honest, liar, asker = 1, 2, 5, 0
		var refetches [n]atomic.Int64
		nodes := make([]*node, n)
		for i := range n {
			ref := RefetcherFunc(func(ctx context.Context, url string) (Page, error) {
				refetches[i].Add(1)
				fp := truth(url)
				if i == liar {
					fp = ^fp // this auditor lies about every page
				}
				if strings.Contains(url, "gone") {
					return Page{URL: url, FinalURL: url, Status: 404, At: time.Now()}, nil
				}
				return Page{URL: url, FinalURL: url, Status: 200, Fingerprint: fp ^ 0b101, At: time.Now()}, nil // 2 bits of page churn
			})
			nodes[i] = r.node(i, WithRefetcher(ref), WithEvidenceOpener(EvidenceOpenerFunc(openTestEvidence)),
				Audits(AuditConfig{MinDisagreements: 2, MinHosts: 2, Ratio: 0.5}))
		}
		joinSwarm(t, nodes)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		sk := func(i int) crypto.PrivKey { return nodes[i].h.Peerstore().PrivKey(nodes[i].h.ID()) }

		// The fabricator and the honest node each hold four subnets, spread
		// over the four /16 shards; the requester delegation gives each
		// subnet to the node that asks.
		addr := func(owner, k int) netip.Addr { return netip.AddrFrom4([4]byte{127, byte(k), byte(100 + owner), 7}) }
		for _, owner := range []int{fabricator, honest} {
			for k := range 4 {
				a := addr(owner, k)
				d, err := nodes[owner].o.Delegate(ctx, "http://"+a.String()+"/", a)
				if err != nil || d.Node != nodes[owner].h.ID() {
					t.Fatalf("delegating %v to node %d: %+v, %v", a, owner, d, err)
				}
			}
		}
		audit := func(owner, k int, url string, fp uint64) (AuditVerdict, error) {
			return nodes[asker].o.Audit(ctx, AuditRequest{Addr: addr(owner, k), URL: url, Evidence: testEvidence(t, sk(owner), url, fp)})
		}

		// The honest node's records agree, whichever auditors are asked;
		// where the liar is asked first, a second auditor contradicts it and
		// the audit is not counted.
		counts := map[AuditResult]int{}
		for j := range 24 {
			url := fmt.Sprintf("http://site-%d.test/page-%d", j%6, j)
			v, err := audit(honest, j%4, url, truth(url))
			if err != nil {
				t.Fatalf("audit of an honest record: %v", err)
			}
			counts[v.Result]++
			if v.Result == AuditDisagree || v.Convicted || v.Node != nodes[honest].h.ID() {
				t.Fatalf("honest record %s: %+v", url, v)
			}
			if v.Result == AuditAgree && len(v.Pages) == 0 {
				t.Fatalf("agreement without a refetch: %+v", v)
			}
			for _, p := range v.Pages {
				if p.Peer == nodes[honest].h.ID() {
					t.Fatalf("the audited node audited itself: %+v", v)
				}
			}
		}
		if counts[AuditAgree] < 12 {
			t.Fatalf("honest audits: %v", counts)
		}
		t.Logf("honest node, 24 audits: %v", counts)

		// A page gone since says nothing.
		if v, err := audit(honest, 0, "http://site-0.test/gone", 77); err != nil || v.Result != AuditInconclusive {
			t.Errorf("audit of a page gone since: %+v, %v", v, err)
		}

		// Refused: evidence signed by someone else, evidence about another
		// URL, a record without a fingerprint; not counted: a record of a
		// subnet not delegated to its author.
		url := "http://site-9.test/"
		forged := testEvidence(t, sk(honest), url, 5)
		forged[len(forged)-1] ^= 0xff
		if _, err := nodes[asker].o.Audit(ctx, AuditRequest{Addr: addr(honest, 0), URL: url, Evidence: forged}); !errors.Is(err, ErrBadEvidence) {
			t.Errorf("forged evidence: %v", err)
		}
		if _, err := nodes[asker].o.Audit(ctx, AuditRequest{Addr: addr(honest, 0), URL: url + "x", Evidence: testEvidence(t, sk(honest), url, 5)}); !errors.Is(err, ErrBadEvidence) {
			t.Errorf("evidence about another URL: %v", err)
		}
		if _, err := audit(honest, 0, url, 0); !errors.Is(err, ErrMalformed) {
			t.Errorf("a record without a fingerprint: %v", err)
		}
		if v, err := audit(honest, 0, url, truth(url)); err != nil {
			t.Errorf("control: %v", err)
		} else if v2, err := nodes[asker].o.Audit(ctx, AuditRequest{Addr: addr(fabricator, 0), URL: url, Evidence: testEvidence(t, sk(honest), url, truth(url))}); err != nil || v2.Result != AuditNotDelegated {
			t.Errorf("a record of another node's subnet: %+v, %v (control %v)", v2, err, v.Result)
		}

		// The fabricator's records disagree with everyone's fetches: two
		// confirmed disagreements on two hosts convict it at that shard's
		// coordinator; one record sent twice counts once.
		replay, err := audit(fabricator, 1, "http://fab-0.test/", truth("http://fab-0.test/")^0xffffffff)
		if err != nil || replay.Result != AuditDisagree || replay.Disagreed != 1 || replay.Convicted {
			t.Fatalf("first fabricated record: %+v, %v", replay, err)
		}
		var last AuditVerdict
		for j := range 2 {
			url := fmt.Sprintf("http://fab-%d.test/", j)
			v, err := audit(fabricator, 1, url, truth(url)^0xffffffff)
			if err != nil {
				t.Fatalf("audit of a fabricated record: %v", err)
			}
			if want := map[int]AuditResult{0: AuditInconclusive, 1: AuditDisagree}[j]; v.Result != want {
				t.Fatalf("fabricated record %s: %+v, want %v (the first one judged already)", url, v, want)
			}
			last = v
		}
		if !last.Convicted || last.Disagreed != 2 {
			t.Fatalf("after two disagreements: %+v", last)
		}
		fab := nodes[fabricator].h.ID()
		var judge *node
		for _, nd := range nodes {
			if nd.h.ID() == last.Coordinator {
				judge = nd
			}
		}
		if judge == nil || judge.o.Stats().Convictions != 1 {
			t.Fatalf("coordinator %s of the verdict not found or did not count the conviction", last.Coordinator)
		}
		if c := judge.o.Convicted(); len(c) != 1 || c[0] != fab {
			t.Fatalf("the coordinator's convicted nodes: %v", c)
		}
		// Its subnets in the shards the judge coordinates go to other nodes;
		// every later audit of it says convicted.
		eventually(t, 30*time.Second, func() error {
			for k := range 4 {
				if judge.o.Coordinator(ctx, judge.o.Tree().SmallestNonUnary(addr(fabricator, k))) != judge.h.ID() {
					continue
				}
				judge.o.Invalidate(judge.o.Tree().Range(judge.o.Tree().SmallestNonUnary(addr(fabricator, k))))
				d, ok, err := judge.o.Resolve(ctx, addr(fabricator, k))
				if err != nil || !ok || d.Node == fab {
					return fmt.Errorf("subnet %d of the fabricator: %+v, %v, %v", k, d, ok, err)
				}
			}
			return nil
		})
		held := 0 // the fabricator's subnets in shards the judge coordinates
		for k := range 4 {
			if judge.o.Coordinator(ctx, judge.o.Tree().SmallestNonUnary(addr(fabricator, k))) == judge.h.ID() {
				held++
			}
		}
		if got := judge.o.Stats().TakenBack["convicted"]; got < int64(held) {
			t.Errorf("the judge counts %d subnets taken back as convicted; it re-delegated %d", got, held)
		}
		v, err := audit(fabricator, 1, "http://fab-9.test/", truth("http://fab-9.test/"))
		if err != nil || !v.Convicted {
			t.Errorf("audit after the conviction: %+v, %v", v, err)
		}

		// Another coordinator, holding one of its subnets, sees one
		// fabricated record of its own shard and, as priors, the two that
		// disagreed at the judge: it judges them itself and convicts too;
		// priors sent again are not counted again.
		other := -1
		for k := range 4 {
			if c := judge.o.Coordinator(ctx, judge.o.Tree().SmallestNonUnary(addr(fabricator, k))); c != judge.h.ID() && c != fab {
				other = k
			}
		}
		if other < 0 {
			t.Logf("the judge or the fabricator coordinates every shard: priors not exercised")
		} else {
			var priors []AuditPrior
			for j := range 2 {
				url := fmt.Sprintf("http://fab-%d.test/", j)
				priors = append(priors, AuditPrior{URL: url, Evidence: testEvidence(t, sk(fabricator), url, truth(url)^0xffffffff)})
			}
			url := "http://fab-other.test/"
			ev := testEvidence(t, sk(fabricator), url, truth(url)^0xffff0000ffff)
			req := AuditRequest{Addr: addr(fabricator, other), URL: url, Evidence: ev, Priors: priors}
			v, err := nodes[asker].o.Audit(ctx, req)
			// Convicted after the main record and the first prior (two
			// disagreements on two hosts).
			if err != nil || v.Coordinator == judge.h.ID() || v.Result != AuditDisagree || !v.Convicted || v.Disagreed != 2 {
				t.Fatalf("audit with priors at another coordinator: %+v, %v", v, err)
			}
			// A forged prior (another node's signature) is ignored.
			req.Priors = []AuditPrior{{URL: "http://fab-7.test/", Evidence: testEvidence(t, sk(honest), "http://fab-7.test/", 1)}}
			if _, err := nodes[asker].o.Audit(ctx, req); err != nil {
				t.Errorf("audit with a forged prior: %v", err)
			}
		}
		// The honest node was never convicted, anywhere.
		for i, nd := range nodes {
			for _, p := range nd.o.Convicted() {
				if p != fab {
					t.Errorf("node %d convicted %s", i, p)
				}
			}
		}
		if refetches[liar].Load() == 0 {
			t.Logf("the lying auditor was never asked (it ranks by URL and peer id)")
		}
	})
}

// TestAuditLimits: audit and refetch requests beyond a peer's budget are
// refused with OVERLOADED; a node without a refetcher or evidence opener
// refuses with UNAVAILABLE.
func TestAuditLimits(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		a := r.node(0, WithEvidenceOpener(EvidenceOpenerFunc(openTestEvidence)),
			Audits(AuditConfig{AuditRate: 0.001, AuditBurst: 2, RefetchRate: 0.001, RefetchBurst: 1}),
			WithRefetcher(RefetcherFunc(func(ctx context.Context, url string) (Page, error) {
				return Page{URL: url, Status: 200, Fingerprint: 1}, nil
			})))
		b := r.node(1)
		joinSwarm(t, []*node{a, b})
		ctx := t.Context()
		if _, err := b.o.refetch(ctx, a.h.ID(), "http://x.test/"); err != nil {
			t.Fatalf("first refetch: %v", err)
		}
		if _, err := b.o.refetch(ctx, a.h.ID(), "http://x.test/"); !errors.Is(err, ErrOverloaded) {
			t.Errorf("refetch beyond the budget: %v", err)
		}
		if _, err := a.o.refetch(ctx, b.h.ID(), "http://x.test/"); !errors.Is(err, ErrUnavailable) {
			t.Errorf("refetch from a node without a refetcher: %v", err)
		}
		// Audits sent straight to a (coordinator or not: the budget is
		// checked first) are served until b's budget of 2 runs out; b does
		// not verify evidence and refuses.
		sk := b.h.Peerstore().PrivKey(b.h.ID())
		auditMsg := func(k int) *pb.Message {
			url := fmt.Sprintf("http://h%d.test/", k)
			m := newMsg(pb.Message_AUDIT)
			m.Audit = &pb.Audit{Snapshot: a.o.sid[:], Addr: []byte{127, byte(k % 4), byte(k), 9}, Url: url, Evidence: testEvidence(t, sk, url, 3)}
			return m
		}
		var overloaded, served int
		for k := range 10 {
			_, err := b.o.request(ctx, a.h.ID(), auditSpec, auditMsg(k), pb.Message_AUDIT_VERDICT)
			switch {
			case errors.Is(err, ErrOverloaded):
				overloaded++
			case err == nil, errors.Is(err, ErrNotCoordinator):
				served++
			default:
				t.Fatalf("audit %d: %v", k, err)
			}
		}
		if served != 2 || overloaded != 8 {
			t.Errorf("10 audits: %d served (budget 2), %d overloaded", served, overloaded)
		}
		if _, err := a.o.request(ctx, b.h.ID(), auditSpec, auditMsg(0), pb.Message_AUDIT_VERDICT); !errors.Is(err, ErrUnavailable) {
			t.Errorf("audit at a node without an evidence opener: %v", err)
		}
	})
}
