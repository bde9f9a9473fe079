package requests

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/internal/p2ptest"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/requests/pb"
	"github.com/micra-net/micra/results/resultstest"
)

// TestCrawlReceipts: a node that takes crawl requests signs a
// receipt of each, and the sender keeps only
// receipts that are the node's signatures of the requests' links at a
// time near its own clock: none missing, none another node's, none of
// another request, none dated far off.
func TestCrawlReceipts(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		hs := hostsJoined(t, p2ptest.NewNet(t), 2)
		sender, taker := hs[0], hs[1]
		var sink crawlSink
		serveCrawl(t, taker, sink.take)
		reqs := []crawl.Request{{Link: "http://93.184.216.34/a", Depth: 1}, {Link: "http://93.184.216.34/b", Depth: 1}}
		before := time.Now().Truncate(time.Millisecond)
		got, err := sendCrawlFrame(t.Context(), sender, taker.ID(), reqs, allReceipts)
		if err != nil || len(got) != len(reqs) {
			t.Fatalf("receipts: %v, %v", got, err)
		}
		for i, r := range reqs {
			if err := overlay.VerifyReceipt(taker.ID(), r.Link, got[i].At, got[i].Sig); err != nil || got[i].At.Before(before) || got[i].At.After(time.Now()) {
				t.Errorf("receipt of %s at %v: %v", r.Link, got[i].At, err)
			}
		}
		if sink.taken() != len(reqs) {
			t.Errorf("%d requests taken, want %d", sink.taken(), len(reqs))
		}

		// What a node may answer instead.
		now := time.Now()
		key, other := resultstest.Key(t), resultstest.Key(t)
		p, _ := peer.IDFromPrivateKey(key)
		ack := func(k func(int) ([]byte, int64)) *pb.CrawlMessage {
			m := &pb.CrawlMessage{Version: wireVersion, Type: pb.CrawlMessage_CRAWL_ACK, Accepted: uint32(len(reqs))}
			for i := range reqs {
				sig, at := k(i)
				m.Receipts, m.AtMs = append(m.Receipts, sig), at
			}
			return m
		}
		sign := func(k crypto.PrivKey, link string, at time.Time) []byte {
			sig, err := overlay.SignReceipt(k, link, at)
			if err != nil {
				t.Fatal(err)
			}
			return sig
		}
		good := ack(func(i int) ([]byte, int64) { return sign(key, reqs[i].Link, now), now.UnixMilli() })
		if rs, err := checkReceipts(p, reqs, good, now, -1); err != nil || len(rs) != len(reqs) {
			t.Fatalf("good receipts: %v, %v", rs, err)
		}
		later := now.Add(time.Hour)
		for name, m := range map[string]*pb.CrawlMessage{
			"none":         {Version: wireVersion, Type: pb.CrawlMessage_CRAWL_ACK, Accepted: uint32(len(reqs))},
			"one missing":  {Version: wireVersion, Type: pb.CrawlMessage_CRAWL_ACK, Receipts: good.Receipts[:1], AtMs: good.AtMs},
			"another node": ack(func(i int) ([]byte, int64) { return sign(other, reqs[i].Link, now), now.UnixMilli() }),
			"swapped":      ack(func(i int) ([]byte, int64) { return sign(key, reqs[1-i].Link, now), now.UnixMilli() }),
			"dated later":  ack(func(i int) ([]byte, int64) { return sign(key, reqs[i].Link, later), later.UnixMilli() }),
			"time changed": ack(func(i int) ([]byte, int64) { return sign(key, reqs[i].Link, now), now.UnixMilli() + 1 }),
			"too long a signature": ack(func(i int) ([]byte, int64) {
				return make([]byte, overlay.MaxReceiptSig+1), now.UnixMilli()
			}),
		} {
			if rs, err := checkReceipts(p, reqs, m, now, -1); err == nil {
				t.Errorf("%s: %v taken", name, rs)
			}
		}
		// A spot check (SendCrawlReceipts) verifies the one receipt it
		// draws, and dates every one.
		firstBad := ack(func(i int) ([]byte, int64) {
			if i == 0 {
				return sign(other, reqs[i].Link, now), now.UnixMilli()
			}
			return sign(key, reqs[i].Link, now), now.UnixMilli()
		})
		if _, err := checkReceipts(p, reqs, firstBad, now, 0); err == nil {
			t.Error("spot check: the receipt drawn, another node's, taken")
		}
		if rs, err := checkReceipts(p, reqs, firstBad, now, 1); err != nil || len(rs) != len(reqs) {
			t.Errorf("spot check of a good receipt: %v, %v", rs, err)
		}
		if _, err := checkReceipts(p, reqs, ack(func(i int) ([]byte, int64) { return sign(key, reqs[i].Link, later), later.UnixMilli() }), now, 1); err == nil {
			t.Error("spot check: receipts dated an hour later taken")
		}
	})
}

