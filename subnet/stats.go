package subnet

import "unsafe"

// Stats describes the shape and size of a tree.
type Stats struct {
	Ranges      int      // nodes below the two roots
	IPv4, IPv6  int      // of which in each family
	Unary       int      // ranges of a single address
	ByDepth     []int    // ranges per depth; index 0 counts the two roots
	MaxDepth    int      // deepest node
	ByLayer     [5]int   // ranges per Layer
	Orgs        int      // distinct organisation keys
	Registries  []string // registry names present
	MemoryBytes int64    // bytes held by the tree's arrays and strings
}

// Stats computes the tree's statistics. It walks the whole tree.
func (t *Tree) Stats() Stats {
	s := Stats{
		Ranges: t.Len() - 2,
		IPv4:   t.n4 - 1,
		IPv6:   t.Len() - t.n4 - 1,
		Orgs:   len(t.orgs),
	}
	for _, r := range t.registries {
		if r != "" {
			s.Registries = append(s.Registries, r)
		}
	}
	for i := range t.start {
		d := int(t.depth[i])
		for len(s.ByDepth) <= d {
			s.ByDepth = append(s.ByDepth, 0)
		}
		s.ByDepth[d]++
		s.MaxDepth = max(s.MaxDepth, d)
		s.ByLayer[t.attrs[i].layer]++
		if t.start[i] == t.end[i] {
			s.Unary++
		}
	}
	s.ByLayer[LayerRoot] -= 2
	s.MemoryBytes = t.memory()
	return s
}

// memory returns the bytes held by the tree: its per-node arrays, its
// tables and the strings they point to.
func (t *Tree) memory() int64 {
	var m int64
	m += int64(cap(t.start)+cap(t.end)) * int64(unsafe.Sizeof(key{}))
	m += int64(cap(t.parent)+cap(t.next)+cap(t.orgNodes)+cap(t.orgOff)+cap(t.v4Index)) * 4
	m += int64(cap(t.depth))
	m += int64(cap(t.attrs)) * int64(unsafe.Sizeof(attr{}))
	m += int64(cap(t.orgs)) * int64(unsafe.Sizeof(org{}))
	for _, o := range t.orgs {
		m += int64(len(o.key) + len(o.name))
	}
	for _, tab := range [][]string{t.registries, t.statuses} {
		m += int64(cap(tab)) * int64(unsafe.Sizeof(""))
		for _, s := range tab {
			m += int64(len(s))
		}
	}
	return m
}
