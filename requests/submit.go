package requests

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/overlay"
)

// SubmitResult says where Submit's crawl requests went.
type SubmitResult struct {
	Sent map[peer.ID]int    // requests accepted by each owning node (this peer included when LocalCrawl took them)
	To   map[string]peer.ID // the node each accepted request went to, by its link as submitted
	// Receipts are the receipts of the requests another node took, by
	// link as submitted: each verified, signed by the node in To.
	Receipts map[string]Receipt
	Failed   []SubmitFailure
}

// Receipt is a node's receipt of a crawl request: its signature of the
// request's link at At (overlay.SignReceipt), by its own clock. A
// withholding notice carries it (overlay.WithheldNotice). Sig is nil for
// a request the node did not take (SendCrawlReceipts).
type Receipt struct {
	At  time.Time
	Sig []byte
}

// SubmitFailure is one request Submit could not deliver. Err wraps
// egress.ErrSpecialPurpose when the request was refused: its host is, or
// resolves to, a special-purpose address the overlay's policy refuses;
// ErrNotTaken when the owner did not take it now (it would not crawl it in
// time; send it again later). Node is the node owning the request's
// subnet when it was known (the request was sent to it, or it would not
// take it), empty when not.
type SubmitFailure struct {
	Link string
	Err  error
	Node peer.ID
}

// Submit sends runtime crawl requests (seed URLs with a depth) into the
// overlay: each goes to the node that owns the subnet of its host's
// address, found with o.Resolve or, for a subnet not delegated yet,
// o.Delegate (which runs the delegation procedure). Requests for subnets
// delegated to this peer go to the LocalCrawl handler. Hosts are resolved
// with Resolve (default: the system resolver). A request whose host is,
// or resolves to, an address the overlay's egress policy refuses
// (loopback, private, link-local...: overlay.Egress) is refused before
// any delegation, with an error naming the address and its registry entry.
// It returns an error only when ctx ends; per-request failures are in the
// result.
func Submit(ctx context.Context, o *overlay.Overlay, reqs []crawl.Request, opts ...Option) (SubmitResult, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return SubmitResult{}, err
	}
	res := SubmitResult{Sent: map[peer.ID]int{}, To: map[string]peer.ID{}, Receipts: map[string]Receipt{}}
	groups := map[peer.ID][]crawl.Request{}
	var order []peer.ID
	for _, r := range reqs {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		node, err := seedOwner(ctx, o, &cfg, r)
		if err != nil {
			res.Failed = append(res.Failed, SubmitFailure{Link: r.Link, Err: err})
			continue
		}
		if _, ok := groups[node]; !ok {
			order = append(order, node)
		}
		groups[node] = append(groups[node], r)
	}
	self := o.Host().ID()
	for _, node := range order {
		g := groups[node]
		for len(g) > 0 {
			chunk := g[:min(len(g), MaxCrawlRequests)]
			g = g[len(chunk):]
			var err error
			var receipts []Receipt
			switch {
			case node == self && cfg.crawlLocal == nil:
				err = fmt.Errorf("%w: the subnet is delegated to this peer, which does not crawl", overlay.ErrUnavailable)
			case node == self:
				err = cfg.crawlLocal(ctx, self, chunk)
			default:
				receipts, err = sendCrawlFrame(ctx, o.Host(), node, chunk, allReceipts)
			}
			if err != nil {
				for _, r := range chunk {
					res.Failed = append(res.Failed, SubmitFailure{Link: r.Link, Err: fmt.Errorf("to %s: %w", node, err), Node: node})
				}
				continue
			}
			res.note(node, chunk, receipts)
		}
	}
	return res, ctx.Err()
}

// note records that node acknowledged reqs, with receipts (nil when none
// were asked for): each request it did not take fails with ErrNotTaken.
func (res *SubmitResult) note(node peer.ID, reqs []crawl.Request, receipts []Receipt) {
	for i, r := range reqs {
		if receipts != nil && receipts[i].Sig == nil {
			res.Failed = append(res.Failed, SubmitFailure{Link: r.Link, Err: fmt.Errorf("to %s: %w", node, ErrNotTaken), Node: node})
			continue
		}
		res.Sent[node]++
		res.To[r.Link] = node
		if receipts != nil {
			res.Receipts[r.Link] = receipts[i]
		}
	}
}

// seedOwner returns the node owning the subnet of r's host: the egress
// policy checks the host (check), then the address cfg's resolver finds
// for it (checkAddr), before anyone is asked.
func seedOwner(ctx context.Context, o *overlay.Overlay, cfg *config, r crawl.Request) (peer.ID, error) {
	policy := o.EgressPolicy()
	if err := check(&policy, r, netip.Addr{}); err != nil {
		return "", err
	}
	u, _ := url.Parse(r.Link)
	addr, err := cfg.resolve(ctx, u.Hostname())
	if err != nil {
		return "", fmt.Errorf("resolving %s: %w", u.Hostname(), err)
	}
	if err := checkAddr(&policy, u.Hostname(), addr); err != nil {
		return "", err
	}
	if cfg.fresh {
		forget(o, addr)
	}
	return owner(ctx, o, r.Link, addr)
}
