package overlay

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

func newKey(t testing.TB) (crypto.PrivKey, peer.ID) {
	t.Helper()
	sk, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(sk)
	return sk, id
}

func delegationRecord(tree *subnet.Tree, r subnet.Range, node peer.ID) *pb.Record {
	sid := tree.ID()
	return &pb.Record{Kind: pb.Record_DELEGATION, Snapshot: sid[:], Subnet: rangeToPB(r), Node: []byte(node), Epoch: 1, Seq: 1, Org: "arin:org-1"}
}

func marshalSigned(t testing.TB, sr *pb.SignedRecord) []byte {
	b, err := proto.Marshal(sr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRecordValidator(t *testing.T) {
	tree := mustTree(t)
	sk, _ := newKey(t)
	_, other := newKey(t)
	rsa, _, err := crypto.GenerateRSAKeyPair(2048, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := subnet.RangeOf(netip.MustParsePrefix("127.1.5.0/24"))
	v := NewRecordValidators(tree)
	dv, ov := v[DelegationNamespace], v[OrgNamespace]
	key := DelegationKey(tree.ID(), r)

	sign := func(rec *pb.Record, k crypto.PrivKey) []byte {
		sr, err := signRecord(k, rec)
		if err != nil {
			t.Fatal(err)
		}
		return marshalSigned(t, sr)
	}
	good := sign(delegationRecord(tree, r, other), sk)

	tampered := func() []byte {
		var sr pb.SignedRecord
		_ = proto.Unmarshal(good, &sr)
		var rec pb.Record
		_ = proto.Unmarshal(sr.Record, &rec)
		rec.Node = []byte(mustID(t))
		sr.Record, _ = proto.Marshal(&rec)
		return marshalSigned(t, &sr)
	}()
	unsigned := func() []byte {
		var sr pb.SignedRecord
		_ = proto.Unmarshal(good, &sr)
		sr.Signature = nil
		return marshalSigned(t, &sr)
	}()
	otherSnap := func() []byte {
		rec := delegationRecord(tree, r, other)
		rec.Snapshot = make([]byte, 32)
		return sign(rec, sk)
	}()
	notInTree := func() []byte {
		rr := subnet.RangeOf(netip.MustParsePrefix("10.0.0.0/8"))
		return sign(delegationRecord(tree, rr, other), sk)
	}()
	wrongVersion := func() []byte {
		sr, _ := signRecord(sk, delegationRecord(tree, r, other))
		var rec pb.Record
		_ = proto.Unmarshal(sr.Record, &rec)
		rec.Version = 2
		b, _ := proto.Marshal(&rec)
		sig, _ := sk.Sign(append([]byte(recordSigPrefix), b...))
		return marshalSigned(t, &pb.SignedRecord{Record: b, Signature: sig})
	}()
	org := &pb.Record{Kind: pb.Record_ORG_INDEX, Snapshot: func() []byte { s := tree.ID(); return s[:] }(), Org: "arin:org-1",
		OrgEntries: []*pb.OrgEntry{{Subnet: rangeToPB(r), Node: []byte(other)}}}
	orgGood := sign(org, sk)

	tests := []struct {
		name  string
		v     RecordValidator
		key   string
		value []byte
		ok    bool
	}{
		{"delegation", dv, key, good, true},
		{"wrong key", dv, DelegationKey(tree.ID(), subnet.RangeOf(netip.MustParsePrefix("127.1.6.0/24"))), good, false},
		{"tampered", dv, key, tampered, false},
		{"unsigned", dv, key, unsigned, false},
		{"garbage", dv, key, []byte("not a record"), false},
		{"empty", dv, key, nil, false},
		{"other snapshot", dv, key, otherSnap, false},
		{"range not in tree", dv, DelegationKey(tree.ID(), subnet.RangeOf(netip.MustParsePrefix("10.0.0.0/8"))), notInTree, false},
		{"wrong version", dv, key, wrongVersion, false},
		{"key not embedded in id (RSA)", dv, key, sign(delegationRecord(tree, r, other), rsa), false},
		{"org in delegation namespace", dv, OrgKey(tree.ID(), "arin:org-1"), orgGood, false},
		{"org index", ov, OrgKey(tree.ID(), "arin:org-1"), orgGood, true},
		{"unknown org", ov, OrgKey(tree.ID(), "arin:nobody"), sign(&pb.Record{Kind: pb.Record_ORG_INDEX, Snapshot: org.Snapshot, Org: "arin:nobody"}, sk), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.v.Validate(tt.key, tt.value)
			if (err == nil) != tt.ok {
				t.Fatalf("Validate = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrBadRecord) {
				t.Fatalf("error %v does not wrap ErrBadRecord", err)
			}
		})
	}

	// Select prefers the higher epoch, then the higher sequence number,
	// and skips invalid values.
	rec2 := delegationRecord(tree, r, other)
	rec2.Epoch, rec2.Seq = 2, 1
	newerV := sign(rec2, sk)
	rec3 := delegationRecord(tree, r, other)
	rec3.Epoch, rec3.Seq = 1, 9
	i, err := dv.Select(key, [][]byte{good, tampered, newerV, sign(rec3, sk)})
	if err != nil || i != 2 {
		t.Fatalf("Select = %d, %v; want 2", i, err)
	}
	if _, err := dv.Select(key, [][]byte{tampered}); err == nil {
		t.Fatal("Select accepted only invalid values")
	}
}

func mustID(t testing.TB) peer.ID {
	_, id := newKey(t)
	return id
}

func FuzzRecordValidator(f *testing.F) {
	tree := mustTree(f)
	sk, other := newKey(f)
	r := subnet.RangeOf(netip.MustParsePrefix("127.1.5.0/24"))
	sr, _ := signRecord(sk, delegationRecord(tree, r, other))
	f.Add(DelegationKey(tree.ID(), r), marshalSigned(f, sr))
	f.Add("/micra-delegation/x", []byte{0x0a, 0x02, 0x08, 0x01})
	osr, _ := signRecord(sk, orgRecord(tree, "arin:org-1", 1, 1, other, "127.1.5.0/24", "127.1.9.0/24"))
	f.Add(OrgKey(tree.ID(), "arin:org-1"), marshalSigned(f, osr))
	v := NewRecordValidators(tree)
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		for _, val := range v {
			if err := val.Validate(key, value); err == nil {
				// Only genuinely signed records may pass: the fuzzer
				// cannot forge signatures, so an accepted value must be
				// the seed itself.
				if key != DelegationKey(tree.ID(), r) && key != OrgKey(tree.ID(), "arin:org-1") {
					t.Fatalf("accepted a record for key %q", key)
				}
			}
			_, _ = val.Select(key, [][]byte{value, value})
		}
	})
}

func TestAnchor(t *testing.T) {
	tree := mustTree(t)
	o := &Overlay{tree: tree}
	c := &coordinator{o: o, tree: tree, cfg: &config{}}
	a := netip.MustParseAddr("127.2.9.77")
	id := tree.SmallestNonUnary(a)
	if got := tree.Range(c.anchorOf(id)); got != subnet.RangeOf(netip.MustParsePrefix("127.2.0.0/16")) {
		t.Fatalf("default anchor of %s = %s, want the /16 allocation", a, got)
	}
	// An address outside every allocation: the ancestor at depth 2 or
	// shallower.
	out := tree.SmallestNonUnary(netip.MustParseAddr("127.200.0.1"))
	if got := c.anchorOf(out); tree.Depth(got) > AllocationDepth {
		t.Fatalf("fallback anchor at depth %d", tree.Depth(got))
	}
	c.cfg.anchorDepth = 1
	if got := tree.Range(c.anchorOf(id)); got != subnet.RangeOf(netip.MustParsePrefix("127.0.0.0/8")) {
		t.Fatalf("anchor at depth 1 = %s", got)
	}
	c.cfg.anchorDepth = 0
	// Every subnet of a shard maps to one key; different shards differ.
	k1 := c.rangeShard(id).key(tree.ID())
	k2 := c.rangeShard(tree.SmallestNonUnary(netip.MustParseAddr("127.2.200.1"))).key(tree.ID())
	k3 := c.rangeShard(tree.SmallestNonUnary(netip.MustParseAddr("127.3.9.77"))).key(tree.ID())
	if k1 != k2 || k1 == k3 {
		t.Fatal("shard keys do not follow anchors")
	}
	if orgShard("arin:org-2").key(tree.ID()) == k1 {
		t.Fatal("org and range shard keys collide")
	}
}

func TestCache(t *testing.T) {
	c := newCache(2, time.Hour)
	r := func(s string) subnet.Range { return subnet.RangeOf(netip.MustParsePrefix(s)) }
	c.put(Delegation{Subnet: r("127.0.1.0/24"), Epoch: 2}, false)
	c.put(Delegation{Subnet: r("127.0.1.0/24"), Epoch: 1}, false) // older: ignored
	if d, ok := c.get(r("127.0.1.0/24")); !ok || d.Epoch != 2 {
		t.Fatalf("get = %v, %v", d, ok)
	}
	c.put(Delegation{Subnet: r("127.0.2.0/24")}, false)
	c.get(r("127.0.1.0/24"))
	c.put(Delegation{Subnet: r("127.0.3.0/24")}, false) // evicts 127.0.2.0/24, the least recently used
	if _, ok := c.get(r("127.0.2.0/24")); ok {
		t.Fatal("least recently used entry kept")
	}
	c.invalidate(r("127.0.1.0/24"))
	if _, ok := c.get(r("127.0.1.0/24")); ok {
		t.Fatal("invalidated entry kept")
	}
	// Invalidating a range drops the parts cached inside it, not others.
	pc := newCache(8, time.Hour)
	pc.put(Delegation{Subnet: r("127.0.1.0/24")}, false)
	pc.put(Delegation{Subnet: r("127.0.1.128/25"), Node: "far"}, true)
	pc.put(Delegation{Subnet: r("127.0.1.224/27"), Node: "farther"}, true)
	pc.put(Delegation{Subnet: r("127.0.2.128/25"), Node: "other"}, true)
	a := netip.MustParseAddr("127.0.1.230")
	if d, ok := pc.holding(r("127.0.1.0/24"), a); !ok || d.Node != "farther" {
		t.Fatalf("holding %v = %v, %v; want the /27", a, d.Node, ok)
	}
	pc.invalidate(r("127.0.1.0/24"))
	if d, ok := pc.holding(r("127.0.1.0/24"), a); ok {
		t.Fatalf("after invalidating the range, %v still resolves from the cache to %s", a, d.Subnet)
	}
	if _, ok := pc.get(r("127.0.2.128/25")); !ok || pc.parts != 1 {
		t.Fatalf("a part of another range was dropped (%d parts left)", pc.parts)
	}
	short := newCache(4, time.Nanosecond)
	short.put(Delegation{Subnet: r("127.0.1.0/24")}, false)
	time.Sleep(time.Millisecond)
	if _, ok := short.get(r("127.0.1.0/24")); ok {
		t.Fatal("expired entry returned")
	}
}
