package indexer

import (
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/egress"
)

// Busy nodes. A node that will not take a crawl request now
// (requests.ErrNotTaken) may be refusing, or busy: its queue for the host
// is full (crawl.Crawler.Promise), which an indexer that seeds many pages
// of one host, or of one slow host, makes honestly. A busy node keeps
// delivering the host's pages; one that refuses delivers none. So a
// refusal counts against a node (owedOf) only while it has delivered no
// record of the request's host since it began, or once it has lasted
// twice the patience (below). The indexer remembers, in memory, when each
// node last delivered a record of each host, for at most maxHostRecords
// pairs; after a restart it knows none, and a busy node may be sent a
// refused notice, which it answers by taking the coordinator's request (a
// judge's request has more room).

// A node busy with a host is spared refused notices for twice the
// patience at most (busy): a coordinator asks a node for one page of a
// host per grace (overlay/withheldserve.go), which a node busy with the host
// takes (a judge's request has more room), so a notice costs it little;
// without the bound a node that delivered a page of a host now and then
// could refuse the rest of its requests and never be asked.

// maxHostRecords bounds the (node, host) pairs remembered.
const maxHostRecords = 1 << 16

// hostRecords is when each node last delivered a record of each host.
type hostRecords struct {
	mu sync.Mutex
	m  map[string]time.Time // node "\x00" host -> last record
}

func hostRecordKey(node peer.ID, host string) string { return string(node) + "\x00" + host }

// note remembers that node delivered recs at at. When the table is full,
// the pairs of the older half of its span are forgotten.
func (h *hostRecords) note(node peer.ID, recs []crawl.Record, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]time.Time{}
	}
	for i := range recs {
		host := egress.HostOf(recs[i].URL)
		if host == "" {
			continue
		}
		k := hostRecordKey(node, host)
		if _, ok := h.m[k]; !ok && len(h.m) >= maxHostRecords {
			h.evict()
		}
		h.m[k] = at
	}
}

// evict forgets the pairs older than the middle of the table's span.
// The caller holds mu.
func (h *hostRecords) evict() {
	var oldest, newest time.Time
	for _, t := range h.m {
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
		if t.After(newest) {
			newest = t
		}
	}
	mid := oldest.Add(newest.Sub(oldest) / 2)
	for k, t := range h.m {
		if !t.After(mid) {
			delete(h.m, k)
		}
	}
}

// since reports whether node delivered a record of link's host after t.
func (h *hostRecords) since(node peer.ID, link string, t time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	at, ok := h.m[hostRecordKey(node, egress.HostOf(link))]
	return ok && at.After(t)
}

// busy reports whether node, refusing link since then, counts as busy with
// its host at now: it delivered a record of the host since, and it has
// refused for less than twice the patience.
func (ix *Indexer) busy(node peer.ID, link string, since, now time.Time) bool {
	return now.Sub(since) < 2*ix.cfg.patience && ix.hosts.since(node, link, since)
}
