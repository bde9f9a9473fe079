package subnet

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// NodeMap returns a latency map (SearchConfig.Places) made only of what a
// network measures: every node is a place, and a server near node n would
// see each other node m at about the RTT between n and m. It needs no
// locations and no public RTT matrix, only between, the inter-node RTTs as
// the nodes measured them (noise and all), and country, a node's registry
// country (its own subnet's; "" when unknown), which gives the place its
// prior weight.
//
// Between two nodes the RTT holds both access delays, while a server near n
// sees m through m's alone: the profiles' shift absorbs the difference, the
// same for every m. It does not absorb what n itself measures to a server
// at its place, which is n's access delay (twice over the shift); that is
// estimated by the triangle, as the tip of n in a tree metric: for two
// nodes m and k near n, (d(n,m) + d(n,k) − d(m,k)) / 2 is n's distance to
// the path between them, whose low values are n's access delay (see
// tipDelay). A node with no measured RTT is no place.
func NodeMap(nodes []string, between func(a, b string) (time.Duration, bool), country func(node string) string) []MapPlace {
	out := make([]MapPlace, 0, len(nodes))
	for _, n := range nodes {
		p := MapPlace{Name: "near " + n, RTT: make(map[string]time.Duration, len(nodes))}
		if country != nil {
			p.Country = country(n)
		}
		for _, m := range nodes {
			if m == n {
				continue
			}
			if d, ok := between(n, m); ok && d > 0 && d < Unreachable {
				p.RTT[m] = d
			}
		}
		if len(p.RTT) == 0 {
			continue
		}
		p.RTT[n] = 2 * tipDelay(n, p.RTT, between)
		out = append(out, p)
	}
	return out
}

// tipNeighbours is how many of a node's nearest nodes tipDelay pairs up.
const tipNeighbours = 12

// tipDelay estimates node n's access delay from its measured RTTs (rtt,
// by node) and those between its nearest nodes: the 10th percentile of
// (d(n,m) + d(n,k) − d(m,k)) / 2 over pairs of its tipNeighbours nearest,
// which is exact for nodes on opposite sides of n in a tree metric and
// above it otherwise; a low percentile rather than the least, so that one
// noisy measurement does not set it. Bounded by 0 and the nearest node's
// RTT, which holds both access delays.
func tipDelay(n string, rtt map[string]time.Duration, between func(a, b string) (time.Duration, bool)) time.Duration {
	near := make([]string, 0, len(rtt))
	for m := range rtt {
		if m != n {
			near = append(near, m)
		}
	}
	slices.SortFunc(near, func(a, b string) int { return cmp.Or(cmp.Compare(rtt[a], rtt[b]), strings.Compare(a, b)) })
	if len(near) == 0 {
		return 0
	}
	ceiling := rtt[near[0]]
	near = near[:min(len(near), tipNeighbours)]
	var tips []time.Duration
	for i, m := range near {
		for _, k := range near[i+1:] {
			if d, ok := between(m, k); ok && d > 0 {
				tips = append(tips, (rtt[m]+rtt[k]-d)/2)
			}
		}
	}
	if len(tips) == 0 {
		return ceiling
	}
	slices.Sort(tips)
	return min(max(tips[len(tips)/10], 0), ceiling)
}

// nearestSample bounds the nodes NearestRTT measures from.
const nearestSample = 256

// NearestRTT returns the median, over nodes, of the RTT to the nearest
// other node as between measures it: how densely the network covers the
// places its nodes are at. Of a larger network it measures from
// nearestSample nodes spread over the list. A node whose measured pairs
// cover fewer than half the others is left out while any node's cover
// that much: its nearest measured node is likely not its nearest (in a
// running network of 300 nodes, whose coordinators knew a third of the
// pairs, such nodes read 35–133 ms where the truth was about 15). Zero
// when no two nodes are measured.
func NearestRTT(nodes []string, between func(a, b string) (time.Duration, bool)) time.Duration {
	step := max(1, len(nodes)/nearestSample)
	var all, covered []time.Duration
	for i := 0; i < len(nodes); i += step {
		best, known := time.Duration(-1), 0
		for j, m := range nodes {
			if j == i {
				continue
			}
			if d, ok := between(nodes[i], m); ok && d > 0 {
				known++
				if best < 0 || d < best {
					best = d
				}
			}
		}
		if best > 0 {
			all = append(all, best)
			if 2*known >= len(nodes)-1 {
				covered = append(covered, best)
			}
		}
	}
	nn := covered
	if len(nn) == 0 {
		nn = all
	}
	if len(nn) == 0 {
		return 0
	}
	slices.Sort(nn)
	return nn[len(nn)/2]
}
