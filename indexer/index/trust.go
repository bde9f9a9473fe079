package index

import (
	"maps"
	"slices"
	"sync/atomic"
)

// trust is the set of distrusted nodes of a store (see Index.Distrust):
// replaced whole by set, read without locks.
type trust struct {
	p atomic.Pointer[map[string]bool]
}

func (t *trust) set(nodes []string) {
	m := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		m[n] = true
	}
	t.p.Store(&m)
}

// distrusts reports whether node's records are left out of search.
func (t *trust) distrusts(node string) bool {
	m := t.p.Load()
	return m != nil && (*m)[node]
}

// any reports whether any node is distrusted.
func (t *trust) any() bool {
	m := t.p.Load()
	return m != nil && len(*m) > 0
}

// nodes returns the distrusted nodes, sorted.
func (t *trust) nodes() []string {
	m := t.p.Load()
	if m == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(*m))
}
