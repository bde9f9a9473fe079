package requests

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio/pbio"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/internal/p2pstream"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/requests/pb"
)

// CheckRequest applies the protocol's bounds to one request.
func CheckRequest(r crawl.Request) error {
	if r.Link == "" || len(r.Link) > maxURLLen {
		return fmt.Errorf("%w: URL of %d bytes", ErrMalformed, len(r.Link))
	}
	u, err := url.Parse(r.Link)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return fmt.Errorf("%w: %q is not an http(s) URL", ErrMalformed, r.Link)
	}
	if r.Depth < crawl.DefaultDepth || r.Depth > maxDepth {
		return fmt.Errorf("%w: depth %d (−1 for the default, at most %d)", ErrMalformed, r.Depth, maxDepth)
	}
	if len(r.Owners) > maxOwners {
		return fmt.Errorf("%w: %d owners", ErrMalformed, len(r.Owners))
	}
	for _, o := range r.Owners {
		if o == "" || len(o) > maxOwnerLen {
			return fmt.Errorf("%w: owner of %d bytes", ErrMalformed, len(o))
		}
	}
	return nil
}

// sendCrawl checks reqs against the protocol's bounds and sends them to p
// in frames of at most MaxCrawlRequests, asking for receipts and checking
// them as check says; it returns the receipts of every request, or fails
// with the first frame p did not acknowledge or whose receipts do not hold
// (those before it were delivered; their receipts are not returned).
func sendCrawl(ctx context.Context, h host.Host, p peer.ID, reqs []crawl.Request, check receiptCheck) ([]Receipt, error) {
	for _, r := range reqs {
		if err := CheckRequest(r); err != nil {
			return nil, fmt.Errorf("%s: %w", r.Link, err)
		}
	}
	return sendFrames(ctx, h, p, reqs, check)
}

