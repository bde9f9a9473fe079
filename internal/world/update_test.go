package world_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/internal/world/worldtest"
	"github.com/micra-net/micra/subnet"
)

// buildTree loads registry files as World.Tree does.
func buildTree(t *testing.T, files []world.RegistryFile) *subnet.Tree {
	t.Helper()
	b, err := subnet.NewBuilder(subnet.Strict())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, err := b.Add(t.Context(), f.Name, bytes.NewReader(f.Data), subnet.FormatAuto); err != nil {
			t.Fatal(err)
		}
	}
	tree, _, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// treeRanges returns the ranges of a tree but its roots.
func treeRanges(tree *subnet.Tree) map[subnet.Range]bool {
	rs := map[subnet.Range]bool{}
	for id := range tree.All() {
		if tree.Parent(id) != subnet.None {
			rs[tree.Range(id)] = true
		}
	}
	return rs
}

func example(old, new []subnet.Range) string { return fmt.Sprint(old, " → ", new) }

// TestUpdateRegistry checks that the importer and subnet.DiffTrees see
// exactly the changes UpdateRegistry reports, and nothing else.
func TestUpdateRegistry(t *testing.T) {
	w := worldtest.Generate(t, worldtest.Params(2, 40, 4))
	checkUpdate(t, w.Registry(), 1, 3)
}

func checkUpdate(t *testing.T, reg []world.RegistryFile, seed uint64, n int) {
	files, ch, err := world.UpdateRegistry(reg, seed, n)
	if err != nil {
		t.Fatal(err)
	}
	oldTree, newTree := buildTree(t, reg), buildTree(t, files)
	d := subnet.DiffTrees(oldTree, newTree, 1<<20)

	kinds := []struct {
		name    string
		changes []world.RegistryChange
		got     []int // diff counts: old ranges, new ranges
		want    []int // per change
	}{
		{"split", ch.Split, []int{d.Split, d.Parts}, []int{1, 2}},
		{"merged", ch.Merged, []int{d.Merged, d.MergedInto}, []int{2, 1}},
		{"removed", ch.Removed, []int{d.Removed}, []int{1}},
		{"added", ch.Added, []int{d.Added}, []int{1}},
	}
	want := map[string][]string{}
	oldRanges, newRanges := treeRanges(oldTree), treeRanges(newTree)
	for _, k := range kinds {
		if m := len(k.changes); m < 1 || m > n {
			t.Errorf("%d %s changes, want 1 to %d", m, k.name, n)
		}
		for i, c := range k.got {
			if c != k.want[i]*len(k.changes) {
				t.Errorf("diff counts %s %v, want %v per change, %d changes", k.name, k.got, k.want, len(k.changes))
				break
			}
		}
		for _, c := range k.changes {
			if k.name == "merged" {
				for _, o := range c.Old {
					want[k.name] = append(want[k.name], example([]subnet.Range{o}, c.New))
				}
			} else {
				want[k.name] = append(want[k.name], example(c.Old, c.New))
			}
			for _, r := range c.Old {
				if !oldRanges[r] || newRanges[r] {
					t.Errorf("%s: old range %v in old tree %v, in new tree %v", k.name, r, oldRanges[r], newRanges[r])
				}
				delete(oldRanges, r)
			}
			for _, r := range c.New {
				if oldRanges[r] || !newRanges[r] {
					t.Errorf("%s: new range %v in old tree %v, in new tree %v", k.name, r, oldRanges[r], newRanges[r])
				}
				delete(newRanges, r)
			}
		}
	}
	if !reflect.DeepEqual(oldRanges, newRanges) {
		t.Errorf("other ranges differ: %d before, %d after", len(oldRanges), len(newRanges))
	}
	got := map[string][]string{}
	for _, ex := range d.Examples {
		got[ex.Kind] = append(got[ex.Kind], example(ex.Old, ex.New))
	}
	for r := range oldRanges {
		want["unchanged"] = append(want["unchanged"], example([]subnet.Range{r}, []subnet.Range{r}))
	}
	for k := range want {
		slices.Sort(want[k])
		slices.Sort(got[k])
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("diff examples\n%q\nwant\n%q", got, want)
	}
}

