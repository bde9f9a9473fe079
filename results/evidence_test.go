package results

import (
	"errors"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/results/pb"
	"github.com/micra-net/micra/results/resultstest"
)

// testEvidence seals recs as one batch (in parts of partSize) and returns
// its evidence, as an indexer builds it from the verified parts.
func testEvidence(t testing.TB, s *sealed) []byte {
	t.Helper()
	var data []byte
	var auth SignedHeader
	for _, m := range envs(t, s) {
		p, err := OpenEnvelope(m, DefaultMessageLimit, testNow)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, p.Data...)
		auth = p.Signed
	}
	ev, err := auth.Evidence(data)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestOpenEvidence(t *testing.T) {
	sk, other := resultstest.Key(t), resultstest.Key(t)
	id, _ := peer.IDFromPrivateKey(sk)
	recs := resultstest.Records(3, 40, testNow)
	recs[7].Fingerprint, recs[7].Status = 0xfeedface, 200
	s := sealTest(t, sk, 11, resultstest.Batch(t, recs), 1024) // several parts
	ev := testEvidence(t, s)

	c, err := OpenEvidence(ev, recs[7].URL)
	if err != nil {
		t.Fatal(err)
	}
	if c.Node != id || c.URL != recs[7].URL || c.Fingerprint != 0xfeedface || c.Status != 200 || !c.Time.Equal(testNow) {
		t.Fatalf("claim %+v", c)
	}

	mutate := func(f func(e *pb.Evidence)) []byte {
		var e pb.Evidence
		if err := proto.Unmarshal(ev, &e); err != nil {
			t.Fatal(err)
		}
		f(&e)
		b, err := proto.Marshal(&e)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	otherSig := testEvidence(t, sealTest(t, other, 11, resultstest.Batch(t, recs), 1024))
	for _, tc := range []struct {
		name string
		ev   []byte
		url  string
	}{
		{"no record of the URL", ev, "http://s3.example/none"},
		{"garbage", []byte("not evidence"), recs[7].URL},
		{"empty", nil, recs[7].URL},
		{"version 2", mutate(func(e *pb.Evidence) { e.Version = 2 }), recs[7].URL},
		{"data tampered", mutate(func(e *pb.Evidence) { e.Data[len(e.Data)/2] ^= 1 }), recs[7].URL},
		{"data cut", mutate(func(e *pb.Evidence) { e.Data = e.Data[:len(e.Data)-1] }), recs[7].URL},
		{"signature of another key", mutate(func(e *pb.Evidence) {
			var o pb.Evidence
			_ = proto.Unmarshal(otherSig, &o)
			e.Signature = o.Signature
		}), recs[7].URL},
		{"header of another node's batch", mutate(func(e *pb.Evidence) {
			var o pb.Evidence
			_ = proto.Unmarshal(otherSig, &o)
			e.Header = o.Header
		}), recs[7].URL},
		{"too large", make([]byte, MaxEvidence+1), recs[7].URL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c, err := OpenEvidence(tc.ev, tc.url); !errors.Is(err, overlay.ErrBadEvidence) {
				t.Fatalf("OpenEvidence = %+v, %v; want ErrBadEvidence", c, err)
			}
		})
	}
}

func FuzzOpenEvidence(f *testing.F) {
	sk := resultstest.Key(f)
	recs := resultstest.Records(1, 5, testNow)
	f.Add(testEvidence(f, sealTest(f, sk, 9, resultstest.Batch(f, recs), 1024)), recs[2].URL)
	f.Add(testEvidence(f, sealTest(f, sk, 9, resultstest.Batch(f, recs), 1<<20)), recs[0].URL)
	f.Add([]byte{}, "")
	f.Add([]byte{0x08, 0x01, 0x12, 0x00}, "http://x/")
	f.Fuzz(func(t *testing.T, ev []byte, url string) {
		c, err := OpenEvidence(ev, url)
		if err != nil {
			if !errors.Is(err, overlay.ErrBadEvidence) {
				t.Fatalf("error %v does not wrap ErrBadEvidence", err)
			}
			return
		}
		if c.URL != url || c.Node == "" {
			t.Fatalf("claim %+v for %q", c, url)
		}
	})
}
