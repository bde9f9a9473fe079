package overlay

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestNonCrawlersAreNoCandidates: a peer announcing itself as an indexer
// with no capacity is dropped from the delegation candidates, and so is a
// coordinator that does not probe; crawlers stay.
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
		o.cfg.prober = nil
		if o.mayCrawl(o.h.ID()) {
			t.Error("a node that does not probe is a candidate for itself")
		}
	})
}