// sendFrames sends reqs, checked against the protocol's bounds already, to
// p as sendCrawl does.
func sendFrames(ctx context.Context, h host.Host, p peer.ID, reqs []crawl.Request, check receiptCheck) ([]Receipt, error) {
	var out []Receipt
	for len(reqs) > 0 {
		chunk := reqs[:min(len(reqs), MaxCrawlRequests)]
		reqs = reqs[len(chunk):]
		rs, err := sendCrawlFrame(ctx, h, p, chunk, check)
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	return out, nil
}

// receiptCheck is how a sender checks the receipts of a CRAWL frame.
type receiptCheck int

const (
	spotReceipts receiptCheck = iota // every one dated, one at random verified
	allReceipts                      // every one dated and verified
)

// sendCrawlFrame sends one CRAWL frame (at most MaxCrawlRequests checked
// requests) to p and waits for its answer. It fails unless there is a
// receipt per request, dated within clockSkew of this peer's clock, and
// the ones check verifies are p's signatures of their links: else p took
// the requests, but nothing proves it did.
func sendCrawlFrame(ctx context.Context, h host.Host, p peer.ID, reqs []crawl.Request, check receiptCheck) ([]Receipt, error) {
	m := &pb.CrawlMessage{Version: wireVersion, Type: pb.CrawlMessage_CRAWL}
	for _, r := range reqs {
		m.Requests = append(m.Requests, &pb.CrawlRequest{Link: r.Link, Depth: int32(r.Depth), Owners: r.Owners})
	}
	resp, err := exchange(ctx, h, p, CrawlID, svcCrawl, crawlDeadline, m, maxCrawlAck)
	if err != nil {
		return nil, err
	}
	verify := -1 // all
	if check == spotReceipts {
		verify = rand.IntN(len(reqs))
	}
	return checkReceipts(p, reqs, resp, time.Now(), verify)
}

// exchange sends m to p on protocol id and returns its CRAWL_ACK (of at
// most limit bytes); an ERROR answer is an error naming the peer's words.
func exchange(ctx context.Context, h host.Host, p peer.ID, id protocol.ID, svc string, d time.Duration, m *pb.CrawlMessage, limit int) (*pb.CrawlMessage, error) {
	s, err := p2pstream.Open(ctx, h, p, id, svc, d)
	if err != nil {
		return nil, err
	}
	if err := pbio.NewDelimitedWriter(s).WriteMsg(m); err != nil {
		s.Reset()
		return nil, err
	}
	_ = s.CloseWrite()
	var resp pb.CrawlMessage
	if err := pbio.NewDelimitedReader(s, limit).ReadMsg(&resp); err != nil {
		s.Reset()
		return nil, err
	}
	_ = s.Close()
	switch {
	case resp.GetType() == pb.CrawlMessage_ERROR:
		msg := resp.GetError()
		if len(msg) > 256 {
			msg = msg[:256]
		}
		return nil, fmt.Errorf("%w: peer: %q", overlay.ErrRemote, msg)
	case resp.GetVersion() != wireVersion || resp.GetType() != pb.CrawlMessage_CRAWL_ACK:
		return nil, fmt.Errorf("%w: answer %v version %d", ErrMalformed, resp.GetType(), resp.GetVersion())
	}
	return &resp, nil
}

// answer writes the answer to a frame of n items that err refused, or
// resp (a CRAWL_ACK of n when nil), and closes s.
func answer(s network.Stream, n int, resp *pb.CrawlMessage, err error) {
	if resp == nil {
		resp = &pb.CrawlMessage{Version: wireVersion, Type: pb.CrawlMessage_CRAWL_ACK, Accepted: uint32(n)}
	}
	if err != nil {
		resp = &pb.CrawlMessage{Version: wireVersion, Type: pb.CrawlMessage_ERROR, Error: err.Error()}
	}
	if err := pbio.NewDelimitedWriter(s).WriteMsg(resp); err != nil {
		s.Reset()
		return
	}
	_ = s.Close()
}

// checkReceipts returns the receipts of the CRAWL_ACK resp from p for
// reqs, checked: one per request, at a time within clockSkew of now, and
// p's signature of its link: every one's when verify is negative, else
// one's only (a spot check, the verify-th of those taken, counted round:
// an ed25519 verification costs about 50 µs, a full frame's 13 ms). An
// empty receipt is a request p did not take (Receipt.Sig nil); the
// frame's Accepted must count the others.
func checkReceipts(p peer.ID, reqs []crawl.Request, resp *pb.CrawlMessage, now time.Time, verify int) ([]Receipt, error) {
	sigs := resp.GetReceipts()
	if len(sigs) != len(reqs) {
		return nil, fmt.Errorf("%w: %d receipts of %d crawl requests from %s", ErrMalformed, len(sigs), len(reqs), p)
	}
	at := time.UnixMilli(resp.GetAtMs())
	if d := at.Sub(now); d > clockSkew || d < -clockSkew {
		return nil, fmt.Errorf("%w: receipts from %s dated %s, %v from this peer's clock", ErrMalformed, p, at.UTC().Format(time.RFC3339), d.Round(time.Second))
	}
	var taken []int
	for i, sig := range sigs {
		if len(sig) > 0 {
			taken = append(taken, i)
		}
	}
	if int(resp.GetAccepted()) != len(taken) {
		return nil, fmt.Errorf("%w: %s accepted %d crawl requests and signed for %d", ErrMalformed, p, resp.GetAccepted(), len(taken))
	}
	spot := -1
	if verify >= 0 && len(taken) > 0 {
		spot = taken[verify%len(taken)]
	}
	out := make([]Receipt, len(reqs))
	for _, i := range taken {
		if verify < 0 || i == spot {
			if err := overlay.VerifyReceipt(p, reqs[i].Link, at, sigs[i]); err != nil {
				return nil, fmt.Errorf("crawl request %s: %w", reqs[i].Link, err)
			}
		}
		out[i] = Receipt{At: at, Sig: sigs[i]}
	}
	return out, nil
}

// ServeCrawlRequests registers the handler of CrawlID on h: each request
// frame (at most 256 requests, checked against the protocol's bounds and
// the Egress policy) is handed to the promise handler (Promises), or
// whole to f without one, and acknowledged with this host's signed receipt
// of each request taken (an empty one for each not taken now); a frame
// with a request the policy refuses is answered with an ERROR
// naming it, and nothing of it is handed to f. Delivery is at least
// once: a sender whose answer was lost sends again, and the crawler
// queues a link it knows again (its fetch is conditional). Call the
// returned function to remove the handler.
func ServeCrawlRequests(h host.Host, f CrawlHandler, opts ...Option) (remove func(), err error) {
	if h == nil || f == nil {
		return nil, errors.New("requests: crawl requests need a host and a handler")
	}
	return serveFrames(h, frameProto{CrawlID, svcCrawl, crawlStreamMem, maxCrawlMsg, crawlDeadline}, opts,
		func(ctx context.Context, cfg *config, from peer.ID, m *pb.CrawlMessage, s network.Stream) {
			reqs, err := decodeCrawl(m)
			if err == nil {
				err = refuseCrawl(&cfg.policy, reqs)
			}
			if err != nil {
				cfg.log.Debug("bad crawl request", "peer", from, "error", err)
				answer(s, len(reqs), nil, err)
				return
			}
			var taken []bool // nil: all
			if cfg.promise != nil {
				taken, err = cfg.promise(ctx, from, reqs)
				if err == nil && len(taken) != len(reqs) {
					err = fmt.Errorf("promise handler answered %d of %d requests", len(taken), len(reqs))
				}
			} else {
				err = f(ctx, from, reqs)
			}
			if err != nil {
				cfg.log.Debug("crawl request failed", "peer", from, "error", err)
			}
			resp := &pb.CrawlMessage{Version: wireVersion, Type: pb.CrawlMessage_CRAWL_ACK, Accepted: uint32(len(reqs))}
			if err == nil {
				err = signReceipts(h, reqs, taken, resp, time.Now())
			}
			answer(s, len(reqs), resp, err)
		})
}

// frameProto is a one-frame protocol's settings: its ID, resource-manager
// service and memory, frame limit and deadline.
type frameProto struct {
	id    protocol.ID
	svc   string
	mem   int
	limit int
	d     time.Duration
}

// serveFrames registers on h the handler of fp's protocol: each stream's
// one CrawlMessage, read within the deadline, is handed to handle, which
// answers it (answer) before the deadline ends its context. Call the
// returned function to remove the handler.
func serveFrames(h host.Host, fp frameProto, opts []Option,
	handle func(ctx context.Context, cfg *config, from peer.ID, m *pb.CrawlMessage, s network.Stream)) (func(), error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.SetStreamHandler(fp.id, func(s network.Stream) {
		from := s.Conn().RemotePeer()
		if !p2pstream.Accept(cfg.log, s, fp.id, fp.svc, fp.mem, fp.d) {
			return
		}
		defer s.Scope().ReleaseMemory(fp.mem)
		ctx, cancel := context.WithTimeout(ctx, fp.d)
		defer cancel()
		var m pb.CrawlMessage
		if err := pbio.NewDelimitedReader(s, fp.limit).ReadMsg(&m); err != nil {
			cfg.log.Debug("bad frame", "protocol", fp.id, "peer", from, "error", err)
			s.Reset()
			return
		}
		handle(ctx, &cfg, from, &m, s)
	})
	return func() {
		h.RemoveStreamHandler(fp.id)
		cancel()
	}, nil
}

// signReceipts adds to resp this host's receipt of each of reqs it took
// (taken; nil: all), taken at now (overlay.SignReceipt), and an empty one
// of each other, and sets resp.Accepted.
func signReceipts(h host.Host, reqs []crawl.Request, taken []bool, resp *pb.CrawlMessage, now time.Time) error {
	key := h.Peerstore().PrivKey(h.ID())
	resp.AtMs = now.UnixMilli()
	at := time.UnixMilli(resp.AtMs)
	resp.Receipts = make([][]byte, len(reqs))
	resp.Accepted = 0
	for i, r := range reqs {
		if taken != nil && !taken[i] {
			resp.Receipts[i] = []byte{}
			continue
		}
		resp.Accepted++
		sig, err := overlay.SignReceipt(key, r.Link, at)
		if err != nil {
			return fmt.Errorf("signing receipts: %w", err)
		}
		resp.Receipts[i] = sig
	}
	return nil
}

// refuseCrawl returns an error naming the first request whose host the
// policy refuses: an IP literal of a special-purpose address, or a name of
// loopback. Other names are checked by the crawler, on the addresses they
// resolve to.
func refuseCrawl(p *egress.Policy, reqs []crawl.Request) error {
	for _, r := range reqs {
		u, err := url.Parse(r.Link)
		if err != nil {
			continue // decodeCrawl refused it already
		}
		if err := p.CheckHost(u.Hostname()); err != nil {
			return fmt.Errorf("crawl request %s: %w", r.Link, err)
		}
	}
	return nil
}

// checkFrame checks a frame's version and that it is of type want.
func checkFrame(m *pb.CrawlMessage, want pb.CrawlMessage_Type) error {
	if m.GetVersion() != wireVersion {
		return fmt.Errorf("%w: %d", ErrUnsupportedVersion, m.GetVersion())
	}
	if m.GetType() != want {
		return fmt.Errorf("%w: unexpected %v", ErrMalformed, m.GetType())
	}
	return nil
}

// decodeCrawl checks a CRAWL frame and returns its requests.
func decodeCrawl(m *pb.CrawlMessage) ([]crawl.Request, error) {
	if err := checkFrame(m, pb.CrawlMessage_CRAWL); err != nil {
		return nil, err
	}
	if n := len(m.GetRequests()); n == 0 || n > MaxCrawlRequests {
		return nil, fmt.Errorf("%w: %d requests (1 to %d)", ErrMalformed, n, MaxCrawlRequests)
	}
	out := make([]crawl.Request, len(m.GetRequests()))
	for i, r := range m.GetRequests() {
		out[i] = crawl.Request{Link: r.GetLink(), Depth: int(r.GetDepth()), Owners: r.GetOwners()}
		if err := CheckRequest(out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}