func TestUpdateRegistrySeed(t *testing.T) {
	w := worldtest.Generate(t, worldtest.Params(2, 40, 4))
	a, ca, err := world.UpdateRegistry(w.Registry(), 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	b, cb, err := world.UpdateRegistry(w.Registry(), 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(ca, cb) {
		t.Error("the same seed gave different updates")
	}
	c, cc, err := world.UpdateRegistry(w.Registry(), 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(a, c) || reflect.DeepEqual(ca, cc) {
		t.Error("another seed gave the same update")
	}
	if !reflect.DeepEqual(w.Registry(), w.Registry()) {
		t.Error("the world's registry changed")
	}
}

// TestUpdateRegistryText checks the edited text of a file with one merge
// and one gap: the merge takes both leaves, so no split or removal is
// left, and the added object copies the second leaf, in its place.
func TestUpdateRegistryText(t *testing.T) {
	in := `% a comment

inetnum:        10.0.0.0 - 10.0.0.255
netname:        PARENT
status:         ALLOCATED PA
source:         TEST

organisation:   ORG-X
source:         TEST

inetnum:        10.0.0.0 - 10.0.0.3
netname:        A
descr:          first
status:         ASSIGNED PI
source:         TEST

inetnum:        10.0.0.4 - 10.0.0.7
netname:        B
source:         TEST
`
	want := `% a comment

inetnum:        10.0.0.0 - 10.0.0.255
netname:        PARENT
status:         ALLOCATED PA
source:         TEST

organisation:   ORG-X
source:         TEST

inetnum:        10.0.0.0 - 10.0.0.7
netname:        A
descr:          first
status:         ASSIGNED PI
source:         TEST

inetnum:        10.0.0.128 - 10.0.0.255
netname:        NEW-1
source:         TEST
status:         ASSIGNED PA
`
	other := world.RegistryFile{Name: "test.db.organisation", Format: subnet.FormatRPSL, Data: []byte("inetnum: junk\n")}
	files, ch, err := world.UpdateRegistry([]world.RegistryFile{other, {Name: "test.db.inetnum", Format: subnet.FormatRPSL, Data: []byte(in)}}, 7, 5)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(files[1].Data); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if !reflect.DeepEqual(files[0], other) {
		t.Errorf("other file changed: %q", files[0].Data)
	}
	r := func(s string) subnet.Range {
		a, b, _ := strings.Cut(s, "-")
		return subnet.Range{Start: netip.MustParseAddr(a), End: netip.MustParseAddr(b)}
	}
	wantCh := world.RegistryChanges{
		Merged: []world.RegistryChange{{File: "test.db.inetnum", Old: []subnet.Range{r("10.0.0.0-10.0.0.3"), r("10.0.0.4-10.0.0.7")}, New: []subnet.Range{r("10.0.0.0-10.0.0.7")}}},
		Added:  []world.RegistryChange{{File: "test.db.inetnum", New: []subnet.Range{r("10.0.0.128-10.0.0.255")}}},
	}
	if !reflect.DeepEqual(ch, wantCh) {
		t.Errorf("changes %+v, want %+v", ch, wantCh)
	}
}

// TestUpdateRegistrySplit checks the text of a split, drawn before a
// removal of the only leaf, whatever the seed.
func TestUpdateRegistrySplit(t *testing.T) {
	in := "inetnum: 10.0.0.0/30 # a leaf\nnetname: X\n+ continued\nsource: TEST\n"
	want := "inetnum: 10.0.0.0 - 10.0.0.1\nnetname: X-1\nsource: TEST\n\ninetnum: 10.0.0.2 - 10.0.0.3\nnetname: X-2\nsource: TEST\n"
	for seed := range uint64(5) {
		files, ch, err := world.UpdateRegistry([]world.RegistryFile{{Name: "x.db.inetnum", Format: subnet.FormatRPSL, Data: []byte(in)}}, seed, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(files[0].Data); got != want {
			t.Errorf("got\n%s\nwant\n%s", got, want)
		}
		if len(ch.Split) != 1 || len(ch.Merged)+len(ch.Removed)+len(ch.Added) != 0 {
			t.Errorf("changes %+v, want one split", ch)
		}
	}
}

func TestUpdateRegistryBadInput(t *testing.T) {
	tests := []struct {
		name, data string
		line       int
	}{
		{"not a range", "% c\n\ninetnum: 10.0.0.0 - x\nnetname: X\n", 3},
		{"reversed", "inetnum: 10.0.0.9 - 10.0.0.1\n", 1},
		{"ipv6", "inetnum: ::1 - ::2\n", 1},
		{"host bits", "inetnum: 10.0.0.1/24\n", 1},
		{"no attribute", "inetnum: 10.0.0.0/24\n\n\nnot an attribute\n", 4},
		{"continuation first", "\n inetnum: 10.0.0.0/24\n", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := world.UpdateRegistry([]world.RegistryFile{{Name: "bad.db.inetnum", Format: subnet.FormatRPSL, Data: []byte(tt.data)}}, 1, 1)
			var le *subnet.LineError
			if !errors.As(err, &le) || le.Input != "bad.db.inetnum" || le.Line != tt.line || !strings.Contains(err.Error(), "bad.db.inetnum:") {
				t.Fatalf("error %v, want one naming bad.db.inetnum line %d", err, tt.line)
			}
		})
	}
	if _, _, err := world.UpdateRegistry(nil, 1, -1); err == nil {
		t.Error("no error for n < 0")
	}
}
