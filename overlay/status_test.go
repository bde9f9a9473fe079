package overlay

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestNonCrawlersAreNoCandidates: a peer announcing itself as an indexer
// with no capacity is dropped from the delegation candidates, and so is a
// coordinator that does not probe; crawlers stay. A NoCrawl peer is no
// candidate for itself and claims no own subnet.
func TestNonCrawlersAreNoCandidates(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		fast := Announce(time.Second)
		nodes := []*node{r.node(0, fast), r.node(1, fast), r.node(2, Announce(time.Second), NoCrawl())}
		joinSwarm(t, nodes)
		crawler, indexer := nodes[1].h.ID(), nodes[2].h.ID()
		o := nodes[0].o
		eventually(t, 20*time.Second, func() error {
			if !slices.ContainsFunc(o.Peers(), func(p PeerInfo) bool { return p.ID == crawler }) {
				return fmt.Errorf("the crawler's announcement has not arrived")
			}
			if o.mayCrawl(indexer) {
				return fmt.Errorf("the indexer is still a candidate")
			}
			return nil
		})
		if slices.ContainsFunc(o.Peers(), func(p PeerInfo) bool { return p.ID == indexer }) {
			t.Error("the indexer is among the announced crawlers")
		}
		if !o.mayCrawl(crawler) || !o.mayCrawl(o.h.ID()) {
			t.Error("a crawler, or this probing node, is no candidate")
		}
		// The indexer has a prober, as any rig node, and still takes no
		// subnet, its own included.
		ix := nodes[2].o
		if ix.cfg.prober == nil || ix.mayCrawl(ix.h.ID()) {
			t.Error("a NoCrawl peer is a candidate for itself")
		}
		if d, err := ix.ClaimOwn(t.Context()); err != nil || d.Node != "" || len(ix.Owned()) != 0 {
			t.Errorf("a NoCrawl peer claimed %+v (%v), holds %v", d, err, ix.Owned())
		}
		o.cfg.prober = nil
		if o.mayCrawl(o.h.ID()) {
			t.Error("a node that does not probe is a candidate for itself")
		}
	})
}
