package subnet

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// Load is a node's declared capacity and current load, in pages per day
// (IPMicra thesis 7.6.3: "the size of the assigned web-pages that the
// crawler has to check each day").
type Load struct {
	Capacity uint64 // 0: not declared, taken as unbounded
	Load     uint64
}

// Room reports whether the node can take pages more without exceeding its
// capacity.
func (l Load) Room(pages uint64) bool { return l.Capacity == 0 || l.Load+pages <= l.Capacity }

// Holding is a subnet a node crawls, as load balancing sees it.
type Holding struct {
	Subnet Range
	Pages  uint64  // its share of the holder's load, pages per day
	Probes []Probe // its stored probe results, the holder's included
}

// BalanceRequest describes a delegation whose chosen node may be full.
type BalanceRequest struct {
	Node   string          // the node the search chose for the new subnet
	Pages  uint64          // the new subnet's expected load, pages per day
	Probes []Probe         // the new subnet's probe results: the other candidates
	Loads  map[string]Load // what is known of nodes' loads; others are unbounded
	Held   []Holding       // subnets Node crawls that it may hand off
}

// HandOff moves a subnet between nodes.
type HandOff struct {
	Subnet   Range
	From, To string
	Pages    uint64
}

// BalancePlan is the outcome of Balance.
type BalancePlan struct {
	Node    string   // the node that takes the new subnet
	HandOff *HandOff // when Node makes room by handing one of its subnets on
	// Over is set when Node ends above its capacity because no candidate
	// with a probe result had room: the caller may look for more
	// candidates (probe other nodes) before accepting it.
	Over bool
	// Cost is the plan's addition to the thesis' global cost, the sum over
	// pages of the time their node takes to download them, with the probe
	// RTT as that time: page-milliseconds per day.
	Cost float64
}

// Balance applies IPMicra's load balancing (thesis 7.6.3) to one
// delegation: the search chose req.Node for a new subnet. When Node has
// room, it takes the subnet. Otherwise there are two ways out, and the one
// with the lower total cost wins (ties: the second, which moves nothing
// already crawled):
//
//  1. Node takes the new subnet and hands off the subnet it holds whose
//     stored probe times vary least (most nodes are about as near to it,
//     so a near-optimal taker is easy to find) to that subnet's next-best
//     node by stored probes that has room; if that node is full, the
//     subnet with the next smallest variance is tried, and so on. The
//     handed-off subnet must free at least as much as the new one needs.
//  2. The new subnet goes to the second-best node by its probe results
//     that has room.
//
// Costs count pages × RTT; a node without a probe result for the new
// subnet (chosen without probing) is taken as 0 ms from it, the search
// having judged it nearest. Unreachable probes are never candidates. When
// neither way exists — no node with a probe result has room — Node takes
// the subnet and Over is set, so nobody ends above capacity while another
// probed candidate has room. Balance is a pure function.
func Balance(req BalanceRequest) (BalancePlan, error) {
	if req.Node == "" {
		return BalancePlan{}, ErrNoNodes
	}
	load := func(n string) Load { return req.Loads[n] }
	rttOf := func(ps []Probe, n string) (time.Duration, bool) {
		for _, p := range ps {
			if p.Node == n && p.RTT != Unreachable {
				return p.RTT, true
			}
		}
		return 0, false
	}
	mine, _ := rttOf(req.Probes, req.Node)
	stay := BalancePlan{Node: req.Node, Cost: pageMs(req.Pages, mine)}
	if load(req.Node).Room(req.Pages) {
		return stay, nil
	}

	// 2. The second-best node with room.
	var second *BalancePlan
	for _, p := range sortedProbes(req.Probes) {
		if p.Node != req.Node && load(p.Node).Room(req.Pages) {
			second = &BalancePlan{Node: p.Node, Cost: pageMs(req.Pages, p.RTT)}
			break
		}
	}

	// 1. A hand-off, by increasing variance of the held subnets' probes.
	var handOff *BalancePlan
	nl := load(req.Node)
	held := slices.Clone(req.Held)
	vars := make(map[Range]float64, len(held))
	for _, h := range held {
		vars[h.Subnet] = variance(h.Probes)
	}
	slices.SortStableFunc(held, func(a, b Holding) int {
		if c := cmp.Compare(vars[a.Subnet], vars[b.Subnet]); c != 0 {
			return c
		}
		return compareRanges(a.Subnet, b.Subnet)
	})
	for _, h := range held {
		if vars[h.Subnet] < 0 {
			continue // fewer than two reachable probes: no next-best known
		}
		if nl.Capacity > 0 && nl.Load-min(nl.Load, h.Pages)+req.Pages > nl.Capacity {
			continue // handing it off would not make room
		}
		from, ok := rttOf(h.Probes, req.Node)
		if !ok {
			continue
		}
		for _, p := range sortedProbes(h.Probes) {
			if p.Node == req.Node || !load(p.Node).Room(h.Pages) {
				continue
			}
			cost := stay.Cost + pageMs(h.Pages, p.RTT) - pageMs(h.Pages, from)
			handOff = &BalancePlan{Node: req.Node, Cost: cost,
				HandOff: &HandOff{Subnet: h.Subnet, From: req.Node, To: p.Node, Pages: h.Pages}}
			break
		}
		if handOff != nil {
			break
		}
	}

	switch {
	case second != nil && (handOff == nil || second.Cost <= handOff.Cost):
		return *second, nil
	case handOff != nil:
		return *handOff, nil
	}
	stay.Over = true
	return stay, nil
}

// sortedProbes returns the reachable probes by increasing RTT, then node.
func sortedProbes(ps []Probe) []Probe {
	out := make([]Probe, 0, len(ps))
	for _, p := range ps {
		if p.RTT != Unreachable {
			out = append(out, p)
		}
	}
	slices.SortStableFunc(out, func(a, b Probe) int {
		if c := cmp.Compare(a.RTT, b.RTT); c != 0 {
			return c
		}
		return strings.Compare(a.Node, b.Node)
	})
	return out
}

// variance returns the population variance, in ms², of the reachable
// probes, or -1 when there are fewer than two.
func variance(ps []Probe) float64 {
	var xs []float64
	for _, p := range ps {
		if p.RTT != Unreachable {
			xs = append(xs, float64(p.RTT)/float64(time.Millisecond))
		}
	}
	if len(xs) < 2 {
		return -1
	}
	mean := 0.0
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	v := 0.0
	for _, x := range xs {
		v += (x - mean) * (x - mean)
	}
	return v / float64(len(xs))
}

func pageMs(pages uint64, rtt time.Duration) float64 {
	return float64(pages) * float64(rtt) / float64(time.Millisecond)
}
