package indexer

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/indexer/index"
	"github.com/micra-net/micra/internal/check"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/requests"
	"github.com/micra-net/micra/results"
	"github.com/micra-net/micra/results/pb"
)

// Withholding notices. A crawl request this indexer sent to a
// node and that has had no record past the patience is reported to the
// coordinator of the page's subnet (overlay.Withheld), naming the node it
// went to. The coordinator notes the first notice and answers with the
// time left of its grace; the indexer sends it again then, unless a record
// of the page came meanwhile (the pending request is gone: nothing is
// owed). The second is judged: the subnet taken back, or not. Either way
// the request is submitted again at once when the subnet moved, so that
// the page goes to its new node without waiting for the next patience.
// Notices owed are kept in badger (/results/withheld/<id>, the pending
// request's id), so a restart does not forget them, within bounds: per node
// and hour (WithheldNotices), and in all (maxOwed). A notice carries the
// node's receipt of the request (requests.Receipt, kept in the pending
// request): the coordinator judges none without it.

// Bounds of the notices owed.
const (
	maxOwed         = 4096 // notices owed in all; beyond, new ones are not kept (counted)
	owedPerRound    = 256  // notices sent per round
	maxOwedTries    = 8    // sends of one notice that failed or were noted, before it is dropped
	withheldTimeout = 2 * time.Minute
)

// WithheldNotices sets how many withholding notices about one node the
// indexer sends in an hour (default 60; 0 sends none).
func WithheldNotices(perHour int) Option {
	return func(c *config) error {
		return check.Set(&c.withheldPerHour, perHour, check.AtLeast("withholding notices an hour", perHour, 0))
	}
}

// oweWithheld keeps a notice about each of the overdue pending requests
// that went to another node than this indexer's own (holder known), unless
// one is owed already, the index has a record of the page or the page's
// records go to another indexer (a shard this one does not take). The
// caller holds no lock.
func (ix *Indexer) oweWithheld(due []*pb.PendingCrawl, ids [][16]byte) {
	if ix.cfg.withheldPerHour == 0 || len(due) == 0 {
		return
	}
	var self peer.ID
	if ix.o != nil {
		self = ix.o.Host().ID()
	}
	// A page the index holds a record of (or the tombstone of one) was
	// crawled before: its node, finding it unchanged (or gone, or
	// noindex now), makes no new record, and is not to blame.
	var unseen []*pb.PendingCrawl
	var unseenIDs [][16]byte
	// Nor is a page of a shard this indexer does not take: its record
	// goes to another indexer, and this one never sees it.
	for i, pc := range due {
		link := pc.GetRequest().GetLink()
		if ix.take != nil && !ix.take[results.ShardOf(egress.HostOf(link), ix.cfg.shards)] {
			continue
		}
		_, err := ix.x.Get(ix.ctx, link)
		if errors.Is(err, index.ErrNotFound) {
			unseen, unseenIDs = append(unseen, pc), append(unseenIDs, ids[i])
		}
	}
	due, ids = unseen, unseenIDs
	if len(due) == 0 {
		return
	}
	now := ix.cfg.now()
	var owedIDs [][16]byte
	var owed []*pb.WithheldOwed
	for i, pc := range due {
		if wo := ix.owedOf(pc, self, now); wo != nil {
			owedIDs, owed = append(owedIDs, ids[i]), append(owed, wo)
		}
	}
	ix.owed.mu.Lock()
	_, lost, err := ix.owed.keep(owedIDs, owed)
	ix.owed.mu.Unlock()
	ix.stats.withheldLost.Add(uint64(lost))
	if err != nil {
		ix.log.Warn("keeping withholding notices failed", "error", err)
		return
	}
	ix.owed.kick()
}

