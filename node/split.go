package node

import (
	"context"
	"net/netip"
	"time"

	"github.com/micra-net/micra/crawl"
)

// Splitting a range that is not one place (overlay.Split): the crawler's
// Calibrator judges each server once, from its first fetches, against the
// probe this node won the delegation holding it with (wonRTT); a server
// much farther has the part of the range holding it searched apart, one
// search at a time, so that a cloud's range crawled from one node does
// not set off a burst of searches.

// Split limits.
const (
	splitQueue = 256             // far servers waiting for their search; more are dropped
	splitLimit = 2 * time.Minute // one search
)

// wonRTT is the Calibrator's Reference: the RTT with which this node won
// the delegation holding addr, when it holds one and knows it.
func (n *Node) wonRTT(addr netip.Addr) (time.Duration, bool) {
	o := n.ov()
	if o == nil {
		return 0, false
	}
	d, ok := o.Cached(addr)
	if !ok || d.Orphaned || d.Node != n.h.ID() {
		return 0, false
	}
	rtt, ok := o.WonRTT(d.Subnet)
	if f := n.opt.probeScale; ok && f > 0 {
		rtt = time.Duration(float64(rtt) * f) // probes are reported unscaled (ProbeScale)
	}
	return rtt, ok
}

// onFar queues a far server for its split; a full queue drops it.
func (n *Node) onFar(s crawl.Slow) {
	select {
	case n.splitQ <- s:
	default:
		n.log.Debug("split queue full; far server left with its range's node", "addr", s.Addr, "rtt", s.RTT, "won with", s.Baseline)
	}
}

// splitLoop asks, one at a time, for the parts holding the far servers
// queued to be searched apart. It runs until ctx ends.
func (n *Node) splitLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-n.splitQ:
			o := n.ov()
			if o == nil {
				continue
			}
			observed := s.RTT
			if f := n.opt.probeScale; f > 0 {
				observed = time.Duration(float64(observed) / f) // as probes are reported
			}
			sctx, cancel := context.WithTimeout(ctx, splitLimit)
			d, err := o.Split(sctx, s.Page, s.Addr, observed)
			cancel()
			if err != nil {
				n.log.Info("splitting a range for a far server failed", "addr", s.Addr, "error", err)
				continue
			}
			n.log.Info("far server's part searched apart (the whole range when the server is the one it was decided for)", "addr", s.Addr, "rtt", s.RTT, "won with", s.Baseline,
				"part", d.Subnet.String(), "to", d.Node)
		}
	}
}
