package subnet

import (
	"cmp"
	"slices"
	"strings"
)

// Delegation is a subnet delegated to an owner. The owner is opaque here
// (the overlay uses peer ids).
type Delegation struct {
	Range Range
	Owner string
}

// Case says how a delegation was carried from an old snapshot to a new one,
// following the three cases of IPMicra thesis 7.5.3.
type Case uint8

// Cases, in order of preference when several old delegations land on the
// same new range.
const (
	Unchanged Case = iota + 1 // the range exists in the new tree: same owner
	Split                     // the range was split: each part inherits the owner
	Merged                    // the range was joined into a bigger new range, which inherits the owner
)

// String returns the case's lowercase name.
func (c Case) String() string {
	switch c {
	case Unchanged:
		return "unchanged"
	case Split:
		return "split"
	case Merged:
		return "merged"
	}
	return "unknown"
}

// Carried is a delegation on the new tree with where it came from.
type Carried struct {
	Delegation       // the range is a range of the new tree
	From       Range // the delegated range in the old tree
	Case       Case
}

// Propagate carries delegations made on the old tree over to the new one
// (thesis 7.5.3), as a best-effort heuristic that dynamic calibration later
// corrects:
//
//   - Unchanged: the delegated range exists in the new tree; it keeps its
//     owner.
//   - Split: the new tree has ranges inside the delegated one (it was split,
//     or parts of it were); the largest such ranges inherit the owner.
//   - Merged: addresses of the delegated range now fall directly into a
//     bigger range that did not exist in the old tree (two subnets were
//     joined); that range inherits the owner. A bigger range that already
//     existed in the old tree does not: it was never this owner's, and a
//     root never is.
//
// When several old delegations land on the same new range, the preferred
// case wins (unchanged, then split, then merged), then the one covering more
// of the new range, then the one whose old range starts first, then the
// smaller owner. Delegations that land nowhere are returned in dropped; their
// subnets are delegated afresh when next needed. The result is sorted in the
// new tree's order. Propagate does not modify its arguments.
func Propagate(oldTree, newTree *Tree, dels []Delegation) (carried []Carried, dropped []Delegation) {
	type cand struct {
		Carried
		overlap uint64
		idx     int // index in dels
	}
	best := map[ID]cand{}
	offer := func(id ID, c cand) {
		if cur, ok := best[id]; !ok || c.beats(cur.Carried, c.overlap, cur.overlap) {
			best[id] = c
		}
	}
	merged := map[ID]uint64{}
	for i, d := range dels {
		if !d.Range.Valid() {
			continue
		}
		mk := func(id ID, cs Case, overlap uint64) cand {
			return cand{Carried{Delegation{newTree.Range(id), d.Owner}, d.Range, cs}, overlap, i}
		}
		if id, ok := newTree.Find(d.Range); ok {
			offer(id, mk(id, Unchanged, d.Range.NumAddrs()))
			continue
		}
		clear(merged)
		for p, direct := range newTree.partition(d.Range) {
			if !direct {
				offer(p.id, mk(p.id, Split, p.n))
				continue
			}
			if newTree.parent[p.id] < 0 {
				continue // never delegate a whole address family
			}
			merged[p.id] = satAdd(merged[p.id], p.n)
		}
		for id, n := range merged {
			if _, existed := oldTree.Find(newTree.Range(id)); !existed {
				offer(id, mk(id, Merged, n))
			}
		}
	}
	ids := make([]ID, 0, len(best))
	for id := range best {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	landed := make([]bool, len(dels))
	for _, id := range ids {
		c := best[id]
		carried = append(carried, c.Carried)
		landed[c.idx] = true
	}
	for i, d := range dels {
		if !landed[i] {
			dropped = append(dropped, d)
		}
	}
	slices.SortFunc(dropped, func(a, b Delegation) int {
		if c := a.Range.Start.Compare(b.Range.Start); c != 0 {
			return c
		}
		return cmp.Or(b.Range.End.Compare(a.Range.End), strings.Compare(a.Owner, b.Owner))
	})
	return carried, dropped
}

// Beats reports whether c is preferred over o when both land on the same
// new range, by Propagate's rule: the preferred case (unchanged, split,
// merged), then more of the new range's addresses from the old range, then
// the old range that starts first (the larger at equal starts), then the
// smaller owner.
func (c Carried) Beats(o Carried) bool {
	return c.beats(o, overlapOf(c.From, c.Range), overlapOf(o.From, o.Range))
}

func (c Carried) beats(o Carried, overlap, oOverlap uint64) bool {
	if c.Case != o.Case {
		return c.Case < o.Case
	}
	if overlap != oOverlap {
		return overlap > oOverlap
	}
	if x := c.From.Start.Compare(o.From.Start); x != 0 {
		return x < 0
	}
	if x := c.From.End.Compare(o.From.End); x != 0 {
		return x > 0
	}
	return c.Owner < o.Owner
}

// overlapOf counts the addresses a and b share, saturated at 2^64-1.
func overlapOf(a, b Range) uint64 {
	if !a.Valid() || !b.Valid() || a.Start.Is4() != b.Start.Is4() {
		return 0
	}
	s, e := a.Start, a.End
	if b.Start.Compare(s) > 0 {
		s = b.Start
	}
	if b.End.Compare(e) < 0 {
		e = b.End
	}
	if s.Compare(e) > 0 {
		return 0
	}
	return sizeOf(keyOf(s), keyOf(e))
}

// part is a piece of an old range in a new tree: either a largest new range
// inside it, or a new range that directly holds some of its addresses while
// not lying inside it; n counts the addresses concerned, saturated at
// 2^64-1.
type part struct {
	id ID
	n  uint64
}

// partition walks r through the tree and yields each largest range inside r
// (with direct false) and, with direct true, each range not inside r that is
// the smallest range of some of r's addresses, with how many. Ranges of the
// second kind may be yielded once per stretch of addresses they hold.
func (t *Tree) partition(r Range) func(yield func(part, bool) bool) {
	return func(yield func(part, bool) bool) {
		s, e := keyOf(r.Start), keyOf(r.End)
		lo, hi := t.bounds(r.Start.Is4())
		cur := s
		for {
			x := t.Lookup(cur.addr(r.Start.Is4()))
			if !t.start[x].less(s) && !e.less(t.end[x]) {
				// x lies inside r: climb to the largest such range.
				for p := t.parent[x]; p >= 0 && !t.start[p].less(s) && !e.less(t.end[p]); p = t.parent[x] {
					x = ID(p)
				}
				if !yield(part{x, sizeOf(t.start[x], t.end[x])}, false) {
					return
				}
				if !t.end[x].less(e) {
					return
				}
				cur = t.end[x].next()
				continue
			}
			// x is the smallest range of cur but reaches outside r: it
			// holds addresses from cur up to the next range that starts
			// inside its subtree, its own end, or r's end.
			segEnd := e
			if t.end[x].less(segEnd) {
				segEnd = t.end[x]
			}
			j := lowerBound(t.start[lo:hi], cur.next()) + lo
			if j < int(t.next[x]) && j < hi && !segEnd.less(t.start[j]) {
				segEnd = t.start[j].prev()
			}
			if !yield(part{x, sizeOf(cur, segEnd)}, true) {
				return
			}
			if !segEnd.less(e) {
				return
			}
			cur = segEnd.next()
		}
	}
}

// lowerBound returns the index of the first key ≥ k in sorted keys.
func lowerBound(keys []key, k key) int {
	i, j := 0, len(keys)
	for i < j {
		h := int(uint(i+j) >> 1)
		if keys[h].less(k) {
			i = h + 1
		} else {
			j = h
		}
	}
	return i
}

func sizeOf(s, e key) uint64 {
	d := e.sub(s)
	if d.hi != 0 || d.lo == ^uint64(0) {
		return ^uint64(0)
	}
	return d.lo + 1
}

func satAdd(a, b uint64) uint64 {
	if a+b < a {
		return ^uint64(0)
	}
	return a + b
}
