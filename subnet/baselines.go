package subnet

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"
)

// Random is the location-unaware baseline (UCYMicra, thesis 5.2.2): a new
// subnet goes to a node chosen uniformly at random, without probing. It is
// not safe for concurrent use (it owns Rand).
type Random struct {
	Tree  *Tree
	Table Table
	Rand  *rand.Rand
}

// Delegate picks a random node for addr's subnet unless it is owned.
func (s *Random) Delegate(_ context.Context, addr netip.Addr) (Decision, error) {
	d, done, err := ownedDecision(s.Tree, s.Table, addr)
	if done || err != nil {
		return d, err
	}
	nodes := s.Table.Nodes()
	if len(nodes) == 0 {
		return d, ErrNoNodes
	}
	d.Node, d.Step = nodes[s.Rand.IntN(len(nodes))], StepBaseline
	return d, nil
}

// BruteForce is the brute-force location-aware baseline (thesis 5.3): every
// node probes every new subnet and the best wins.
type BruteForce struct {
	Tree   *Tree
	Table  Table
	Prober Prober
	Cache  ProbeCache // may be nil
}

// Delegate probes addr from every node.
func (s *BruteForce) Delegate(ctx context.Context, addr netip.Addr) (Decision, error) {
	d, done, err := ownedDecision(s.Tree, s.Table, addr)
	if done || err != nil {
		return d, err
	}
	r := &run{m: &IPMicra{Prober: s.Prober, Cache: s.Cache}, ctx: ctx, addr: addr, subnet: s.Tree.Range(d.Subnet),
		cfg: SearchConfig{Threshold: 0}, d: &d, asked: map[string]bool{}}
	for _, n := range s.Table.Nodes() {
		if _, err := r.probe(n); err != nil {
			return d, err
		}
	}
	d, err = r.best()
	d.Step = StepBaseline
	return d, err
}

// Oracle delegates every new subnet to the node with the lowest true
// round-trip time, which it knows without probing (the emulated Internet's
// model). It defines the optimal delegation the metrics compare against.
type Oracle struct {
	Tree  *Tree
	Table Table
	RTT   func(node string, addr netip.Addr) time.Duration
}

// Delegate picks the truly nearest node.
func (s *Oracle) Delegate(_ context.Context, addr netip.Addr) (Decision, error) {
	d, done, err := ownedDecision(s.Tree, s.Table, addr)
	if done || err != nil {
		return d, err
	}
	for _, n := range s.Table.Nodes() {
		if rtt := s.RTT(n, addr); d.Node == "" || rtt < d.RTT {
			d.Node, d.RTT = n, rtt
		}
	}
	if d.Node == "" {
		return d, ErrNoNodes
	}
	d.Step = StepBaseline
	return d, nil
}

// ownedDecision starts a baseline's decision: done when addr's subnet is
// already delegated.
func ownedDecision(t *Tree, tab Table, addr netip.Addr) (Decision, bool, error) {
	s := t.SmallestNonUnary(addr)
	if s == None {
		return Decision{}, true, fmt.Errorf("invalid address %v", addr)
	}
	d := Decision{Subnet: s, RTT: Unreachable}
	if h, ok := Holder(t, tab, addr); ok {
		d.Node, d.Step = h.Node, StepOwned
		if h.Range != t.Range(s) {
			d.Part = h.Range
		}
		return d, true, nil
	}
	return d, false, nil
}

// HiMicraTree is HiMicra's hierarchy of crawlers (thesis 6.5): neighbours
// have similar probe times to most places. The root is the coordinator,
// which is not a node.
type HiMicraTree struct {
	children map[string][]string // "" is the root
}

// Children returns the children of node ("" for the root).
func (h *HiMicraTree) Children(node string) []string { return h.children[node] }

// maxSubsets bounds the exhaustive search for the most diverse children;
// beyond it the children are chosen greedily (farthest point first).
const maxSubsets = 200_000

