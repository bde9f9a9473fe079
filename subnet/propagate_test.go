package subnet

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// rpslTree builds a tree from "start - end" ranges given as RPSL objects.
func rpslTree(t *testing.T, ranges ...string) *Tree {
	t.Helper()
	var b strings.Builder
	for i, r := range ranges {
		fmt.Fprintf(&b, "inetnum: %s\nnetname: N%d\nsource: RIPE\n\n", r, i)
	}
	if len(ranges) == 0 {
		tr, _ := build(t)
		return tr
	}
	tr, _ := build(t, b.String())
	return tr
}

func TestPropagate(t *testing.T) {
	old := rpslTree(t,
		"10.0.0.0 - 10.255.255.255",
		"10.1.0.0 - 10.1.255.255", // unchanged
		"10.2.0.0 - 10.2.255.255", // split into two /17
		"10.3.0.0 - 10.3.0.255",   // merged with 10.3.1.0/24 into 10.3.0.0/23
		"10.3.1.0 - 10.3.1.255",
		"10.4.0.0 - 10.4.0.255", // removed; 10.0/8 existed before, so nobody inherits
		"10.5.0.0 - 10.5.255.255",
	)
	newT := rpslTree(t,
		"10.0.0.0 - 10.255.255.255",
		"10.1.0.0 - 10.1.255.255",
		"10.2.0.0 - 10.2.127.255",
		"10.2.128.0 - 10.2.255.255",
		"10.3.0.0 - 10.3.1.255",
		"10.5.0.0 - 10.5.127.255", // half of 10.5/16 split off; the rest falls to 10/8
	)
	dels := []Delegation{
		{mustRange(t, "10.1.0.0/16"), "A"},
		{mustRange(t, "10.2.0.0/16"), "B"},
		{mustRange(t, "10.3.0.0/24"), "C"},
		{mustRange(t, "10.3.1.0/24"), "D"},
		{mustRange(t, "10.4.0.0/24"), "E"},
		{mustRange(t, "10.5.0.0/16"), "F"},
	}
	carried, dropped := Propagate(old, newT, dels)
	var got []string
	for _, c := range carried {
		got = append(got, fmt.Sprintf("%s %s %s from %s", c.Range, c.Owner, c.Case, c.From))
	}
	want := []string{
		"10.1.0.0/16 A unchanged from 10.1.0.0/16",
		"10.2.0.0/17 B split from 10.2.0.0/16",
		"10.2.128.0/17 B split from 10.2.0.0/16",
		// Two old subnets merged into one new one: the tie (equal overlap)
		// goes to the old range that starts first.
		"10.3.0.0/23 C merged from 10.3.0.0/24",
		"10.5.0.0/17 F split from 10.5.0.0/16",
	}
	if !slices.Equal(got, want) {
		t.Errorf("carried\n got %q\nwant %q", got, want)
	}
	var gotDropped []string
	for _, d := range dropped {
		gotDropped = append(gotDropped, d.Range.String()+" "+d.Owner)
	}
	if want := []string{"10.3.1.0/24 D", "10.4.0.0/24 E"}; !slices.Equal(gotDropped, want) {
		t.Errorf("dropped %q, want %q", gotDropped, want)
	}
}

func TestPropagatePreferences(t *testing.T) {
	old := rpslTree(t, "10.0.0.0 - 10.0.255.255", "10.0.0.0 - 10.0.0.255", "10.0.1.0 - 10.0.3.255")
	newT := rpslTree(t, "10.0.0.0 - 10.0.255.255", "10.0.0.0 - 10.0.3.255")
	// 10.0.0.0/22 is new; it holds all of X's /24 and Y's 3 /24s: Y covers
	// more, so Y wins the merge. The unchanged /16 beats any merge.
	carried, dropped := Propagate(old, newT, []Delegation{
		{mustRange(t, "10.0.0.0/24"), "X"},
		{mustRange(t, "10.0.1.0 - 10.0.3.255"), "Y"},
		{mustRange(t, "10.0.0.0/16"), "Z"},
	})
	var got []string
	for _, c := range carried {
		got = append(got, fmt.Sprintf("%s %s %s", c.Range, c.Owner, c.Case))
	}
	if want := []string{"10.0.0.0/16 Z unchanged", "10.0.0.0/22 Y merged"}; !slices.Equal(got, want) {
		t.Errorf("carried %q, want %q", got, want)
	}
	if len(dropped) != 1 || dropped[0].Owner != "X" {
		t.Errorf("dropped %v, want X", dropped)
	}
	// Invalid delegations are dropped; a delegation of a root's addresses
	// never makes the root delegated.
	carried, dropped = Propagate(old, rpslTree(t), []Delegation{{Range{}, "bad"}, {mustRange(t, "10.0.0.0/16"), "R"}})
	if len(carried) != 0 || len(dropped) != 2 {
		t.Errorf("carried %v dropped %v", carried, dropped)
	}
}

func TestPartition(t *testing.T) {
	tr := rpslTree(t, "10.0.0.0 - 10.0.255.255", "10.0.1.0 - 10.0.1.255", "10.0.2.0 - 10.0.5.255", "10.0.3.0 - 10.0.3.255")
	type p struct {
		r      string
		direct bool
		n      uint64
	}
	var got []p
	for x, direct := range tr.partition(mustRange(t, "10.0.0.128 - 10.0.3.255")) {
		got = append(got, p{tr.Range(x.id).String(), direct, x.n})
	}
	want := []p{
		{"10.0.0.0/16", true, 128},           // 10.0.0.128-10.0.0.255
		{"10.0.1.0/24", false, 256},          // inside
		{"10.0.2.0 - 10.0.5.255", true, 256}, // 10.0.2.0-10.0.2.255, directly in the crossing range
		{"10.0.3.0/24", false, 256},          // inside, below the crossing range
	}
	if !slices.Equal(got, want) {
		t.Errorf("partition\n got %+v\nwant %+v", got, want)
	}
}
