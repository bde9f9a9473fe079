package indexer

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"net/url"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/internal/check"
	"github.com/micra-net/micra/requests"
	rpb "github.com/micra-net/micra/requests/pb"
	"github.com/micra-net/micra/results/pb"
)

// Durable crawl requests. A node that dies for good takes the URLs queued
// in its frontier with it; its subnets go to other nodes, but nobody knows
// which pages were still to crawl. The indexer that submitted a crawl
// request therefore keeps it (in badger) until a record of the page
// arrives, and submits it again — to whichever node owns the subnet by
// then — when none has come after the patience (doubling each time, at most
// a day), up to a number of attempts. A page that yields no record (robots
// forbid it, it is gone, it says noindex) costs those attempts and is then
// given up with a warning.

// Bounds of the pending table.
const (
	maxPending      = 1 << 18 // requests kept; beyond, new ones are sent but not kept (warned)
	pendingPerRound = 1024    // requests submitted again per round
)

// CrawlPatience sets how long after submitting a crawl request the indexer
// waits for a record of the page before submitting it again (default 30
// minutes; doubled after each attempt, at most 24 h), and how many times
// it submits it in all (default 6; 1 keeps nothing).
func CrawlPatience(first time.Duration, attempts int) Option {
	return func(c *config) error {
		if err := cmp.Or(check.AtLeast("crawl patience", first, time.Second), check.Range("crawl attempts", attempts, 1, 64)); err != nil {
			return err
		}
		c.patience, c.attempts = first, attempts
		return nil
	}
}

// pendingID is the id of the pending request of link (normalized): the
// first 16 bytes of its SHA-256.
func pendingID(link string) [16]byte {
	s := sha256.Sum256([]byte(link))
	return [16]byte(s[:16])
}

// keepPending stores the requests not kept yet, as submitted now.
func (ix *Indexer) keepPending(reqs []crawl.Request) {
	if ix.cfg.attempts <= 1 {
		return
	}
	now := ix.cfg.now()
	var ids [][16]byte
	var pcs []*pb.PendingCrawl
	for _, r := range reqs {
		link, err := crawl.NormalizeURL(r.Link)
		if err != nil {
			continue // requests.Submit reports it
		}
		ids = append(ids, pendingID(link))
		pcs = append(pcs, &pb.PendingCrawl{
			Request: &rpb.CrawlRequest{Link: link, Depth: int32(r.Depth), Owners: r.Owners},
			FirstMs: now.UnixMilli(), NextMs: now.Add(ix.cfg.patience).UnixMilli(), Attempts: 1,
		})
	}
	added, err := ix.keep(ids, pcs)
	if err != nil {
		ix.log.Warn("keeping crawl requests failed; they are sent once", "error", err)
		return
	}
	if n := ix.stats.pendingLost.Load(); n > 0 && added == 0 && len(reqs) > 0 {
		ix.log.Warn("pending crawl requests at their bound; new ones are sent once", "bound", maxPending)
	}
}

// keep stores pending crawl requests (new ones or updates) under the
// table's lock and counts those its bound drops.
func (ix *Indexer) keep(ids [][16]byte, pcs []*pb.PendingCrawl) (added int, err error) {
	ix.pend.mu.Lock()
	defer ix.pend.mu.Unlock()
	added, lost, err := ix.pend.keep(ids, pcs)
	ix.stats.pendingLost.Add(uint64(lost))
	return added, err
}

// allowedHosts returns the requests whose host the overlay's egress policy
// does not refuse before resolution (an IP literal of a special-purpose
// address, localhost): those are never kept. Names that resolve to such an
// address are known only once Submit resolved them (forgetPending).
func (ix *Indexer) allowedHosts(reqs []crawl.Request) []crawl.Request {
	policy := ix.o.EgressPolicy()
	out := make([]crawl.Request, 0, len(reqs))
	for _, r := range reqs {
		if u, err := url.Parse(r.Link); err == nil && policy.CheckHost(u.Hostname()) != nil {
			continue
		}
		out = append(out, r)
	}
	return out
}

