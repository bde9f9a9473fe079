package overlay

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Coordinating returns the number of shards this node currently
// coordinates (holds as their single writer), for the dashboard and
// metrics. Shards it only replicates are not counted.
func (o *Overlay) Coordinating() int {
	n := 0
	for _, sh := range o.coord.heldShards() {
		sh.mu.Lock()
		if sh.owned {
			n++
		}
		sh.mu.Unlock()
	}
	return n
}

// noteNonCrawler records that p announced it does not crawl.
func (o *Overlay) noteNonCrawler(p peer.ID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.nonCrawlers == nil {
		o.nonCrawlers = map[peer.ID]time.Time{}
	}
	if _, ok := o.nonCrawlers[p]; !ok && len(o.nonCrawlers) >= maxAnnouncedPeers {
		for k, at := range o.nonCrawlers { // forget the stalest
			if time.Since(at) > 3*o.cfg.announce {
				delete(o.nonCrawlers, k)
			}
		}
		if len(o.nonCrawlers) >= maxAnnouncedPeers {
			return
		}
	}
	o.nonCrawlers[p] = time.Now()
	delete(o.peers, p)
	o.dropRTTRow(p)
}

// MayCrawl reports whether p may be given subnets as far as this node
// knows: false for a peer that announced it does not crawl (NoCrawl;
// until then it counts as a crawler), or that this node
// convicted by audits. It is safe for concurrent use.
func (o *Overlay) MayCrawl(p peer.ID) bool { return o.mayCrawl(p) }

// mayCrawl reports whether p may be given subnets: this node when it
// probes (has a Prober), any other peer unless it announced itself as an
// peer that does not crawl or this node convicted it by audits.
func (o *Overlay) mayCrawl(p peer.ID) bool {
	if p == o.h.ID() {
		return o.cfg.prober != nil && !o.cfg.noCrawl
	}
	if o.coord.convicted()[p] {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	_, non := o.nonCrawlers[p]
	return !non
}
