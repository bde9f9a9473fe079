package subnet

import (
	"iter"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// MemTable is an in-memory Table for tests, benchmarks and simulations. It
// is safe for concurrent use.
type MemTable struct {
	mu     sync.RWMutex
	owners map[ID]string
	at     map[ID]netip.Addr // the address a delegation was decided for
	parts  map[ID][]Part     // parts delegated apart, in the order set
	ids    []ID              // sorted
	nodes  []string
}

var _ PartTable = (*MemTable)(nil)

// NewMemTable returns an empty table with the given nodes.
func NewMemTable(nodes ...string) *MemTable {
	return &MemTable{owners: map[ID]string{}, nodes: slices.Clone(nodes)}
}

// AddNode adds a node that may take delegations.
func (t *MemTable) AddNode(node string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !slices.Contains(t.nodes, node) {
		t.nodes = append(t.nodes, node)
	}
}

// Set delegates range id to node.
func (t *MemTable) Set(id ID, node string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.owners[id]; !ok {
		i, _ := slices.BinarySearch(t.ids, id)
		t.ids = slices.Insert(t.ids, i, id)
	}
	t.owners[id] = node
}

// SetAt delegates range id to node, decided for address addr (SplitRange
// keeps addr out of any part split off later).
func (t *MemTable) SetAt(id ID, node string, addr netip.Addr) {
	t.Set(id, node)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.at == nil {
		t.at = map[ID]netip.Addr{}
	}
	t.at[id] = addr
}

// SetPart delegates a part of the delegated range id apart (DelegatePart).
// A part already set for the same range is replaced.
func (t *MemTable) SetPart(id ID, p Part) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.parts == nil {
		t.parts = map[ID][]Part{}
	}
	ps := t.parts[id]
	if i := slices.IndexFunc(ps, func(q Part) bool { return q.Range == p.Range }); i >= 0 {
		ps[i] = p
		return
	}
	t.parts[id] = append(ps, p)
}

// Parts implements PartTable.
func (t *MemTable) Parts(id ID) ([]Part, netip.Addr) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return slices.Clone(t.parts[id]), t.at[id]
}

// Delete removes the delegation of range id and its parts.
func (t *MemTable) Delete(id ID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.parts, id)
	delete(t.at, id)
	if _, ok := t.owners[id]; ok {
		delete(t.owners, id)
		i, _ := slices.BinarySearch(t.ids, id)
		t.ids = slices.Delete(t.ids, i, i+1)
	}
}

// Len returns the number of delegated ranges.
func (t *MemTable) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.ids)
}

// Owned implements Table. It yields a snapshot taken under the lock, so the
// caller may change the table while iterating.
func (t *MemTable) Owned(from, to ID) iter.Seq2[ID, string] {
	return func(yield func(ID, string) bool) {
		t.mu.RLock()
		lo, _ := slices.BinarySearch(t.ids, from)
		hi, _ := slices.BinarySearch(t.ids, to+1)
		ids := slices.Clone(t.ids[lo:hi])
		names := make([]string, len(ids))
		for i, id := range ids {
			names[i] = t.owners[id]
		}
		t.mu.RUnlock()
		for i, id := range ids {
			if !yield(id, names[i]) {
				return
			}
		}
	}
}

// Nodes implements Table.
func (t *MemTable) Nodes() []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return slices.Clone(t.nodes)
}

// MemProbeCache is an in-memory ProbeIndex; with a Tree it is a
// PlaceIndex. It is safe for concurrent use. The zero value is ready to
// use; set Tree before the first Put.
type MemProbeCache struct {
	// Tree gives stored subnets their registry country (Country); nil:
	// Country yields nothing.
	Tree *Tree

	mu        sync.Mutex
	subnets   map[Range]map[string]time.Duration
	order     []Range            // sorted by start, then end descending
	byCountry map[string][]Range // sorted as order
}

var _ PlaceIndex = (*MemProbeCache)(nil)

