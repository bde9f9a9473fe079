package requests

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/requests/pb"
)

// Watches. A node hands the links it finds in other nodes'
// subnets on to their owners (SendCrawlReceipts); an owner that takes
// them and never crawls them withholds as surely as one that leaves an
// indexer's crawl request unanswered, but no indexer sent them. So the
// node keeps the owner's receipts and reports a sample of the links,
// each with its owner's receipt, to the indexers that take the links'
// result shards (SendWatches, on WatchID). An indexer keeps a watched link
// as it keeps a request it submitted itself: when no record of it comes
// within its patience it tells the subnet's coordinator, with the receipt
// as evidence, and submits the link again. The owner cannot tell the
// watched links from the others: it signs a receipt of every link.

// Watch is a link handed on to Holder, which took it with Receipt.
type Watch struct {
	Request crawl.Request
	Holder  peer.ID
	Receipt Receipt
}

// WatchHandler takes watches an indexer was sent; it returns an error
// when it takes none of them.
type WatchHandler func(ctx context.Context, from peer.ID, ws []Watch) error

// SendCrawlReceipts sends crawl requests to p, the node owning their
// subnets, in CRAWL frames of at most MaxCrawlRequests (each request
// checked against the protocol's bounds first), and returns once p
// answered every frame with its receipt of each request, dated within ten
// minutes of this peer's clock; a request p did not take
// (Promises) has a receipt with a nil Sig, and may be sent again
// later. One receipt p signed in each frame, at random, is verified (p's
// signature of its link), so an owner that does not sign fails every frame
// and one that signs some wrongly fails as often; a receipt kept for
// evidence is verified again where it is used (SendWatches, the indexer,
// the coordinator). It fails with the first frame p did not acknowledge or
// whose receipts do not hold (those before it were delivered; their
// receipts are not returned).
func SendCrawlReceipts(ctx context.Context, h host.Host, p peer.ID, reqs []crawl.Request) ([]Receipt, error) {
	return sendCrawl(ctx, h, p, reqs, spotReceipts)
}

// SendWatches sends ws (at most MaxWatches, each checked as the indexer
// will) to the indexer p and waits for its answer.
func SendWatches(ctx context.Context, h host.Host, p peer.ID, ws []Watch) error {
	if len(ws) == 0 || len(ws) > MaxWatches {
		return fmt.Errorf("%w: %d watches (1 to %d)", ErrMalformed, len(ws), MaxWatches)
	}
	m := &pb.CrawlMessage{Version: wireVersion, Type: pb.CrawlMessage_WATCH}
	for _, w := range ws {
		r := w.Request
		m.Watches = append(m.Watches, &pb.WatchEntry{Request: &pb.CrawlRequest{Link: r.Link, Depth: int32(r.Depth), Owners: r.Owners},
			Holder: []byte(w.Holder), AtMs: w.Receipt.At.UnixMilli(), Receipt: w.Receipt.Sig})
	}
	if _, err := decodeWatches(m, time.Now()); err != nil {
		return err
	}
	_, err := exchange(ctx, h, p, WatchID, svcWatch, watchDeadline, m, 4<<10)
	return err
}

// ServeWatches registers the handler of WatchID on h: each frame's
// watches, checked (decodeWatches), are handed to f, and the frame is
// acknowledged once f returns nil. Call the returned function to remove
// the handler.
func ServeWatches(h host.Host, f WatchHandler, opts ...Option) (remove func(), err error) {
	if h == nil || f == nil {
		return nil, errors.New("requests: watches need a host and a handler")
	}
	return serveFrames(h, frameProto{WatchID, svcWatch, watchStreamMem, maxWatchMsg, watchDeadline}, opts,
		func(ctx context.Context, cfg *config, from peer.ID, m *pb.CrawlMessage, s network.Stream) {
			ws, err := decodeWatches(m, time.Now())
			if err == nil {
				err = f(ctx, from, ws)
			}
			if err != nil {
				cfg.log.Debug("watches refused", "peer", from, "error", err)
			}
			answer(s, len(ws), nil, err)
		})
}

// decodeWatches checks a WATCH frame and returns its watches: each a
// request within the protocol's bounds, a holder whose key its ID embeds,
// and that holder's receipt of the link, dated no more than MaxWatchAge
// before now and no more than ten minutes after.
func decodeWatches(m *pb.CrawlMessage, now time.Time) ([]Watch, error) {
	if err := checkFrame(m, pb.CrawlMessage_WATCH); err != nil {
		return nil, err
	}
	if n := len(m.GetWatches()); n == 0 || n > MaxWatches {
		return nil, fmt.Errorf("%w: %d watches (1 to %d)", ErrMalformed, n, MaxWatches)
	}
	out := make([]Watch, len(m.GetWatches()))
	for i, e := range m.GetWatches() {
		r := e.GetRequest()
		w := Watch{Request: crawl.Request{Link: r.GetLink(), Depth: int(r.GetDepth()), Owners: r.GetOwners()},
			Receipt: Receipt{At: time.UnixMilli(e.GetAtMs()), Sig: e.GetReceipt()}}
		if err := CheckRequest(w.Request); err != nil {
			return nil, err
		}
		h, err := peer.IDFromBytes(e.GetHolder())
		if err != nil {
			return nil, fmt.Errorf("%w: watch of %s: holder id", ErrMalformed, w.Request.Link)
		}
		w.Holder = h
		if d := now.Sub(w.Receipt.At); d > MaxWatchAge || d < -clockSkew {
			return nil, fmt.Errorf("%w: watch of %s: receipt dated %s", ErrMalformed, w.Request.Link, w.Receipt.At.UTC().Format(time.RFC3339))
		}
		if err := overlay.VerifyReceipt(h, w.Request.Link, w.Receipt.At, w.Receipt.Sig); err != nil {
			return nil, fmt.Errorf("watch of %s: %w", w.Request.Link, err)
		}
		out[i] = w
	}
	return out, nil
}