// BuildHiMicra builds HiMicra's crawler hierarchy from sample probes:
// rtt[i][s] is node i's probe time to sample site s. At each level it picks
// the branching nodes whose probe times differ most (the DiffFunction,
// maximised over all subsets when there are at most 200,000, greedily
// otherwise), clusters every other node around the child it differs least
// from (ddiff), and recurses into each cluster.
func BuildHiMicra(nodes []string, rtt [][]time.Duration, branching int) (*HiMicraTree, error) {
	if branching < 2 {
		return nil, fmt.Errorf("branching factor must be at least 2, got %d", branching)
	}
	if len(rtt) != len(nodes) {
		return nil, fmt.Errorf("%d nodes but %d rows of probes", len(nodes), len(rtt))
	}
	for i := range rtt {
		if len(rtt[i]) != len(rtt[0]) {
			return nil, fmt.Errorf("node %s probed %d sites, node %s %d", nodes[i], len(rtt[i]), nodes[0], len(rtt[0]))
		}
	}
	n := len(nodes)
	diff := make([][]float64, n)
	for i := range diff {
		diff[i] = make([]float64, n)
		for j := range diff[i] {
			for s := range rtt[i] {
				diff[i][j] += absDiffMS(rtt[i][s], rtt[j][s])
			}
		}
	}
	h := &HiMicraTree{children: map[string][]string{}}
	var place func(parent string, avail []int)
	place = func(parent string, avail []int) {
		if len(avail) <= branching {
			for _, i := range avail {
				h.children[parent] = append(h.children[parent], nodes[i])
			}
			return
		}
		kids := mostDiverse(avail, branching, diff)
		clusters := make([][]int, len(kids))
		for _, i := range avail {
			if slices.Contains(kids, i) {
				continue
			}
			best := 0
			for k := range kids {
				if diff[i][kids[k]] < diff[i][kids[best]] {
					best = k
				}
			}
			clusters[best] = append(clusters[best], i)
		}
		for k, c := range kids {
			h.children[parent] = append(h.children[parent], nodes[c])
			place(nodes[c], clusters[k])
		}
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	place("", all)
	return h, nil
}

// mostDiverse returns the k members of avail whose pairwise probe
// differences sum highest.
func mostDiverse(avail []int, k int, diff [][]float64) []int {
	if binom(len(avail), k) > maxSubsets {
		// Greedy: the two farthest apart, then farthest from those chosen.
		chosen := []int{}
		bi, bj := avail[0], avail[1]
		for _, i := range avail {
			for _, j := range avail {
				if diff[i][j] > diff[bi][bj] {
					bi, bj = i, j
				}
			}
		}
		chosen = append(chosen, bi, bj)
		for len(chosen) < k {
			best, bestSum := -1, -1.0
			for _, i := range avail {
				if slices.Contains(chosen, i) {
					continue
				}
				sum := 0.0
				for _, c := range chosen {
					sum += diff[i][c]
				}
				if sum > bestSum {
					best, bestSum = i, sum
				}
			}
			chosen = append(chosen, best)
		}
		return chosen
	}
	best, bestSum := []int(nil), -1.0
	idx := make([]int, k)
	var rec func(start, depth int)
	rec = func(start, depth int) {
		if depth == k {
			sum := 0.0
			for a := 0; a < k; a++ {
				for b := a + 1; b < k; b++ {
					sum += diff[avail[idx[a]]][avail[idx[b]]]
				}
			}
			if sum > bestSum {
				bestSum = sum
				best = best[:0]
				for _, i := range idx {
					best = append(best, avail[i])
				}
			}
			return
		}
		for i := start; i <= len(avail)-(k-depth); i++ {
			idx[depth] = i
			rec(i+1, depth+1)
		}
	}
	rec(0, 0)
	return best
}

func binom(n, k int) int {
	r := 1
	for i := 1; i <= k; i++ {
		r = r * (n - k + i) / i
		if r > 1<<40 {
			return r
		}
	}
	return r
}

func absDiffMS(a, b time.Duration) float64 {
	const far = 10 * time.Second // unreachable counts as very far, not infinite
	a, b = min(a, far), min(b, far)
	d := float64(a-b) / float64(time.Millisecond)
	if d < 0 {
		return -d
	}
	return d
}

// HiMicra is HiMicra's best-first search (thesis 6.6): the root's children
// probe the address; the best answer not yet expanded is taken: under the
// threshold it wins, otherwise its children probe; when all are probed the
// best wins.
type HiMicra struct {
	Tree      *Tree
	Table     Table
	Prober    Prober
	Cache     ProbeCache // may be nil
	Hierarchy *HiMicraTree
	Threshold time.Duration // zero means DefaultThreshold
}

// Delegate runs the best-first search for addr.
func (s *HiMicra) Delegate(ctx context.Context, addr netip.Addr) (Decision, error) {
	d, done, err := ownedDecision(s.Tree, s.Table, addr)
	if done || err != nil {
		return d, err
	}
	th := s.Threshold
	if th <= 0 {
		th = DefaultThreshold
	}
	r := &run{m: &IPMicra{Prober: s.Prober, Cache: s.Cache}, ctx: ctx, addr: addr, subnet: s.Tree.Range(d.Subnet),
		cfg: SearchConfig{Threshold: th}, d: &d, asked: map[string]bool{}}
	var open probeHeap
	expand := func(parent string) error {
		for _, c := range s.Hierarchy.Children(parent) {
			rtt, err := r.probe(c)
			if err != nil {
				return err
			}
			heap.Push(&open, Probe{Node: c, RTT: rtt})
		}
		return nil
	}
	if err := expand(""); err != nil {
		return d, err
	}
	for open.Len() > 0 {
		p := heap.Pop(&open).(Probe)
		if p.RTT < th {
			d.Node, d.RTT, d.Step = p.Node, p.RTT, StepBaseline
			return d, nil
		}
		if err := expand(p.Node); err != nil {
			return d, err
		}
	}
	d, err = r.best()
	d.Step = StepBaseline
	return d, err
}

type probeHeap []Probe

func (h probeHeap) Len() int           { return len(h) }
func (h probeHeap) Less(i, j int) bool { return h[i].RTT < h[j].RTT }
func (h probeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *probeHeap) Push(x any)        { *h = append(*h, x.(Probe)) }
func (h *probeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
