package delegate

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/subnet"
)

// maxPlaces bounds the stored probes a Delegator keeps as places: about
// 4,096 subnets' probes of a dozen nodes, a few MB.
const maxPlaces = 4096

// places is a Delegator's catalogue of places beyond the shard it is
// deciding for: the stored probes of every subnet it decided or read in a
// block index, so that the guided search finds the places of S's
// organisation and of its registry country (subnet.PlaceIndex) wherever
// in the hierarchy their subnets are. It is this node's knowledge only;
// the DHT indexes subnets by block, not by organisation or country. The
// oldest entries go past maxPlaces. It is safe for concurrent use.
type places struct {
	mu  sync.Mutex
	seq uint64
	// by range, sorted by start then by end descending
	es []placeEntry
	// nodes counts the entries whose probes name each node: the nodes
	// this Delegator has seen answer probes (view.Nodes).
	nodes map[peer.ID]int
}

type placeEntry struct {
	r      subnet.Range
	cc     string
	probes []overlay.ProbeResult
	seq    uint64 // insertion order, for eviction
}

func compareRanges(a, b subnet.Range) int {
	return cmp.Or(a.Start.Compare(b.Start), b.End.Compare(a.End))
}

// add stores ix's probes as the place of its subnet, replacing an older
// entry of the subnet; an ix without probes is left out.
func (p *places) add(t *subnet.Tree, ix overlay.IndexedDelegation) {
	if len(ix.Probes) == 0 || !ix.Subnet.Start.IsValid() {
		return
	}
	cc := t.Country(t.SmallestNonUnary(ix.Subnet.Start))
	ps := slices.Clone(ix.Probes)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	e := placeEntry{r: ix.Subnet, cc: cc, probes: ps, seq: p.seq}
	p.count(e, 1)
	i, found := slices.BinarySearchFunc(p.es, ix.Subnet, func(e placeEntry, r subnet.Range) int { return compareRanges(e.r, r) })
	if found {
		p.count(p.es[i], -1)
		p.es[i] = e
		return
	}
	p.es = slices.Insert(p.es, i, e)
	if len(p.es) > maxPlaces {
		oldest := 0
		for j := range p.es {
			if p.es[j].seq < p.es[oldest].seq {
				oldest = j
			}
		}
		p.count(p.es[oldest], -1)
		p.es = slices.Delete(p.es, oldest, oldest+1)
	}
}

// count adds by to the count of each node e's probes name. p.mu is held.
func (p *places) count(e placeEntry, by int) {
	if p.nodes == nil {
		p.nodes = map[peer.ID]int{}
	}
	for _, pr := range e.probes {
		if p.nodes[pr.Peer] += by; p.nodes[pr.Peer] <= 0 {
			delete(p.nodes, pr.Peer)
		}
	}
}

// named returns the nodes the entries' probes name.
func (p *places) named() []peer.ID {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Collect(maps.Keys(p.nodes))
}

// within returns the entries whose subnets lie inside r, in address order.
func (p *places) within(r subnet.Range) []placeEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, _ := slices.BinarySearchFunc(p.es, r.Start, func(e placeEntry, a netip.Addr) int { return e.r.Start.Compare(a) })
	var out []placeEntry
	for ; i < len(p.es) && p.es[i].r.Start.Compare(r.End) <= 0; i++ {
		if r.ContainsRange(p.es[i].r) {
			out = append(out, p.es[i])
		}
	}
	return out
}

// country returns the entries of registry country cc, nearest to near in
// address order first (the nearer, the likelier to share a place).
func (p *places) country(cc string, near netip.Addr) []placeEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, _ := slices.BinarySearchFunc(p.es, near, func(e placeEntry, a netip.Addr) int { return e.r.Start.Compare(a) })
	var out []placeEntry
	lo, hi := i-1, i
	for lo >= 0 || hi < len(p.es) {
		var e placeEntry
		if hi >= len(p.es) || lo >= 0 && closer(p.es[lo].r.Start, p.es[hi].r.Start, near) {
			e, lo = p.es[lo], lo-1
		} else {
			e, hi = p.es[hi], hi+1
		}
		if e.cc == cc {
			out = append(out, e)
		}
	}
	return out
}

// closer reports whether a (below near) is at least as near to near as b
// (at or above it), in address order.
func closer(a, b, near netip.Addr) bool {
	return distance(a, near) <= distance(near, b)
}

// distance returns y − x for IPv4 addresses x ≤ y, and for IPv6 that of
// their first 64 bits, saturating at the largest uint64.
func distance(x, y netip.Addr) uint64 {
	hi := func(a netip.Addr) uint64 {
		b := a.As16()
		var v uint64
		n := 8
		if a.Is4() {
			b = [16]byte{12: b[12], 13: b[13], 14: b[14], 15: b[15]}
			n = 16
		}
		for _, c := range b[n-8 : n] {
			v = v<<8 | uint64(c)
		}
		return v
	}
	if x.Is4() != y.Is4() {
		return ^uint64(0)
	}
	a, b := hi(x), hi(y)
	if b < a {
		return 0
	}
	return b - a
}
