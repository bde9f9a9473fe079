package delegate

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/subnet"
)

// subnetLoad estimates a new subnet's load in pages per day: the mean
// load per subnet that peers declare (load ÷ subnets), or the configured
// default when none declares both.
func (d *Delegator) subnetLoad(peers []overlay.PeerInfo) int64 {
	var sum float64
	n := 0
	for _, p := range peers {
		if p.Load > 0 && p.Subnets > 0 {
			sum += float64(p.Load) / float64(p.Subnets)
			n++
		}
	}
	if n == 0 {
		return int64(d.cfg.newLoad)
	}
	return max(int64(sum/float64(n)), 1)
}

// balance applies load balancing to the search's decision and returns the
// node that takes the subnet (see subnet.Balance). A hand-off is carried
// out with one REASSIGN; when it fails, or no probed node has room, the
// search runs once more without the nodes that are full.
func (d *Delegator) balance(ctx, budget context.Context, v *view, dec subnet.Decision, excluded map[peer.ID]bool) peer.ID {
	node := peer.ID(dec.Node)
	now := time.Now()
	pages := uint64(max(v.pages, 0))
	loads := map[string]subnet.Load{}
	var mine overlay.PeerInfo
	for _, p := range v.peers {
		if p.ID == node {
			mine = p
		}
		if p.Capacity == 0 {
			continue
		}
		l := max(int64(p.Load)+d.pending.sum(p.ID, now), 0)
		loads[string(p.ID)] = subnet.Load{Capacity: p.Capacity, Load: uint64(l)}
	}
	if loads[string(node)].Room(pages) {
		return node
	}
	// The chosen node's subnets this coordinator knows, with their probe
	// results: its shard, the organisation, and the block above the shard.
	v.block(v.tree.Parent(v.anchor))
	per := uint64(1)
	if mine.Subnets > 0 {
		per = max(mine.Load/uint64(mine.Subnets), 1)
	}
	var held []subnet.Holding
	for _, o := range v.owners {
		if o.node != string(node) {
			continue
		}
		r := v.tree.Range(o.id)
		h := subnet.Holding{Subnet: r, Pages: per}
		for n, p := range v.probes[r] {
			h.Probes = append(h.Probes, subnet.Probe{Node: n, RTT: p.rtt})
		}
		held = append(held, h)
	}
	var probes []subnet.Probe
	for n, p := range v.probes[v.tree.Range(v.req.Subnet)] {
		probes = append(probes, subnet.Probe{Node: n, RTT: p.rtt})
	}
	req := subnet.BalanceRequest{Node: string(node), Pages: pages, Probes: probes, Loads: loads, Held: held}
	if d.cfg.log.Enabled(ctx, slog.LevelDebug) {
		var hs []string
		for _, h := range held {
			hs = append(hs, fmt.Sprintf("%s (%d probes)", h.Subnet, len(h.Probes)))
		}
		d.cfg.log.Debug("load balancing: the nearest node is full", "subnet", v.tree.Range(v.req.Subnet).String(), "peer", node,
			"held", hs, "probes", len(probes), "nodes with a capacity", len(loads))
	}
	plan, err := subnet.Balance(req)
	if err != nil {
		return node
	}
	if h := plan.HandOff; h != nil {
		t, _ := v.tree.Find(h.Subnet)
		_, err := v.env.Reassign(ctx, t, node, peer.ID(h.To))
		if err == nil {
			d.stats.handOffs.Add(1)
			d.pending.add(peer.ID(h.To), int64(h.Pages), now, d.cfg.pendingTTL)
			d.pending.add(node, -int64(h.Pages), now, d.cfg.pendingTTL)
			d.cfg.log.Info("load balancing: subnet handed off", "subnet", h.Subnet.String(), "from", node, "to", peer.ID(h.To),
				"for", v.tree.Range(v.req.Subnet).String())
			return node
		}
		d.cfg.log.Debug("load balancing: hand-off failed", "subnet", h.Subnet.String(), "error", err)
		req.Held = nil
		if plan, err = subnet.Balance(req); err != nil {
			return node
		}
	}
	if !plan.Over {
		d.stats.second.Add(1)
		d.cfg.log.Debug("load balancing: second-best node", "subnet", v.tree.Range(v.req.Subnet).String(), "full", node, "to", peer.ID(plan.Node))
		return peer.ID(plan.Node)
	}
	// Nobody probed has room: search once more without the full nodes.
	more := map[peer.ID]bool{}
	for p := range excluded {
		more[p] = true
	}
	full := 0
	for n, l := range loads {
		if !l.Room(pages) {
			more[peer.ID(n)] = true
			full++
		}
	}
	if full > 0 && budget.Err() == nil {
		v2 := d.newView(ctx, budget, v.env, v.req, v.addr, more)
		if dec2, err := d.search(ctx, v2, v.addr); err == nil && !probeFailed(dec2) {
			d.stats.reruns.Add(1)
			return peer.ID(dec2.Node)
		}
	}
	d.stats.over.Add(1)
	d.cfg.log.Info("load balancing: no node with room; the nearest takes the subnet over its capacity", "subnet",
		v.tree.Range(v.req.Subnet).String(), "peer", node)
	return node
}

// probeFailed reports whether the search chose a node whose probe of the
// subnet failed: when every node it asked failed, its last resort. Such a
// node (dead, or cut off, and not yet found silent) never takes a subnet
// from a live one, as in subnet.Balance, where unreachable probes are
// never candidates.
func probeFailed(dec subnet.Decision) bool {
	failed := false
	for _, p := range dec.Probes {
		if p.Node != dec.Node {
			continue
		}
		if p.RTT != subnet.Unreachable {
			return false
		}
		failed = true
	}
	return failed
}