// owedOf returns the notice owed about the overdue pending request pc at
// now, or nil: the node it went to signed a receipt of it (a notice with
// the receipt), or the node it goes to has not taken it since a
// submission the patience ago (a refused notice, without one: pc is due
// again a patience after each submission; half of it is the bound, for
// the moments between noting the time and sending) and is not busy with
// its host (it delivered a record of the host since, for twice the
// patience at most: busy.go). self, this indexer's own crawler, is owed
// none.
func (ix *Indexer) owedOf(pc *pb.PendingCrawl, self peer.ID, now time.Time) *pb.WithheldOwed {
	link := pc.GetRequest().GetLink()
	if h, err := peer.IDFromBytes(pc.GetHolder()); err == nil && h != self && len(pc.GetReceipt()) > 0 {
		return &pb.WithheldOwed{Url: link, Holder: pc.GetHolder(), AskedMs: pc.GetReceiptMs(), Receipt: pc.GetReceipt(), NextMs: now.UnixMilli()}
	}
	since := time.UnixMilli(pc.GetRefusedMs())
	if h, err := peer.IDFromBytes(pc.GetRefusedBy()); err == nil && h != self && now.Sub(since) >= ix.cfg.patience/2 && !ix.busy(h, link, since, now) {
		return &pb.WithheldOwed{Url: link, Holder: pc.GetRefusedBy(), AskedMs: pc.GetRefusedMs(), Refused: true, NextMs: now.UnixMilli()}
	}
	return nil
}

// withheldLoop sends the notices owed when they are due, until Close.
func (ix *Indexer) withheldLoop() {
	ix.owed.run(ix.ctx, min(max(ix.cfg.patience/16, time.Second), time.Minute), ix.sendOwed)
}

// sendOwed sends the notices due (at most owedPerRound).
func (ix *Indexer) sendOwed(ctx context.Context) {
	ids, list, _ := ix.owed.dueAt(ix.cfg.now(), owedPerRound)
	for i, wo := range list {
		if ctx.Err() != nil {
			return
		}
		ix.sendNotice(ctx, ids[i], wo)
	}
}

// sendNotice sends one notice owed, or drops it when the request it is
// about was answered (or given up), and updates or drops it by the answer.
func (ix *Indexer) sendNotice(ctx context.Context, id [16]byte, wo *pb.WithheldOwed) {
	ix.pend.mu.Lock()
	pending := ix.pend.has(id)
	ix.pend.mu.Unlock()
	holder, err := peer.IDFromBytes(wo.GetHolder())
	now := ix.cfg.now()
	if pending && wo.GetRefused() {
		// Refused: only while the node still has not taken it, nor is
		// busy with its host (busy.go).
		pending = ix.refusedBy(id) == holder && !ix.busy(holder, wo.GetUrl(), time.UnixMilli(wo.GetAskedMs()), now)
	}
	if !pending || err != nil || wo.GetTries() >= maxOwedTries {
		ix.dropOwed(id)
		return
	}
	if !ix.wbud.spend(holder, ix.cfg.withheldPerHour, now) {
		ix.delayOwed(id, wo, now.Add(time.Minute), false)
		return
	}
	v, err := ix.notice(ctx, wo, holder)
	if ctx.Err() != nil && ix.ctx.Err() != nil {
		return // shutting down: still owed
	}
	ix.stats.withheldSent.Add(1)
	if err != nil {
		ix.log.Debug("withholding notice failed", "node", holder, "url", wo.GetUrl(), "error", err)
		ix.delayOwed(id, wo, now.Add(time.Minute<<min(wo.GetTries(), 6)), true)
		return
	}
	ix.log.Debug("withholding notice answered", "node", holder, "url", wo.GetUrl(), "result", v.Result.String(),
		"coordinator", v.Coordinator, "deputy", v.Deputy)
	switch v.Result {
	case overlay.WithheldNoted:
		ix.delayOwed(id, wo, now.Add(max(v.Retry, time.Second)), true)
		return
	case overlay.WithheldTakenBack:
		ix.stats.withheldTaken.Add(1)
		ix.log.Info("subnet taken back from a node that left a crawl request unanswered", "node", holder, "url", wo.GetUrl(),
			"coordinator", v.Coordinator)
		ix.dueNow(id)
	case overlay.WithheldNotHolder:
		ix.dueNow(id) // the subnet moved: submit it to its node now
	case overlay.WithheldTaken:
		// The node took the request from the coordinator: it is held to
		// its receipt from now on, as if it had taken it from this
		// indexer.
		ix.tookFromCoordinator(id, holder, wo.GetUrl(), requests.Receipt{At: v.ReceiptAt, Sig: v.Receipt})
	}
	ix.dropOwed(id)
}

