package subnet

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
)

func TestDiffTrees(t *testing.T) {
	old := rpslTree(t,
		"10.0.0.0 - 10.255.255.255",
		"10.1.0.0 - 10.1.255.255", // unchanged
		"10.2.0.0 - 10.2.255.255", // split into two /17
		"10.3.0.0 - 10.3.0.255",   // merged with 10.3.1.0/24 into 10.3.0.0/23
		"10.3.1.0 - 10.3.1.255",
		"10.4.0.0 - 10.4.0.255", // removed: its addresses fall to 10/8, which existed
		"10.5.0.0 - 10.5.255.255",
	)
	newT := rpslTree(t,
		"10.0.0.0 - 10.255.255.255",
		"10.1.0.0 - 10.1.255.255",
		"10.1.5.0 - 10.1.5.255", // added inside an unchanged range
		"10.2.0.0 - 10.2.127.255",
		"10.2.128.0 - 10.2.255.255",
		"10.2.128.0 - 10.2.128.255", // inside a part: still a part of the split
		"10.3.0.0 - 10.3.1.255",
		"10.5.0.0 - 10.5.127.255", // half of 10.5/16 split off; the rest falls to 10/8
		"10.6.0.0 - 10.6.0.255",   // added
	)
	d := DiffTrees(old, newT, 10)
	got := fmt.Sprintf("old %d new %d: unchanged %d split %d merged %d removed %d; parts %d merged-into %d added %d",
		d.OldRanges, d.NewRanges, d.Unchanged, d.Split, d.Merged, d.Removed, d.Parts, d.MergedInto, d.Added)
	want := "old 7 new 9: unchanged 2 split 2 merged 2 removed 1; parts 4 merged-into 1 added 2"
	if got != want {
		t.Errorf("counts\n got %s\nwant %s", got, want)
	}
	if d.Old != old.ID() || d.New != newT.ID() {
		t.Errorf("ids %s %s, want %s %s", d.Old.Short(), d.New.Short(), old.ID().Short(), newT.ID().Short())
	}
	var ex []string
	for _, e := range d.Examples {
		ex = append(ex, fmt.Sprintf("%s %v -> %v", e.Kind, e.Old, e.New))
	}
	wantEx := []string{
		"unchanged [10.0.0.0/8] -> [10.0.0.0/8]",
		"unchanged [10.1.0.0/16] -> [10.1.0.0/16]",
		"split [10.2.0.0/16] -> [10.2.0.0/17 10.2.128.0/17]",
		"split [10.5.0.0/16] -> [10.5.0.0/17]",
		"merged [10.3.0.0/24] -> [10.3.0.0/23]",
		"merged [10.3.1.0/24] -> [10.3.0.0/23]",
		"removed [10.4.0.0/24] -> []",
		"added [] -> [10.1.5.0/24]",
		"added [] -> [10.6.0.0/24]",
	}
	if !slices.Equal(ex, wantEx) {
		t.Errorf("examples\n got %q\nwant %q", ex, wantEx)
	}
	if n := len(DiffTrees(old, newT, 1).Examples); n != 5 {
		t.Errorf("one example of each kind: got %d examples, want 5", n)
	}

	same := DiffTrees(old, old, 0)
	if same.Unchanged != same.OldRanges || same.OldRanges != 7 || same.NewRanges != 7 || len(same.Examples) != 0 {
		t.Errorf("a tree against itself: %+v", same)
	}
}

