package subnet

import "slices"

// Diff says how a newer snapshot's ranges relate to an older one's, in the
// terms of IPMicra thesis 7.5.3 that Propagate carries delegations by. Every
// range of either tree but the two family roots is counted once:
//
//   - Unchanged: old ranges that exist in the new tree.
//   - Split: old ranges gone from the new tree that hold new ranges (their
//     parts). Parts counts those new ranges whose smallest enclosing old
//     range is a split one.
//   - Merged: old ranges gone from the new tree, holding no new range, whose
//     addresses now fall directly into a bigger range the old tree did not
//     have. MergedInto counts those bigger ranges.
//   - Removed: old ranges gone from the new tree that are neither (their
//     addresses fall to a range that existed before, or to a root).
//   - Added: new ranges that are none of the above: in neither tree before,
//     not a part of a split range, not a merge.
//
// So OldRanges = Unchanged + Split + Merged + Removed and NewRanges =
// Unchanged + Parts + MergedInto + Added.
type Diff struct {
	Old, New             SnapshotID
	OldRanges, NewRanges int

	Unchanged, Split, Merged, Removed int
	Parts, MergedInto, Added          int

	// Examples holds up to the number asked of each kind, in address order.
	Examples []DiffExample
}

// DiffExample is one change: the old ranges and the new ranges it concerns.
// Split: one old range and up to four of its parts; Merged: one old range
// and the range it went into; Removed: one old range; Added and Unchanged:
// one range.
type DiffExample struct {
	Kind string // unchanged, split, merged, removed or added
	Old  []Range
	New  []Range
}

// maxExampleParts bounds the parts listed in one split example.
const maxExampleParts = 4

// DiffTrees compares two snapshots, with up to examples examples of each
// kind of change. It does not modify its arguments.
func DiffTrees(oldTree, newTree *Tree, examples int) Diff {
	d := Diff{Old: oldTree.ID(), New: newTree.ID()}
	seen := map[string]int{}
	example := func(kind string, old, new []Range) {
		if seen[kind] < examples {
			seen[kind]++
			d.Examples = append(d.Examples, DiffExample{kind, old, new})
		}
	}
	gone := map[ID]bool{}       // old ranges missing from the new tree
	mergedInto := map[ID]bool{} // new ranges old ones merged into
	for id := range oldTree.All() {
		if oldTree.parent[id] < 0 {
			continue
		}
		d.OldRanges++
		r := oldTree.Range(id)
		if _, ok := newTree.Find(r); ok {
			d.Unchanged++
			example("unchanged", []Range{r}, []Range{r})
			continue
		}
		gone[id] = true
		var inside []Range
		into := ID(None)
		for p, direct := range newTree.partition(r) {
			switch {
			case !direct:
				inside = append(inside, newTree.Range(p.id))
			case into == None && newTree.parent[p.id] >= 0:
				if _, existed := oldTree.Find(newTree.Range(p.id)); !existed {
					into = p.id
				}
			}
		}
		switch {
		case len(inside) > 0:
			d.Split++
			example("split", []Range{r}, inside[:min(len(inside), maxExampleParts)])
		case into != None:
			d.Merged++
			mergedInto[into] = true
			example("merged", []Range{r}, []Range{newTree.Range(into)})
		default:
			d.Removed++
			example("removed", []Range{r}, nil)
		}
	}
	for id := range newTree.All() {
		if newTree.parent[id] < 0 {
			continue
		}
		d.NewRanges++
		r := newTree.Range(id)
		if _, ok := oldTree.Find(r); ok {
			continue
		}
		switch {
		case gone[oldTree.enclosing(r)]:
			d.Parts++
		case mergedInto[id]:
			d.MergedInto++
		default:
			d.Added++
			example("added", nil, []Range{r})
		}
	}
	order := []string{"unchanged", "split", "merged", "removed", "added"}
	slices.SortStableFunc(d.Examples, func(a, b DiffExample) int {
		return slices.Index(order, a.Kind) - slices.Index(order, b.Kind)
	})
	return d
}

// enclosing returns the smallest node whose range contains all of r, or
// None when r's family has no node containing it.
func (t *Tree) enclosing(r Range) ID {
	if !r.Valid() {
		return None
	}
	e := keyOf(r.End)
	id := t.Lookup(r.Start)
	for id != None && t.end[id].less(e) {
		id = ID(t.parent[id])
	}
	return id
}