// refusedBy returns the node that has not taken pending request id, if
// any.
func (ix *Indexer) refusedBy(id [16]byte) peer.ID {
	var pc *pb.PendingCrawl
	err := ix.db.View(func(txn *badger.Txn) (err error) {
		pc, err = ix.pend.get(txn, id)
		return err
	})
	if err != nil {
		return ""
	}
	return peer.ID(pc.GetRefusedBy())
}

// tookFromCoordinator records in pending request id that node took it,
// with receipt r, when the coordinator of a refused notice sent it.
func (ix *Indexer) tookFromCoordinator(id [16]byte, node peer.ID, link string, r requests.Receipt) {
	now := ix.cfg.now()
	_, err := ix.pend.change(id, func(pc *pb.PendingCrawl) { setHolder(pc, node, link, r, now) })
	if err != nil && !closedDB(err) {
		ix.log.Warn("noting a crawl request taken from a coordinator failed", "error", err)
	}
}

// notice resolves the URL's host and sends the notice.
func (ix *Indexer) notice(ctx context.Context, wo *pb.WithheldOwed, holder peer.ID) (overlay.WithheldVerdict, error) {
	ctx, cancel := context.WithTimeout(ctx, withheldTimeout)
	defer cancel()
	addr, err := ix.cfg.resolve(ctx, egress.HostOf(wo.GetUrl()))
	if err != nil {
		return overlay.WithheldVerdict{}, err
	}
	return ix.o.Withheld(ctx, overlay.WithheldNotice{Addr: addr, URL: wo.GetUrl(), Holder: holder,
		AskedAt: time.UnixMilli(wo.GetAskedMs()), Receipt: wo.GetReceipt(), Refused: wo.GetRefused()})
}

func (ix *Indexer) delayOwed(id [16]byte, wo *pb.WithheldOwed, next time.Time, tried bool) {
	wo.NextMs = next.UnixMilli()
	if tried {
		wo.Tries++
	}
	if err := ix.owed.save(id, wo); err != nil && !closedDB(err) {
		ix.log.Warn("updating a withholding notice failed", "error", err)
	}
}

// dropOwed drops notice id, owed no more.
func (ix *Indexer) dropOwed(id [16]byte) {
	if err := ix.owed.drop(id); err != nil && !closedDB(err) {
		ix.log.Warn("dropping a withholding notice failed", "error", err)
	}
}

// dueNow makes pending request id due at once, without using an attempt
// and forgetting the node it went to, and wakes the loop that submits it.
func (ix *Indexer) dueNow(id [16]byte) {
	now := ix.cfg.now()
	kept, err := ix.pend.change(id, func(pc *pb.PendingCrawl) {
		// Not overdue: the node it went to no longer holds the subnet
		// (no notice is owed about it when it is submitted again).
		pc.NextMs, pc.Holder, pc.Receipt, pc.ReceiptMs = now.UnixMilli(), nil, nil, 0
		pc.RefusedBy, pc.RefusedMs = nil, 0
		if pc.Attempts > 0 {
			pc.Attempts-- // the submission to the node that withheld it does not count
		}
	})
	if err != nil {
		ix.log.Debug("making a crawl request due failed", "error", err)
		return
	}
	if kept {
		ix.pend.kick()
	}
}

