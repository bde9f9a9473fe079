package overlay

import (
	"context"
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/overlay/pb"
)

// Re-fetches for audits: a node fetches a page afresh for an auditing
// coordinator, inside its probing windows (REFETCH).

// handleRefetch fetches a page afresh for an auditing coordinator, inside
// this node's probing windows.
func (o *Overlay) handleRefetch(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
	if o.cfg.refetcher == nil {
		return nil, fmt.Errorf("%w: this node does not refetch", ErrUnavailable)
	}
	u := req.GetRefetch().GetUrl()
	if u == "" || len(u) > maxURLLen {
		return nil, fmt.Errorf("%w: URL of %d bytes", ErrMalformed, len(u))
	}
	if err := o.limit(o.refetchLimit, from, "refetch"); err != nil {
		return nil, err
	}
	pg, err := o.localRefetch(ctx, u)
	if err != nil {
		return nil, err
	}
	m := newMsg(pb.Message_PAGE)
	m.Page = pageToPB(pg)
	return m, nil
}

func (o *Overlay) localRefetch(ctx context.Context, u string) (Page, error) {
	if o.cfg.refetcher == nil {
		return Page{}, fmt.Errorf("%w: this node does not refetch", ErrUnavailable)
	}
	ctx, cancel := context.WithTimeout(ctx, auditDeadline/3)
	defer cancel()
	if err := o.waitWindow(ctx); err != nil {
		return Page{}, err
	}
	o.stats.refetches.Add(1)
	pg, err := o.cfg.refetcher.Refetch(ctx, u)
	if err != nil {
		return Page{}, fmt.Errorf("%w: %v", ErrFetchFailed, err)
	}
	return pg, nil
}

// refetch asks p to fetch u afresh.
func (o *Overlay) refetch(ctx context.Context, p peer.ID, u string) (Page, error) {
	if p == o.h.ID() {
		return o.localRefetch(ctx, u)
	}
	req := newMsg(pb.Message_REFETCH)
	req.Refetch = &pb.Refetch{Url: u}
	o.stats.requests.Add(1)
	resp, err := o.request(ctx, p, auditSpec, req, pb.Message_PAGE)
	if err != nil {
		return Page{}, err
	}
	return pageFromPB(resp.GetPage()), nil
}
