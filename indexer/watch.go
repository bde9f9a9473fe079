package indexer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/indexer/index"
	"github.com/micra-net/micra/requests"
	rpb "github.com/micra-net/micra/requests/pb"
	"github.com/micra-net/micra/results"
	"github.com/micra-net/micra/results/pb"
)

// Watches (requests.WatchID): nodes report a sample of the links
// they handed on to the nodes owning their subnets, each with its owner's
// receipt. The indexer keeps a watched link as a pending request that went
// to that owner when the receipt says (pending.go), unless it has one of
// the link already or its index holds the page (the record came; an owner
// signs for a fresh page without fetching it again, crawl.Crawler.Fresh):
// when no record of the page comes within the patience,
// it owes the subnet's coordinator a withholding notice with the receipt
// (withheld.go) and submits the link again, as for its own requests. Only
// links of the result shards it takes, whose hosts the egress policy does
// not refuse and whose receipts sign their normalized form are kept, at
// most watchesPerHour from one reporter.

// watchesPerHour bounds the watches taken from one reporter an hour (a
// node sends at most 120).
const watchesPerHour = 600

// takeWatches is the WatchID handler.
func (ix *Indexer) takeWatches(ctx context.Context, from peer.ID, ws []requests.Watch) error {
	now := ix.cfg.now()
	var self peer.ID
	if ix.o != nil {
		self = ix.o.Host().ID()
	}
	var keep []requests.Watch
	over := 0
	for i, w := range ws {
		if !ix.watchBud.spend(from, watchesPerHour, now) {
			over = len(ws) - i
			ix.stats.watchesRefused.Add(uint64(over))
			break
		}
		link, err := crawl.NormalizeURL(w.Request.Link)
		switch {
		case err != nil || link != w.Request.Link, w.Holder == self, w.Holder == from,
			ix.take != nil && !ix.take[results.ShardOf(egress.HostOf(link), ix.cfg.shards)],
			ix.o != nil && len(ix.allowedHosts([]crawl.Request{w.Request})) == 0:
			// Not a request this indexer could hold the owner to: the
			// receipt signs another form of the link, the owner is the
			// indexer itself or the reporter, the page's records go to
			// another indexer, or the host is refused.
			ix.stats.watchesRefused.Add(1)
			continue
		}
		if _, err := ix.x.Get(ctx, link); !errors.Is(err, index.ErrNotFound) {
			// The index holds the page (or cannot tell): its record
			// came, and nothing is owed.
			continue
		}
		keep = append(keep, w)
	}
	ix.keepWatched(keep, now)
	if over > 0 {
		return fmt.Errorf("%d watches over the budget of %d an hour", over, watchesPerHour)
	}
	return nil
}

// keepWatched keeps each of ws as a pending request sent to its holder at
// its receipt's time, unless one of its link is pending already.
func (ix *Indexer) keepWatched(ws []requests.Watch, now time.Time) {
	if len(ws) == 0 || ix.cfg.attempts <= 1 {
		return
	}
	var ids [][16]byte
	var pcs []*pb.PendingCrawl
	for _, w := range ws {
		r := w.Request
		pc := &pb.PendingCrawl{Request: &rpb.CrawlRequest{Link: r.Link, Depth: int32(r.Depth), Owners: r.Owners},
			FirstMs: now.UnixMilli(), NextMs: max(now.UnixMilli(), w.Receipt.At.Add(ix.cfg.patience).UnixMilli()), Attempts: 1}
		setHolder(pc, w.Holder, r.Link, w.Receipt, w.Receipt.At)
		ids, pcs = append(ids, pendingID(r.Link)), append(pcs, pc)
	}
	added, err := ix.keep(ids, pcs)
	if err != nil {
		ix.log.Warn("keeping watched links failed", "error", err)
		return
	}
	ix.stats.watched.Add(uint64(added))
}