// noteHolders records, in the pending requests of the links res sent, the
// node each went to, when, and its receipt.
func (ix *Indexer) noteHolders(res requests.SubmitResult) {
	if len(res.To) == 0 || ix.cfg.attempts <= 1 {
		return
	}
	now := ix.cfg.now()
	links := slices.Collect(maps.Keys(res.To))
	err := ix.updateLinks(links, func(i int, pc *pb.PendingCrawl) {
		setHolder(pc, res.To[links[i]], links[i], res.Receipts[links[i]], now)
	})
	if err != nil && !closedDB(err) {
		ix.log.Warn("noting where crawl requests went failed", "error", err)
	}
}

// updateLinks applies f(i, pc) to the pending request pc of each links[i]
// (as submitted, normalized first) that is kept, and stores it, in
// transactions of pendingPerRound requests.
func (ix *Indexer) updateLinks(links []string, f func(i int, pc *pb.PendingCrawl)) error {
	ix.pend.mu.Lock()
	defer ix.pend.mu.Unlock()
	var ids [][16]byte
	var at []int // links[at[j]] is the link of ids[j]
	for i, link := range links {
		if l, err := crawl.NormalizeURL(link); err == nil {
			if id := pendingID(l); ix.pend.has(id) {
				ids, at = append(ids, id), append(at, i)
			}
		}
	}
	return ix.pend.updateAll(ids, pendingPerRound, func(j int, pc *pb.PendingCrawl) { f(at[j], pc) })
}

// setHolder records in pc that it went to node at now as link, with its
// receipt r. The receipt is kept only when it signs pc's link, which a
// notice names: a request first submitted with a link that is not
// normalized has none until it is submitted again from pc.
func setHolder(pc *pb.PendingCrawl, node peer.ID, link string, r requests.Receipt, now time.Time) {
	pc.Holder, pc.SentMs, pc.Receipt, pc.ReceiptMs = []byte(node), now.UnixMilli(), nil, 0
	pc.RefusedBy, pc.RefusedMs = nil, 0
	if len(r.Sig) > 0 && link == pc.GetRequest().GetLink() {
		pc.Receipt, pc.ReceiptMs = r.Sig, r.At.UnixMilli()
	}
}

// noteRefusal records in pc that node would not take it at now: since
// now, unless the same node has not since before.
func noteRefusal(pc *pb.PendingCrawl, node peer.ID, now time.Time) {
	if string(pc.GetRefusedBy()) != string(node) {
		pc.RefusedBy, pc.RefusedMs = []byte(node), now.UnixMilli()
	}
}

// noteRefusals records, in the pending requests of the links Submit could
// not deliver to the nodes owning their subnets, the node that would not
// take each and since when (noteRefusal); one not taken now is sent
// again within notTakenRetry.
func (ix *Indexer) noteRefusals(res requests.SubmitResult) {
	if len(res.Failed) == 0 || ix.cfg.attempts <= 1 {
		return
	}
	var failed []requests.SubmitFailure // those with the node that would not take them
	var links []string
	for _, f := range res.Failed {
		if f.Node != "" {
			failed, links = append(failed, f), append(links, f.Link)
		}
	}
	now := ix.cfg.now()
	next := now.Add(ix.notTakenWait()).UnixMilli()
	err := ix.updateLinks(links, func(i int, pc *pb.PendingCrawl) {
		noteRefusal(pc, failed[i].Node, now)
		if errors.Is(failed[i].Err, requests.ErrNotTaken) {
			pc.NextMs = min(pc.GetNextMs(), next) // sent again sooner (notTakenRetry)
		}
	})
	if err != nil && !closedDB(err) {
		ix.log.Warn("noting crawl requests not taken failed", "error", err)
	}
}

// Owed returns the number of withholding notices owed.
func (ix *Indexer) Owed() int { return ix.owed.Len() }
