package node

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/overlay"
)

// Splitting a range that is not one place (overlay.Split): the crawler's
// Calibrator judges each server once, from its first fetches, against the
// probe this node won the delegation holding it with (wonRTT). A server
// whose fetches read much farther is probed, as a coordinator asks any
// node to probe it, and only when the probe too is far (the Calibrator's
// test) is the part of the range holding it searched apart, with the
// probe as this node's answer; one search at a time, so that a cloud's
// range crawled from one node does not set off a burst of searches.
//
// Why a probe: the search weighs this node's answer against the other
// nodes' probes, and a fetch's RTT is not a probe's. It is a GET's time to
// first byte, which waits for the server's work on a body a HEAD does not
// ask for, timed while the node crawls, its first fetches of every server
// at once; on the emulated Internet served at a time scale of 0.05, a
// millisecond of that reads as 20 ms. Answering with it, the node nearest
// to a server lost the part holding it to a farther node, after it had
// fetched its pages (TestNodeJoinCrawlRestart, about one run in ten: a
// server 78 ms from node 0 and 95 ms from node 1 measured 219 ms by node
// 0's fetches, 118 ms by node 1's probe). The probe costs a few HEADs to
// one server per far signal; a false signal costs a search and the other
// nodes' probes. A probe is a measurement too: on a machine busy enough
// that a millisecond of scheduling delay reads as 20 ms, that test still
// sees the part go to the farther node about one run in forty (78 ms
// against 95 ms), which is why it allows the range's holder to have
// fetched a server before the part holding it was split off.

// Split limits.
const (
	splitQueue = 256             // far servers waiting for their search; more are dropped
	splitLimit = 2 * time.Minute // one probe and search
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
			if _, _, err := n.splitFar(ctx, s); err != nil {
				n.log.Info("splitting a range for a far server failed", "addr", s.Addr, "error", err)
			}
		}
	}
}

// splitFar probes the far server of s and, when the probe confirms it is
// far from the RTT this node won the delegation holding it with, has the
// part of the range holding it searched apart (overlay.Split), the probe
// being this node's answer. split reports that the search ran; d is its
// delegation. Nothing is searched when the delegation holding the server
// is no longer this node's or the probe reads near.
func (n *Node) splitFar(ctx context.Context, s crawl.Slow) (d overlay.Delegation, split bool, err error) {
	o := n.ov()
	if o == nil {
		return overlay.Delegation{}, false, nil
	}
	ref, ok := n.wonRTT(s.Addr)
	if !ok {
		return overlay.Delegation{}, false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, splitLimit)
	defer cancel()
	rtt, err := n.cr.Fetcher().Probe(ctx, s.Page, crawl.DefaultProbeAttempts)
	if err != nil {
		return overlay.Delegation{}, false, fmt.Errorf("probing %s: %w", s.Page, err)
	}
	if !n.cal.Far(rtt, ref) {
		n.log.Debug("far server's probe is near: its range stays whole", "addr", s.Addr, "fetched in", s.RTT, "probe", rtt, "won with", ref)
		return overlay.Delegation{}, false, nil
	}
	observed := rtt
	if f := n.opt.probeScale; f > 0 {
		observed = time.Duration(float64(observed) / f) // as probes are reported
	}
	d, err = o.Split(ctx, s.Page, s.Addr, observed)
	if err != nil {
		return overlay.Delegation{}, false, err
	}
	n.log.Info("far server's part searched apart (the whole range when the server is the one it was decided for)", "addr", s.Addr,
		"fetched in", s.RTT, "probe", rtt, "won with", ref, "part", d.Subnet.String(), "to", d.Node)
	return d, true, nil
}