// FuzzCheckReceipts feeds arbitrary CRAWL_ACK frames to the check of
// their receipts: it must not panic, and what it takes is a receipt per
// request that verifies.
func FuzzCheckReceipts(f *testing.F) {
	key := resultstest.Key(f)
	p, _ := peer.IDFromPrivateKey(key)
	now := time.UnixMilli(1_800_000_000_000)
	reqs := []crawl.Request{{Link: "http://93.184.216.34/a", Depth: 1}}
	sig, err := overlay.SignReceipt(key, reqs[0].Link, now)
	if err != nil {
		f.Fatal(err)
	}
	good, _ := proto.Marshal(&pb.CrawlMessage{Version: wireVersion, Type: pb.CrawlMessage_CRAWL_ACK, Accepted: 1, AtMs: now.UnixMilli(), Receipts: [][]byte{sig}})
	f.Add(good)
	none, _ := proto.Marshal(&pb.CrawlMessage{Version: wireVersion, Type: pb.CrawlMessage_CRAWL_ACK, AtMs: now.UnixMilli(), Receipts: [][]byte{{}}})
	f.Add(none)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > maxCrawlAck {
			return
		}
		var m pb.CrawlMessage
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		rs, err := checkReceipts(p, reqs, &m, now, -1)
		if err != nil {
			return
		}
		if len(rs) != len(reqs) {
			t.Fatalf("took %v", rs)
		}
		// Not taken (an empty receipt, Accepted 0), or the node's signature.
		if rs[0].Sig == nil && m.GetAccepted() == 0 {
			return
		}
		if m.GetAccepted() != 1 || overlay.VerifyReceipt(p, reqs[0].Link, rs[0].At, rs[0].Sig) != nil {
			t.Fatalf("took %v of an ACK accepting %d", rs, m.GetAccepted())
		}
	})
}

// TestPromisedReceipts: a node with a Promises handler signs
// for the requests it takes and answers an empty receipt for the others,
// which the sender sees as not taken; nothing goes to the CrawlHandler
// past the promise. An answer whose Accepted count differs from the
// receipts signed is refused.
func TestPromisedReceipts(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		hs := hostsJoined(t, p2ptest.NewNet(t), 2)
		sender, taker := hs[0], hs[1]
		var sink, promised crawlSink
		// Takes the links ending in "a" only.
		promise := func(ctx context.Context, from peer.ID, reqs []crawl.Request) ([]bool, error) {
			taken := make([]bool, len(reqs))
			var take []crawl.Request
			for i, r := range reqs {
				if taken[i] = strings.HasSuffix(r.Link, "a"); taken[i] {
					take = append(take, r)
				}
			}
			return taken, promised.take(ctx, from, take)
		}
		serveCrawl(t, taker, sink.take, Promises(promise))
		reqs := []crawl.Request{{Link: "http://93.184.216.34/a", Depth: 1}, {Link: "http://93.184.216.34/b", Depth: 1}, {Link: "http://93.184.216.34/ca", Depth: 1}}
		for _, check := range []receiptCheck{allReceipts, spotReceipts} {
			got, err := sendCrawlFrame(t.Context(), sender, taker.ID(), reqs, check)
			if err != nil || len(got) != len(reqs) {
				t.Fatalf("receipts: %v, %v", got, err)
			}
			for i, r := range reqs {
				want := strings.HasSuffix(r.Link, "a")
				if (got[i].Sig != nil) != want {
					t.Errorf("%s: receipt %x, taken %v", r.Link, got[i].Sig, want)
				}
				if want && overlay.VerifyReceipt(taker.ID(), r.Link, got[i].At, got[i].Sig) != nil {
					t.Errorf("%s: the receipt does not verify", r.Link)
				}
			}
		}
		if promised.taken() != 4 || sink.taken() != 0 {
			t.Fatalf("promised %d, handed whole %d; want 4 and 0", promised.taken(), sink.taken())
		}

		now := time.Now()
		key := resultstest.Key(t)
		p, _ := peer.IDFromPrivateKey(key)
		sig, err := overlay.SignReceipt(key, reqs[0].Link, now)
		if err != nil {
			t.Fatal(err)
		}
		ack := func(accepted uint32, receipts ...[]byte) *pb.CrawlMessage {
			return &pb.CrawlMessage{Version: wireVersion, Type: pb.CrawlMessage_CRAWL_ACK, Accepted: accepted, AtMs: now.UnixMilli(), Receipts: receipts}
		}
		if rs, err := checkReceipts(p, reqs, ack(1, sig, nil, []byte{}), now, 2); err != nil || rs[0].Sig == nil || rs[1].Sig != nil || rs[2].Sig != nil {
			t.Errorf("one taken of three, spot check: %v, %v", rs, err)
		}
		if rs, err := checkReceipts(p, reqs, ack(0, nil, nil, nil), now, 0); err != nil || rs[0].Sig != nil {
			t.Errorf("none taken: %v, %v", rs, err)
		}
		// Submit counts a request not taken as failed, to be sent again.
		res := SubmitResult{Sent: map[peer.ID]int{}, To: map[string]peer.ID{}, Receipts: map[string]Receipt{}}
		rs, err := checkReceipts(p, reqs, ack(1, sig, nil, []byte{}), now, -1)
		if err != nil {
			t.Fatal(err)
		}
		res.note(p, reqs, rs)
		if res.Sent[p] != 1 || res.To[reqs[0].Link] != p || res.Receipts[reqs[0].Link].Sig == nil || len(res.Failed) != 2 ||
			!errors.Is(res.Failed[0].Err, ErrNotTaken) || res.Failed[0].Node != p || res.Failed[1].Link != reqs[2].Link {
			t.Errorf("Submit's result of one taken of three: %+v", res)
		}
		for name, m := range map[string]*pb.CrawlMessage{
			"accepted more than signed":  ack(3, sig, nil, nil),
			"accepted fewer than signed": ack(0, sig, nil, nil),
		} {
			if rs, err := checkReceipts(p, reqs, m, now, -1); err == nil {
				t.Errorf("%s: %v taken", name, rs)
			}
		}
	})
}
