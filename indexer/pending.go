package indexer

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/crawl"
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
		if first < time.Second || attempts < 1 || attempts > 64 {
			return fmt.Errorf("crawl patience %v, %d attempts: want at least a second and 1..64 attempts", first, attempts)
		}
		c.patience, c.attempts = first, attempts
		return nil
	}
}

// pendingSet mirrors the keys of the pending table in memory, so that
// storing a record costs no read when no request waits for it.
type pendingSet struct {
	mu sync.Mutex
	m  map[[16]byte]struct{}
}

func pendingID(link string) [16]byte {
	s := sha256.Sum256([]byte(link))
	return [16]byte(s[:16])
}

// loadPending reads the pending table's keys.
func (ix *Indexer) loadPending() error {
	ix.pend.m = map[[16]byte]struct{}{}
	return ix.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: pendingPrefix()})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if id, ok := parsePendingKey(it.Item().Key()); ok {
				ix.pend.m[id] = struct{}{}
			}
		}
		return nil
	})
}

// keepPending stores the requests not kept yet, as submitted now.
func (ix *Indexer) keepPending(reqs []crawl.Request) {
	if ix.cfg.attempts <= 1 {
		return
	}
	now := ix.cfg.now()
	ix.pend.mu.Lock()
	defer ix.pend.mu.Unlock()
	wb := ix.db.NewWriteBatch()
	defer wb.Cancel()
	var added [][16]byte
	for _, r := range reqs {
		link, err := crawl.NormalizeURL(r.Link)
		if err != nil {
			continue // requests.Submit reports it
		}
		id := pendingID(link)
		if _, ok := ix.pend.m[id]; ok {
			continue
		}
		if len(ix.pend.m)+len(added) >= maxPending {
			ix.stats.pendingLost.Add(1)
			continue
		}
		v, err := proto.Marshal(&pb.PendingCrawl{
			Request: &rpb.CrawlRequest{Link: link, Depth: int32(r.Depth), Owners: r.Owners},
			FirstMs: now.UnixMilli(), NextMs: now.Add(ix.cfg.patience).UnixMilli(), Attempts: 1,
		})
		if err == nil {
			err = wb.Set(pendingKey(id), v)
		}
		if err != nil {
			ix.log.Warn("keeping a crawl request failed; it is sent once", "url", link, "error", err)
			continue
		}
		added = append(added, id)
	}
	if err := wb.Flush(); err != nil {
		ix.log.Warn("keeping crawl requests failed; they are sent once", "error", err)
		return
	}
	for _, id := range added {
		ix.pend.m[id] = struct{}{}
	}
	if n := ix.stats.pendingLost.Load(); n > 0 && len(added) == 0 && len(reqs) > 0 {
		ix.log.Warn("pending crawl requests at their bound; new ones are sent once", "bound", maxPending)
	}
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

// forgetPending removes the pending requests of links (as submitted).
// isPending reports whether a request for link is kept, waiting for a
// record.
func (ix *Indexer) isPending(link string) bool {
	l, err := crawl.NormalizeURL(link)
	if err != nil {
		return false
	}
	ix.pend.mu.Lock()
	defer ix.pend.mu.Unlock()
	_, ok := ix.pend.m[pendingID(l)]
	return ok
}

func (ix *Indexer) forgetPending(links []string) {
	if len(links) == 0 {
		return
	}
	ix.pend.mu.Lock()
	defer ix.pend.mu.Unlock()
	var gone [][16]byte
	for _, l := range links {
		if link, err := crawl.NormalizeURL(l); err == nil {
			if id := pendingID(link); !slices.Contains(gone, id) {
				if _, ok := ix.pend.m[id]; ok {
					gone = append(gone, id)
				}
			}
		}
	}
	if err := ix.dropPending(gone); err != nil {
		ix.log.Warn("forgetting refused crawl requests failed; they are refused again when resubmitted", "error", err)
	}
}

// dropPending deletes the pending requests ids, from the table and its
// mirror. The caller holds ix.pend.mu.
func (ix *Indexer) dropPending(ids [][16]byte) error {
	if len(ids) == 0 {
		return nil
	}
	err := ix.db.Update(func(txn *badger.Txn) error {
		for _, id := range ids {
			if err := txn.Delete(pendingKey(id)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, id := range ids {
		delete(ix.pend.m, id)
	}
	return nil
}

// satisfied removes the pending requests that stored records answer (by
// URL or final URL).
func (ix *Indexer) satisfied(recs []crawl.Record) {
	ix.pend.mu.Lock()
	defer ix.pend.mu.Unlock()
	if len(ix.pend.m) == 0 {
		return
	}
	var done [][16]byte
	for i := range recs {
		for _, u := range []string{recs[i].URL, recs[i].FinalURL} {
			if id := pendingID(u); u != "" && !slices.Contains(done, id) {
				if _, ok := ix.pend.m[id]; ok {
					done = append(done, id)
				}
			}
		}
	}
	if err := ix.dropPending(done); err != nil {
		ix.log.Warn("clearing answered crawl requests failed; they may be sent again", "error", err)
		return
	}
	ix.stats.pendingDone.Add(uint64(len(done)))
}

// pendingLoop submits overdue requests again until Close.
func (ix *Indexer) pendingLoop() {
	every := min(max(ix.cfg.patience/4, time.Second), time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ix.ctx.Done():
			return
		case <-t.C:
		case <-ix.pendKick: // a subnet moved (withheld.go)
		}
		ix.resubmit(ix.ctx)
	}
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
	type due struct {
		id [16]byte
		pc *pb.PendingCrawl
	}
	var list []due
	err := ix.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: pendingPrefix(), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid() && len(list) < pendingPerRound; it.Next() {
			id, ok := parsePendingKey(it.Item().Key())
			if !ok {
				continue
			}
			var pc pb.PendingCrawl
			if err := it.Item().Value(func(v []byte) error { return proto.Unmarshal(v, &pc) }); err != nil {
				continue
			}
			if pc.GetNextMs() <= now.UnixMilli() {
				list = append(list, due{id, &pc})
			}
		}
		return nil
	})
	if err != nil || len(list) == 0 {
		return
	}
	var reqs []crawl.Request
	var keep []due
	var gaveUp [][16]byte
	var overdue []*pb.PendingCrawl
	var overdueIDs [][16]byte
	for _, d := range list {
		if int(d.pc.GetAttempts()) >= ix.cfg.attempts || now.Sub(time.UnixMilli(d.pc.GetFirstMs())) > maxPendingAge {
			gaveUp = append(gaveUp, d.id)
			ix.log.Warn("crawl request given up: no record of the page after every attempt", "url", d.pc.GetRequest().GetLink(),
				"attempts", d.pc.GetAttempts(), "since", time.UnixMilli(d.pc.GetFirstMs()).UTC())
			continue
		}
		r := d.pc.GetRequest()
		reqs = append(reqs, crawl.Request{Link: r.GetLink(), Depth: int(r.GetDepth()), Owners: r.GetOwners()})
		keep = append(keep, d)
		if len(d.pc.GetHolder()) > 0 || len(d.pc.GetRefusedBy()) > 0 {
			overdue, overdueIDs = append(overdue, d.pc), append(overdueIDs, d.id)
		}
	}
	// The node the request went to had the patience to answer it and did
	// not: the coordinator of its subnet is told (withheld.go).
	ix.oweWithheld(overdue, overdueIDs)
	failed := map[string]bool{}
	notTaken := map[string]bool{}
	refusedBy := map[string]peer.ID{}
	var to map[string]peer.ID
	var receipts map[string]requests.Receipt
	if len(reqs) > 0 {
		// The cached owner may be the node that died with the requests.
		res, err := requests.Submit(ctx, ix.o, reqs, append(ix.cfg.requests(), requests.Fresh())...)
		if err != nil && ctx.Err() != nil {
			return
		}
		for _, f := range res.Failed {
			failed[f.Link] = true
			notTaken[f.Link] = errors.Is(f.Err, requests.ErrNotTaken)
			if f.Node != "" {
				refusedBy[f.Link] = f.Node
			}
		}
		to, receipts = res.To, res.Receipts
		ix.stats.resubmitted.Add(uint64(len(reqs) - len(res.Failed)))
		ix.log.Info("crawl requests without records submitted again", "sent", len(reqs)-len(res.Failed), "failed", len(res.Failed))
	}
	now = ix.cfg.now() // requests.Submit may have taken a while
	ix.pend.mu.Lock()
	defer ix.pend.mu.Unlock()
	err = ix.db.Update(func(txn *badger.Txn) error {
		for _, d := range keep {
			if _, ok := ix.pend.m[d.id]; !ok {
				continue // a record arrived meanwhile
			}
			// The stored request as it is now: it may have been made
			// due meanwhile (its subnet moved, withheld.go).
			it, err := txn.Get(pendingKey(d.id))
			if err != nil {
				continue
			}
			var cur pb.PendingCrawl
			if it.Value(func(v []byte) error { return proto.Unmarshal(v, &cur) }) != nil {
				continue
			}
			link := d.pc.GetRequest().GetLink()
			if node, ok := to[link]; ok {
				setHolder(&cur, node, link, receipts[link], now)
			} else if node, ok := refusedBy[link]; ok {
				noteRefusal(&cur, node, now)
			}
			if cur.GetNextMs() == d.pc.GetNextMs() {
				ix.scheduleNext(&cur, now, failed[link], notTaken[link])
			}
			v, err := proto.Marshal(&cur)
			if err != nil {
				return err
			}
			if err := txn.Set(pendingKey(d.id), v); err != nil {
				return err
			}
		}
		for _, id := range gaveUp {
			if err := txn.Delete(pendingKey(id)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, badger.ErrDBClosed) {
		ix.log.Warn("updating pending crawl requests failed", "error", err)
		return
	}
	for _, id := range gaveUp {
		delete(ix.pend.m, id)
	}
	ix.stats.gaveUp.Add(uint64(len(gaveUp)))
}

// Pending returns the number of crawl requests waiting for a record.
func (ix *Indexer) Pending() int {
	ix.pend.mu.Lock()
	defer ix.pend.mu.Unlock()
	return len(ix.pend.m)
}