// Get implements ProbeCache.
func (c *MemProbeCache) Get(node string, subnet Range) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rtt, ok := c.subnets[subnet][node]
	return rtt, ok
}

// Put implements ProbeCache.
func (c *MemProbeCache) Put(node string, subnet Range, rtt time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.subnets == nil {
		c.subnets = map[Range]map[string]time.Duration{}
	}
	m, ok := c.subnets[subnet]
	if !ok {
		m = map[string]time.Duration{}
		c.subnets[subnet] = m
		c.order = insertRange(c.order, subnet)
		if c.Tree != nil {
			if id, found := c.Tree.Find(subnet); found {
				if cc := c.Tree.Country(id); cc != "" {
					if c.byCountry == nil {
						c.byCountry = map[string][]Range{}
					}
					c.byCountry[cc] = insertRange(c.byCountry[cc], subnet)
				}
			}
		}
	}
	m[node] = rtt
}

func insertRange(rs []Range, r Range) []Range {
	i, _ := slices.BinarySearchFunc(rs, r, compareRanges)
	return slices.Insert(rs, i, r)
}

// Country implements PlaceIndex: it yields copies taken under the lock.
func (c *MemProbeCache) Country(cc string, near Range) iter.Seq2[Range, []Probe] {
	return func(yield func(Range, []Probe) bool) {
		c.mu.Lock()
		rs := slices.Clone(c.byCountry[cc])
		c.mu.Unlock()
		for _, r := range nearestFirst(rs, near) {
			c.mu.Lock()
			ps := c.probesLocked(r)
			c.mu.Unlock()
			if !yield(r, ps) {
				return
			}
		}
	}
}

// nearestFirst returns the ranges of rs (sorted by compareRanges) ordered
// by the distance of their start from near's, the lower first on ties.
func nearestFirst(rs []Range, near Range) []Range {
	out := make([]Range, 0, len(rs))
	k := keyOf(near.Start)
	dist := func(r Range) key {
		x := keyOf(r.Start)
		if x.less(k) {
			return k.sub(x)
		}
		return x.sub(k)
	}
	hi, _ := slices.BinarySearchFunc(rs, near, compareRanges)
	lo := hi - 1
	for lo >= 0 || hi < len(rs) {
		if hi >= len(rs) || lo >= 0 && !dist(rs[hi]).less(dist(rs[lo])) {
			out = append(out, rs[lo])
			lo--
		} else {
			out = append(out, rs[hi])
			hi++
		}
	}
	return out
}

// probesLocked returns r's stored probes sorted by node; c.mu is held.
func (c *MemProbeCache) probesLocked(r Range) []Probe {
	ps := make([]Probe, 0, len(c.subnets[r]))
	for n, rtt := range c.subnets[r] {
		ps = append(ps, Probe{Node: n, RTT: rtt, Cached: true})
	}
	slices.SortFunc(ps, func(a, b Probe) int { return strings.Compare(a.Node, b.Node) })
	return ps
}

// Within implements ProbeIndex. It yields copies taken under the lock.
func (c *MemProbeCache) Within(r Range) iter.Seq2[Range, []Probe] {
	return func(yield func(Range, []Probe) bool) {
		type item struct {
			r  Range
			ps []Probe
		}
		var items []item
		c.mu.Lock()
		i, _ := slices.BinarySearchFunc(c.order, Range{Start: r.Start, End: r.End}, compareRanges)
		for ; i < len(c.order) && c.order[i].Start.Compare(r.End) <= 0; i++ {
			sr := c.order[i]
			if !r.ContainsRange(sr) {
				continue
			}
			items = append(items, item{r: sr, ps: c.probesLocked(sr)})
		}
		c.mu.Unlock()
		for _, it := range items {
			if !yield(it.r, it.ps) {
				return
			}
		}
	}
}

// compareRanges orders ranges by start, then by end descending (preorder).
func compareRanges(a, b Range) int {
	if c := a.Start.Compare(b.Start); c != 0 {
		return c
	}
	return b.End.Compare(a.End)
}
