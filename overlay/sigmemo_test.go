package overlay

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/micra-net/micra/overlay/pb"
)

// TestSigMemo: a record verified once is taken from the memo, and nothing
// but the same record with the same signature is: another signature, a
// changed record, or the same bytes split otherwise between record and
// signature are verified, and fail.
func TestSigMemo(t *testing.T) {
	tree := mustTree(t)
	sk, _ := newKey(t)
	_, other := newKey(t)
	r := tree.Range(tree.SmallestNonUnary(netip.MustParseAddr("127.1.2.3")))
	sr, err := signRecord(sk, delegationRecord(tree, r, other))
	if err != nil {
		t.Fatal(err)
	}
	k := sigKey(sr.GetRecord(), sr.GetSignature())
	if _, err := openRecord(tree.ID(), sr); err != nil {
		t.Fatal(err)
	}
	if !verifiedSigs.seen(k) {
		t.Fatal("a verified record is not in the memo")
	}
	if _, err := openRecord(tree.ID(), sr); err != nil {
		t.Fatalf("a record in the memo: %v", err)
	}
	sig := bytes.Clone(sr.GetSignature())
	sig[0] ^= 1
	rec := bytes.Clone(sr.GetRecord())
	rec[len(rec)-1] ^= 1
	n := len(sr.GetRecord())
	for _, c := range []struct {
		name     string
		rec, sig []byte
	}{
		{"another signature", sr.GetRecord(), sig},
		{"a changed record", rec, sr.GetSignature()},
		{"the bytes split otherwise", sr.GetRecord()[:n-1], append([]byte{sr.GetRecord()[n-1]}, sr.GetSignature()...)},
	} {
		if _, err := openRecord(tree.ID(), &pb.SignedRecord{Record: c.rec, Signature: c.sig}); err == nil {
			t.Errorf("%s: verified", c.name)
		}
	}
	// The memo keeps two generations of maxSigMemo/2: the first key
	// survives one turn and is gone after two.
	var m sigMemo
	m.add(k)
	for i := range maxSigMemo {
		m.add(sigKey([]byte{byte(i), byte(i >> 8), byte(i >> 16)}, nil))
		if i == maxSigMemo/2-2 && !m.seen(k) {
			t.Fatal("the first key dropped within its generation")
		}
	}
	if m.seen(k) {
		t.Error("the first key kept after two generations")
	}
	if len(m.cur)+len(m.prev) > maxSigMemo {
		t.Errorf("%d keys kept, want at most %d", len(m.cur)+len(m.prev), maxSigMemo)
	}
}