// TestDiffAgreesWithPropagate checks that the ranges Diff calls split,
// merged and removed are those Propagate carries as split, carries as
// merged or drops, when every old range is delegated.
func TestDiffAgreesWithPropagate(t *testing.T) {
	old := rpslTree(t,
		"10.0.0.0 - 10.255.255.255",
		"10.2.0.0 - 10.2.255.255",
		"10.3.0.0 - 10.3.0.255",
		"10.3.1.0 - 10.3.1.255",
		"10.4.0.0 - 10.4.0.255",
		"10.7.0.0 - 10.7.255.255",
	)
	newT := rpslTree(t,
		"10.0.0.0 - 10.255.255.255",
		"10.2.0.0 - 10.2.127.255",
		"10.3.0.0 - 10.3.3.255",
		"10.7.0.0 - 10.7.255.255",
	)
	var dels []Delegation
	for id := range old.All() {
		if old.Parent(id) != None {
			dels = append(dels, Delegation{old.Range(id), old.Range(id).String()})
		}
	}
	carried, dropped := Propagate(old, newT, dels)
	from := map[Case]map[string]bool{Unchanged: {}, Split: {}, Merged: {}}
	for _, c := range carried {
		from[c.Case][c.From.String()] = true
	}
	d := DiffTrees(old, newT, 100)
	for _, e := range d.Examples {
		if len(e.Old) == 0 {
			continue
		}
		r := e.Old[0].String()
		switch e.Kind {
		case "unchanged", "split":
			if c := map[string]Case{"unchanged": Unchanged, "split": Split}[e.Kind]; !from[c][r] {
				t.Errorf("%s is %s by Diff, not carried so by Propagate", r, e.Kind)
			}
		case "merged":
			// Propagate carries one of the ranges merged into a new one and
			// drops the others.
			if !from[Merged][r] && !slices.ContainsFunc(dropped, func(x Delegation) bool { return x.Range.String() == r }) {
				t.Errorf("%s is merged by Diff, neither carried as merged nor dropped", r)
			}
		case "removed":
			if !slices.ContainsFunc(dropped, func(x Delegation) bool { return x.Range.String() == r }) {
				t.Errorf("%s is removed by Diff, not dropped by Propagate", r)
			}
		}
	}
	if d.Unchanged != 2 || d.Split != 1 || d.Merged != 2 || d.Removed != 1 {
		t.Errorf("counts %+v", d)
	}
}

// TestDiffRealLACNIC compares the hierarchies built from LACNIC's real
// 2013 file and its 2024 extended file (each with IANA's): every range is
// counted once on each side, every kind of change occurs, and each example
// is what its kind says, checked against the trees.
func TestDiffRealLACNIC(t *testing.T) {
	dir := dataDir(t)
	tree := func(lacnic string) *Tree {
		b, err := NewBuilder()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"rir/iana/delegated-iana-latest.gz", lacnic} {
			if _, err := b.AddFile(t.Context(), filepath.Join(dir, p), FormatAuto); err != nil {
				t.Fatal(err)
			}
		}
		tr, _, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	old := tree("rir/2013-08-13/delegated-lacnic-latest.gz")
	newT := tree("rir/extended/delegated-lacnic-extended-latest.gz")
	d := DiffTrees(old, newT, 50)
	t.Logf("LACNIC 2013 → 2024: %d → %d ranges; unchanged %d, split %d (into %d), merged %d (into %d), removed %d, added %d",
		d.OldRanges, d.NewRanges, d.Unchanged, d.Split, d.Parts, d.Merged, d.MergedInto, d.Removed, d.Added)
	if d.OldRanges != old.Len()-2 || d.NewRanges != newT.Len()-2 {
		t.Errorf("ranges %d, %d; the trees hold %d, %d besides their roots", d.OldRanges, d.NewRanges, old.Len()-2, newT.Len()-2)
	}
	if d.Unchanged+d.Split+d.Merged+d.Removed != d.OldRanges || d.Unchanged+d.Parts+d.MergedInto+d.Added != d.NewRanges {
		t.Errorf("counts do not add up: %+v", d)
	}
	// Registries rarely renumber: most old ranges survive, and eleven years
	// of allocations add more ranges than the old file had.
	if d.Unchanged < d.OldRanges*9/10 || d.Added < d.OldRanges || d.Split == 0 || d.Merged == 0 || d.Removed == 0 {
		t.Errorf("implausible diff of real files: %+v", d)
	}
	for _, e := range d.Examples {
		for _, r := range e.Old {
			if _, ok := old.Find(r); !ok {
				t.Errorf("%s example: %s is not an old range", e.Kind, r)
			}
			if _, ok := newT.Find(r); ok != (e.Kind == "unchanged") {
				t.Errorf("%s example: %s in the new tree: %v", e.Kind, r, ok)
			}
		}
		for _, r := range e.New {
			if _, ok := newT.Find(r); !ok {
				t.Errorf("%s example: %s is not a new range", e.Kind, r)
			}
			switch e.Kind {
			case "split":
				if !e.Old[0].ContainsRange(r) {
					t.Errorf("split example: part %s outside %s", r, e.Old[0])
				}
			case "merged":
				if !r.ContainsRange(e.Old[0]) && !r.Contains(e.Old[0].Start) && !r.Contains(e.Old[0].End) {
					t.Errorf("merged example: %s does not meet %s", r, e.Old[0])
				}
			case "added":
				if _, ok := old.Find(r); ok {
					t.Errorf("added example: %s was in the old tree", r)
				}
			}
		}
	}
}
