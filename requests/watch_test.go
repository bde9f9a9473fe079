package requests

import (
	"context"
	"strings"
	"sync"
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

// TestWatches: a node that handed links on with receipts
// (SendCrawlReceipts) reports them to an indexer (SendWatches), which
// gets each link, its owner and the owner's receipt; a watch whose receipt
// is not the owner's signature of its link at its time, or is older than
// MaxWatchAge, is refused, by the sender before it goes and by the
// indexer.
func TestWatches(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		hs := hostsJoined(t, p2ptest.NewNet(t), 3)
		finder, owner, ix := hs[0], hs[1], hs[2]
		var sink crawlSink
		serveCrawl(t, owner, sink.take)
		var mu sync.Mutex
		var got []Watch
		removeW, err := ServeWatches(ix, func(_ context.Context, from peer.ID, ws []Watch) error {
			mu.Lock()
			defer mu.Unlock()
			if from != finder.ID() {
				t.Errorf("watches from %s", from)
			}
			got = append(got, ws...)
			return nil
		}, Logger(quiet()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(removeW)
		reqs := make([]crawl.Request, MaxCrawlRequests+3) // two frames
		for i := range reqs {
			reqs[i] = crawl.Request{Link: "http://93.184.216.34/" + strings.Repeat("p", i%7) + string(rune('a'+i%26)), Depth: 1}
		}
		rs, err := SendCrawlReceipts(t.Context(), finder, owner.ID(), reqs)
		if err != nil || len(rs) != len(reqs) {
			t.Fatalf("receipts: %d, %v", len(rs), err)
		}
		w := Watch{Request: reqs[MaxCrawlRequests+1], Holder: owner.ID(), Receipt: rs[MaxCrawlRequests+1]}
		if err := SendWatches(t.Context(), finder, ix.ID(), []Watch{w}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		if len(got) != 1 || got[0].Request.Link != w.Request.Link || got[0].Holder != owner.ID() || !got[0].Receipt.At.Equal(w.Receipt.At) {
			t.Errorf("the indexer got %+v, want %+v", got, w)
		}
		mu.Unlock()
		bad := w
		bad.Request.Link = reqs[0].Link // another link's
		if err := SendWatches(t.Context(), finder, ix.ID(), []Watch{bad}); err == nil {
			t.Error("a watch with another link's receipt was sent")
		}
		time.Sleep(MaxWatchAge + time.Minute)
		if err := SendWatches(t.Context(), finder, ix.ID(), []Watch{w}); err == nil {
			t.Error("a watch older than MaxWatchAge was sent")
		}
		mu.Lock()
		if len(got) != 1 {
			t.Errorf("the indexer took %d watches, want 1", len(got))
		}
		mu.Unlock()
	})
}

// TestDecodeWatches: what an indexer refuses of a WATCH frame.
func TestDecodeWatches(t *testing.T) {
	key, other := resultstest.Key(t), resultstest.Key(t)
	holder, _ := peer.IDFromPrivateKey(key)
	now := time.UnixMilli(1_800_000_000_000)
	link := "http://93.184.216.34/a"
	entry := func(k func() ([]byte, int64)) *pb.CrawlMessage {
		sig, at := k()
		return &pb.CrawlMessage{Version: wireVersion, Type: pb.CrawlMessage_WATCH, Watches: []*pb.WatchEntry{
			{Request: &pb.CrawlRequest{Link: link, Depth: 1}, Holder: []byte(holder), AtMs: at, Receipt: sig}}}
	}
	sign := func(k crypto.PrivKey, at time.Time) []byte {
		sig, err := overlay.SignReceipt(k, link, at)
		if err != nil {
			t.Fatal(err)
		}
		return sig
	}
	good := entry(func() ([]byte, int64) { return sign(key, now), now.UnixMilli() })
	if ws, err := decodeWatches(good, now); err != nil || len(ws) != 1 || ws[0].Holder != holder {
		t.Fatalf("good watch: %v, %v", ws, err)
	}
	old := now.Add(-MaxWatchAge - time.Second)
	later := now.Add(time.Hour)
	for name, m := range map[string]*pb.CrawlMessage{
		"another key":     entry(func() ([]byte, int64) { return sign(other, now), now.UnixMilli() }),
		"too old":         entry(func() ([]byte, int64) { return sign(key, old), old.UnixMilli() }),
		"dated later":     entry(func() ([]byte, int64) { return sign(key, later), later.UnixMilli() }),
		"no watches":      {Version: wireVersion, Type: pb.CrawlMessage_WATCH},
		"a crawl frame":   {Version: wireVersion, Type: pb.CrawlMessage_CRAWL, Watches: good.Watches},
		"another version": {Version: 9, Type: pb.CrawlMessage_WATCH, Watches: good.Watches},
	} {
		if ws, err := decodeWatches(m, now); err == nil {
			t.Errorf("%s: %v taken", name, ws)
		}
	}
}

// FuzzDecodeWatches feeds arbitrary bytes to the decoder of WATCH frames:
// it must not panic, and what it takes is within the protocol's bounds
// with receipts that verify.
func FuzzDecodeWatches(f *testing.F) {
	key := resultstest.Key(f)
	holder, _ := peer.IDFromPrivateKey(key)
	now := time.UnixMilli(1_800_000_000_000)
	sig, err := overlay.SignReceipt(key, "http://93.184.216.34/a", now)
	if err != nil {
		f.Fatal(err)
	}
	good, _ := proto.Marshal(&pb.CrawlMessage{Version: wireVersion, Type: pb.CrawlMessage_WATCH, Watches: []*pb.WatchEntry{
		{Request: &pb.CrawlRequest{Link: "http://93.184.216.34/a", Depth: 1}, Holder: []byte(holder), AtMs: now.UnixMilli(), Receipt: sig}}})
	f.Add(good)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > maxWatchMsg {
			return
		}
		var m pb.CrawlMessage
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		ws, err := decodeWatches(&m, now)
		if err != nil {
			return
		}
		if len(ws) == 0 || len(ws) > MaxWatches {
			t.Fatalf("%d watches taken", len(ws))
		}
		for _, w := range ws {
			if CheckRequest(w.Request) != nil || overlay.VerifyReceipt(w.Holder, w.Request.Link, w.Receipt.At, w.Receipt.Sig) != nil {
				t.Fatalf("took %+v", w)
			}
		}
	})
}
