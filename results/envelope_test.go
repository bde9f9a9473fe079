package results

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/results/pb"
	"github.com/micra-net/micra/results/resultstest"
	"github.com/micra-net/micra/subnet"
)

var testNow = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func sealTest(t testing.TB, sk crypto.PrivKey, seq uint64, b crawl.Batch, partSize int) *sealed {
	t.Helper()
	id, err := peer.IDFromPrivateKey(sk)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := publicKeyField(sk)
	if err != nil {
		t.Fatal(err)
	}
	s, err := seal(sk, pub, batchMeta{node: id, seq: seq, snapshot: subnet.SnapshotID{1, 2, 3}, created: testNow,
		shard: 0, shards: 1, batch: b}, partSize)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func envs(t testing.TB, s *sealed) [][]byte {
	t.Helper()
	e, err := s.envelopes()
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestEnvelopeRoundTrip(t *testing.T) {
	sk := resultstest.Key(t)
	b := resultstest.Batch(t, resultstest.Records(1, 50, testNow))
	for _, tc := range []struct {
		name     string
		partSize int
	}{{"one part", DefaultMessageLimit - messageOverhead}, {"many parts", 1024}} {
		t.Run(tc.name, func(t *testing.T) {
			s := sealTest(t, sk, 7, b, tc.partSize)
			msgs := envs(t, s)
			want := (len(b.Data) + tc.partSize - 1) / tc.partSize
			if len(msgs) != want {
				t.Fatalf("%d messages, want %d", len(msgs), want)
			}
			var data []byte
			for i, m := range msgs {
				p, err := OpenEnvelope(m, DefaultMessageLimit, testNow)
				if err != nil {
					t.Fatalf("part %d: %v", i, err)
				}
				if p.Index != i || p.Header.GetSeq() != 7 || p.Digest != s.digest || p.Parts() != want || !p.Created().Equal(testNow) {
					t.Fatalf("part %d: %+v", i, p)
				}
				data = append(data, p.Data...)
			}
			recs, err := crawl.DecodeBatch(data)
			if err != nil || len(recs) != 50 {
				t.Fatalf("decoded %d records: %v", len(recs), err)
			}
		})
	}
}

func TestEnvelopeRefusals(t *testing.T) {
	sk, other := resultstest.Key(t), resultstest.Key(t)
	b := resultstest.Batch(t, resultstest.Records(1, 20, testNow))
	good := envs(t, sealTest(t, sk, 3, b, 1024))
	otherID, _ := peer.IDFromPrivateKey(other)
	for _, tc := range []struct {
		name string
		msg  []byte
		want error
	}{
		{"tampered data", resultstest.Reenvelope(t, good[0], func(e *pb.Envelope, h *pb.Header) { e.Data[10] ^= 1 }), ErrMalformed},
		{"tampered header", resultstest.Reenvelope(t, good[0], func(e *pb.Envelope, h *pb.Header) {
			h.Records++
			e.Header, _ = proto.Marshal(h)
		}), ErrBadSignature},
		{"claims another node", resultstest.Reenvelope(t, good[0], func(e *pb.Envelope, h *pb.Header) {
			h.Node = []byte(otherID)
			e.Header, _ = proto.Marshal(h)
		}), ErrBadSignature},
		{"signed by another key", resultstest.Reenvelope(t, good[0], func(e *pb.Envelope, h *pb.Header) {
			e.Signature, _ = other.Sign(append([]byte(signPrefix), e.Header...))
		}), ErrBadSignature},
		{"no signature", resultstest.Reenvelope(t, good[0], func(e *pb.Envelope, h *pb.Header) { e.Signature = nil }), ErrBadSignature},
		{"other version", resultstest.Reenvelope(t, good[0], func(e *pb.Envelope, h *pb.Header) { e.Version = 2 }), ErrUnsupportedVersion},
		{"part out of range", resultstest.Reenvelope(t, good[0], func(e *pb.Envelope, h *pb.Header) { e.Part = 99 }), ErrMalformed},
		{"part swapped", resultstest.Reenvelope(t, good[0], func(e *pb.Envelope, h *pb.Header) { e.Part = 1 }), ErrMalformed},
		{"truncated part", resultstest.Reenvelope(t, good[0], func(e *pb.Envelope, h *pb.Header) { e.Data = e.Data[:100] }), ErrMalformed},
		{"future", envs(t, func() *sealed {
			id, _ := peer.IDFromPrivateKey(sk)
			s, _ := seal(sk, nil, batchMeta{node: id, seq: 1, created: testNow.Add(time.Hour), shards: 1, batch: b}, 1<<20)
			return s
		}())[0], ErrMalformed},
		{"too large", append(good[0], make([]byte, DefaultMessageLimit)...), ErrMalformed},
		{"garbage", []byte("not a protobuf \xff\xff"), ErrMalformed},
		{"empty", nil, ErrUnsupportedVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := OpenEnvelope(tc.msg, DefaultMessageLimit, testNow)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// Every message of a batch cut for a limit stays below it with room for
// pubsub's own fields, and a batch too big for maxParts messages is cut
// into smaller batches first.
func TestEnvelopeSizes(t *testing.T) {
	sk := resultstest.Key(t)
	id, _ := peer.IDFromPrivateKey(sk)
	for _, limit := range []int{MinMessageLimit, DefaultMessageLimit} {
		ps := limit - messageOverhead
		data := make([]byte, min(maxParts*ps, maxBatchData))
		for i := range data {
			data[i] = byte(i * 7919 >> 3)
		}
		s, err := seal(sk, nil, batchMeta{node: id, seq: 1, snapshot: subnet.SnapshotID{1}, created: testNow, shards: 1,
			batch: crawl.Batch{Data: data, Records: 1}}, ps)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range envs(t, s) {
			if len(m) > limit-4096 {
				t.Fatalf("limit %d: message %d is %d bytes", limit, i, len(m))
			}
		}
		if _, err := seal(sk, nil, batchMeta{node: id, seq: 1, shards: 1, batch: crawl.Batch{Data: append(data, 0), Records: 1}}, ps); err == nil {
			t.Fatalf("limit %d: a batch of %d bytes was sealed", limit, len(data)+1)
		}
	}
	// fitParts halves batches until they fit.
	recs := resultstest.Records(1, 300, testNow)
	for i := range recs {
		recs[i].Title = fmt.Sprintf("%x", sha256Sum([]byte(recs[i].URL)))
	}
	b := resultstest.Batch(t, recs)
	got, err := fitParts([]shardBatch{{3, b}}, len(b.Data)/3)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range got {
		if len(g.batch.Data) > len(b.Data)/3 || g.shard != 3 {
			t.Fatalf("part of %d bytes in shard %d", len(g.batch.Data), g.shard)
		}
		n += g.batch.Records
	}
	if len(got) < 3 || n != 300 {
		t.Fatalf("%d batches, %d records", len(got), n)
	}
}

// A node whose peer id does not embed its key (RSA) sends the key along.
func TestEnvelopeRSAKey(t *testing.T) {
	sk, _, err := crypto.GenerateRSAKeyPair(2048, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := sealTest(t, sk, 1, resultstest.Batch(t, resultstest.Records(1, 3, testNow)), 1<<20)
	if len(s.pub) == 0 {
		t.Fatal("RSA public key not carried")
	}
	m := envs(t, s)[0]
	if _, err := OpenEnvelope(m, DefaultMessageLimit, testNow); err != nil {
		t.Fatal(err)
	}
	other, _, _ := crypto.GenerateRSAKeyPair(2048, nil)
	bad := resultstest.Reenvelope(t, m, func(e *pb.Envelope, h *pb.Header) { e.PublicKey, _ = crypto.MarshalPublicKey(other.GetPublic()) })
	if _, err := OpenEnvelope(bad, DefaultMessageLimit, testNow); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("another RSA key accepted: %v", err)
	}
}

func FuzzOpenEnvelope(f *testing.F) {
	sk := resultstest.Key(f)
	b := resultstest.Batch(f, resultstest.Records(1, 5, testNow))
	for _, m := range envs(f, sealTest(f, sk, 9, b, 1024)) {
		f.Add(m)
	}
	f.Add(envs(f, sealTest(f, sk, 9, b, 1<<20))[0])
	f.Add([]byte{})
	f.Add([]byte{0x08, 0x01, 0x12, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := OpenEnvelope(data, DefaultMessageLimit, testNow)
		if err != nil {
			return
		}
		// Whatever verifies is consistent with its header.
		if p.Index >= p.Parts() || len(p.Data) > int(p.Header.GetPartSize()) || p.Header.GetSeq() == 0 {
			t.Fatalf("inconsistent part %+v", p)
		}
		if p.Parts() == 1 {
			_, _ = crawl.DecodeBatch(p.Data)
		}
	})
}

func FuzzDecodeAnnounce(f *testing.F) {
	a, _ := proto.Marshal(&pb.Announce{Version: 1, Snapshot: make([]byte, 32), Shards: 4, Take: []uint32{1, 3}, AtMs: testNow.UnixMilli(), TtlS: 60})
	f.Add(a)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := decodeAnnounce(data, testNow)
		if err != nil {
			return
		}
		for _, s := range a.GetTake() {
			if s >= a.GetShards() {
				t.Fatalf("shard %d of %d accepted", s, a.GetShards())
			}
		}
		_ = addrsOf(a)
	})
}

func TestSplitShards(t *testing.T) {
	var recs []crawl.Record
	for s := range 12 {
		recs = append(recs, resultstest.Records(s, 3, testNow)...)
	}
	b := resultstest.Batch(t, recs)
	groups, err := splitShards(b, 4)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, g := range groups {
		got, err := crawl.DecodeBatch(g.batch.Data)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != g.batch.Records {
			t.Fatalf("shard %d: %d records, batch says %d", g.shard, len(got), g.batch.Records)
		}
		for i := range got {
			if s := RecordShard(&got[i], 4); s != g.shard {
				t.Fatalf("%s in shard %d, belongs to %d", got[i].URL, g.shard, s)
			}
		}
		total += len(got)
	}
	if total != len(recs) || len(groups) < 2 {
		t.Fatalf("%d records in %d groups", total, len(groups))
	}
	one, err := splitShards(b, 1)
	if err != nil || len(one) != 1 || &one[0].batch.Data[0] != &b.Data[0] {
		t.Fatal("one shard must pass the batch through")
	}
}

// FuzzSignedBatch fuzzes what a node with a valid key may send: any header
// and data, signed. Whatever verifies names the signer (the indexer's
// FuzzIngest takes it on from there).
func FuzzSignedBatch(f *testing.F) {
	sk := resultstest.Key(f)
	id, _ := peer.IDFromPrivateKey(sk)
	for _, ps := range []int{1024, 1 << 20} {
		s, err := seal(sk, nil, batchMeta{node: id, seq: 4, snapshot: sid(f), created: testNow, shards: 1,
			batch: resultstest.Batch(f, resultstest.Records(2, 8, testNow))}, ps)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(s.hdrRaw, uint32(0), s.part(0))
	}
	f.Fuzz(func(t *testing.T, hdr []byte, part uint32, data []byte) {
		sig, err := sk.Sign(append([]byte(signPrefix), hdr...))
		if err != nil {
			t.Fatal(err)
		}
		m, err := proto.Marshal(&pb.Envelope{Version: wireVersion, Header: hdr, Signature: sig, Part: part, Data: data})
		if err != nil {
			return
		}
		p, err := OpenEnvelope(m, DefaultMessageLimit, testNow)
		if err != nil {
			return
		}
		if p.Node != id {
			t.Fatalf("a header naming %s verified under %s's key", p.Node, id)
		}
	})
}