// isPending reports whether a request for link is kept, waiting for a
// record.
func (ix *Indexer) isPending(link string) bool {
	l, err := crawl.NormalizeURL(link)
	if err != nil {
		return false
	}
	ix.pend.mu.Lock()
	defer ix.pend.mu.Unlock()
	return ix.pend.has(pendingID(l))
}

// forgetPending removes the pending requests of links (as submitted).
func (ix *Indexer) forgetPending(links []string) {
	if len(links) == 0 {
		return
	}
	ix.pend.mu.Lock()
	defer ix.pend.mu.Unlock()
	var gone [][16]byte
	for _, l := range links {
		if link, err := crawl.NormalizeURL(l); err == nil {
			if id := pendingID(link); !slices.Contains(gone, id) && ix.pend.has(id) {
				gone = append(gone, id)
			}
		}
	}
	if err := ix.pend.remove(gone); err != nil {
		ix.log.Warn("forgetting refused crawl requests failed; they are refused again when resubmitted", "error", err)
	}
}

// satisfied removes the pending requests that stored records answer (by
// URL or final URL).
func (ix *Indexer) satisfied(recs []crawl.Record) {
	ix.pend.mu.Lock()
	defer ix.pend.mu.Unlock()
	if len(ix.pend.ids) == 0 {
		return
	}
	var done [][16]byte
	for i := range recs {
		for _, u := range []string{recs[i].URL, recs[i].FinalURL} {
			if id := pendingID(u); u != "" && !slices.Contains(done, id) && ix.pend.has(id) {
				done = append(done, id)
			}
		}
	}
	if err := ix.pend.remove(done); err != nil {
		ix.log.Warn("clearing answered crawl requests failed; they may be sent again", "error", err)
		return
	}
	ix.stats.pendingDone.Add(uint64(len(done)))
}

// pendingLoop submits overdue requests again until Close.
func (ix *Indexer) pendingLoop() {
	ix.pend.run(ix.ctx, min(max(ix.cfg.patience/4, time.Second), time.Minute), ix.resubmit)
}

// notTakenRetry is how soon a request its node did not take now
// (requests.ErrNotTaken: its queue for the host is full) is sent again,
// at most: a node promises a quarter hour of a host's pages at a time
// (crawl.Crawler.Promise), so an indexer seeding many pages of one host
// has them taken at about the pace the node crawls them, not one queue's
// worth per patience.
const notTakenRetry = 5 * time.Minute

// notTakenWait is how long a request not taken waits to be sent again.
func (ix *Indexer) notTakenWait() time.Duration { return min(ix.cfg.patience, notTakenRetry) }

// scheduleNext sets when pc, just submitted again at now, is due next: a
// delivered request has used an attempt and waits the patience doubled
// per attempt (at most a day); one its node did not take now waits
// notTakenWait, one that could not be delivered the patience, neither
// using an attempt.
func (ix *Indexer) scheduleNext(pc *pb.PendingCrawl, now time.Time, failed, notTaken bool) {
	wait := ix.cfg.patience
	switch {
	case notTaken:
		wait = ix.notTakenWait()
	case !failed:
		pc.Attempts++
		wait = ix.cfg.patience << min(pc.Attempts-1, 16)
	}
	pc.NextMs = now.Add(min(wait, 24*time.Hour)).UnixMilli()
}

// maxPendingAge is how long a request waits in all for a record: one whose
// deliveries keep failing (its subnet's owner unreachable, no coordinator
// answering) is given up after it, attempts or not.
const maxPendingAge = 7 * 24 * time.Hour

// resubmit sends the overdue pending requests again (at most
// pendingPerRound), and gives up those out of attempts or time. A request
// that could not be delivered does not use an attempt: it is tried again
// after the patience.
func (ix *Indexer) resubmit(ctx context.Context) {
	now := ix.cfg.now()
	ids, list, err := ix.pend.dueAt(now, pendingPerRound)
	if err != nil || len(list) == 0 {
		return
	}
	var reqs []crawl.Request
	var keep, gaveUp, overdueIDs [][16]byte
	var kept, overdue []*pb.PendingCrawl
	for i, pc := range list {
		if int(pc.GetAttempts()) >= ix.cfg.attempts || now.Sub(time.UnixMilli(pc.GetFirstMs())) > maxPendingAge {
			gaveUp = append(gaveUp, ids[i])
			ix.log.Warn("crawl request given up: no record of the page after every attempt", "url", pc.GetRequest().GetLink(),
				"attempts", pc.GetAttempts(), "since", time.UnixMilli(pc.GetFirstMs()).UTC())
			continue
		}
		r := pc.GetRequest()
		reqs = append(reqs, crawl.Request{Link: r.GetLink(), Depth: int(r.GetDepth()), Owners: r.GetOwners()})
		keep, kept = append(keep, ids[i]), append(kept, pc)
		if len(pc.GetHolder()) > 0 || len(pc.GetRefusedBy()) > 0 {
			overdue, overdueIDs = append(overdue, pc), append(overdueIDs, ids[i])
		}
	}
	// The node the request went to had the patience to answer it and did
	// not: the coordinator of its subnet is told (withheld.go).
	ix.oweWithheld(overdue, overdueIDs)
	sent, ok := ix.submitAgain(ctx, reqs)
	if !ok {
		return
	}
	now = ix.cfg.now() // requests.Submit may have taken a while
	ix.pend.mu.Lock()
	defer ix.pend.mu.Unlock()
	err = ix.db.Update(func(txn *badger.Txn) error {
		for i, id := range keep {
			if !ix.pend.has(id) {
				continue // a record arrived meanwhile
			}
			// The stored request as it is now: it may have been made
			// due meanwhile (its subnet moved, withheld.go).
			cur, err := ix.pend.get(txn, id)
			if err != nil {
				continue
			}
			ix.noteResubmitted(cur, kept[i], sent, now)
			if err := ix.pend.set(txn, id, cur); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = ix.pend.remove(gaveUp)
	}
	if err != nil {
		if !closedDB(err) {
			ix.log.Warn("updating pending crawl requests failed", "error", err)
		}
		return
	}
	ix.stats.gaveUp.Add(uint64(len(gaveUp)))
}

// resubmission is what requests.Submit said of the requests resubmit sent
// again, by link.
type resubmission struct {
	failed, notTaken map[string]bool
	refusedBy, to    map[string]peer.ID
	receipts         map[string]requests.Receipt
}

// submitAgain submits reqs again, asking each subnet's coordinator for its
// owner: the cached owner may be the node that died with the requests. It
// reports false when ctx ended meanwhile.
func (ix *Indexer) submitAgain(ctx context.Context, reqs []crawl.Request) (resubmission, bool) {
	s := resubmission{failed: map[string]bool{}, notTaken: map[string]bool{}, refusedBy: map[string]peer.ID{}}
	if len(reqs) == 0 {
		return s, true
	}
	res, err := requests.Submit(ctx, ix.o, reqs, append(ix.cfg.requests(), requests.Fresh())...)
	if err != nil && ctx.Err() != nil {
		return s, false
	}
	for _, f := range res.Failed {
		s.failed[f.Link] = true
		s.notTaken[f.Link] = errors.Is(f.Err, requests.ErrNotTaken)
		if f.Node != "" {
			s.refusedBy[f.Link] = f.Node
		}
	}
	s.to, s.receipts = res.To, res.Receipts
	ix.stats.resubmitted.Add(uint64(len(reqs) - len(res.Failed)))
	ix.log.Info("crawl requests without records submitted again", "sent", len(reqs)-len(res.Failed), "failed", len(res.Failed))
	return s, true
}

// noteResubmitted records in cur, the stored request that was due as
// before, where s says it went (or who refused it) at now, and when it is
// due next, unless it was made due again meanwhile.
func (ix *Indexer) noteResubmitted(cur, before *pb.PendingCrawl, s resubmission, now time.Time) {
	link := before.GetRequest().GetLink()
	if node, ok := s.to[link]; ok {
		setHolder(cur, node, link, s.receipts[link], now)
	} else if node, ok := s.refusedBy[link]; ok {
		noteRefusal(cur, node, now)
	}
	if cur.GetNextMs() == before.GetNextMs() {
		ix.scheduleNext(cur, now, s.failed[link], s.notTaken[link])
	}
}

// Pending returns the number of crawl requests waiting for a record.
func (ix *Indexer) Pending() int { return ix.pend.Len() }
