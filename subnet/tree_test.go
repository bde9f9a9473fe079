package subnet

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// figure72 is the sample hierarchy of IPMicra thesis figure 7.2 as RPSL:
// subnet 2 (100.0.0.1-140.255.255.255) holds subnet 8
// (120.0.0.1-125.255.255.255), which holds subnets 11 and 13 (company 1 and
// company 2), the unary subnet 12 (121.0.0.1) and subnet 14.
const figure72 = `inetnum: 100.0.0.1 - 140.255.255.255
netname: SUBNET-2
org: ORG-C0
source: RIPE

inetnum: 120.0.0.1 - 125.255.255.255
netname: SUBNET-8
org: ORG-C3
source: RIPE

inetnum: 120.0.0.1 - 120.255.255.255
netname: SUBNET-11
org: ORG-C1
country: cy
source: RIPE

inetnum: 121.0.0.1 - 121.0.0.1
netname: SUBNET-12
org: ORG-C3
source: RIPE

inetnum: 122.0.0.0 - 122.255.255.255
netname: SUBNET-13
org: ORG-C2
source: RIPE

inetnum: 124.0.0.0 - 124.255.255.255
netname: SUBNET-14
org: ORG-C1
source: RIPE

inetnum: 130.0.0.0 - 130.0.255.255
netname: SUBNET-5
source: RIPE
`

func TestTreeNavigation(t *testing.T) {
	tr, _ := build(t, figure72)
	find := func(r string) ID {
		t.Helper()
		id, ok := tr.Find(mustRange(t, r))
		if !ok {
			t.Fatalf("range %s not found", r)
		}
		return id
	}
	s2 := find("100.0.0.1 - 140.255.255.255")
	s8 := find("120.0.0.1 - 125.255.255.255")
	s11 := find("120.0.0.1 - 120.255.255.255")
	s12 := find("121.0.0.1 - 121.0.0.1")
	s13 := find("122.0.0.0/8")
	s14 := find("124.0.0.0/8")
	s5 := find("130.0.0.0/16")
	root := tr.Root(true)

	tests := []struct {
		addr             string
		smallest, nonUna ID
	}{
		{"121.0.0.1", s12, s8},  // thesis example: unary 12 skipped, 8 used
		{"121.0.0.2", s8, s8},   // in 8 but no child
		{"120.5.5.5", s11, s11}, // in 11
		{"124.1.1.1", s14, s14},
		{"126.0.0.0", s2, s2}, // past 8, inside 2
		{"130.0.200.1", s5, s5},
		{"99.255.255.255", root, root},
		{"141.0.0.0", root, root},
		{"::ffff:121.0.0.1", s12, s8}, // IPv4-mapped IPv6 is IPv4
	}
	for _, tc := range tests {
		t.Run(tc.addr, func(t *testing.T) {
			a := mustAddr(t, tc.addr)
			if got := tr.Lookup(a); got != tc.smallest {
				t.Errorf("Lookup = %v (%s), want %v", got, tr.Range(got), tc.smallest)
			}
			if got := tr.SmallestNonUnary(a); got != tc.nonUna {
				t.Errorf("SmallestNonUnary = %v (%s), want %v", got, tr.Range(got), tc.nonUna)
			}
		})
	}

	if got := tr.Parent(s12); got != s8 {
		t.Errorf("Parent(12) = %v, want 8", got)
	}
	if got := tr.Parent(s2); got != root {
		t.Errorf("Parent(2) = %v, want root", got)
	}
	if got := tr.Parent(root); got != None {
		t.Errorf("Parent(root) = %v, want None", got)
	}
	if got := slices.Collect(tr.Children(s8)); !slices.Equal(got, []ID{s11, s12, s13, s14}) {
		t.Errorf("Children(8) = %v", got)
	}
	if got := slices.Collect(tr.Siblings(s13)); !slices.Equal(got, []ID{s11, s12, s14}) {
		t.Errorf("Siblings(13) = %v", got)
	}
	if got := slices.Collect(tr.Siblings(s8)); !slices.Equal(got, []ID{s5}) {
		t.Errorf("Siblings(8) = %v", got)
	}
	if got := slices.Collect(tr.Siblings(root)); len(got) != 0 {
		t.Errorf("Siblings(root) = %v", got)
	}
	if got := tr.NumChildren(s14); got != 0 {
		t.Errorf("NumChildren(14) = %d", got)
	}
	if got := slices.Collect(tr.Subtree(s8)); !slices.Equal(got, []ID{s8, s11, s12, s13, s14}) {
		t.Errorf("Subtree(8) = %v", got)
	}
	for id, want := range map[ID]int{root: 0, s2: 1, s8: 2, s12: 3, s5: 2} {
		if got := tr.Depth(id); got != want {
			t.Errorf("Depth(%s) = %d, want %d", tr.Range(id), got, want)
		}
	}
	if got := tr.ByOrg("org:ORG-C1"); !slices.Equal(got, []ID{s11, s14}) {
		t.Errorf("ByOrg(C1) = %v", got)
	}
	if got := tr.ByOrg("org:ORG-C3"); !slices.Equal(got, []ID{s8, s12}) {
		t.Errorf("ByOrg(C3) = %v", got)
	}
	if got := tr.ByOrg("org:NOPE"); got != nil {
		t.Errorf("ByOrg(unknown) = %v", got)
	}
	if got := tr.ByOrg(""); got != nil {
		t.Errorf("ByOrg(\"\") = %v", got)
	}
	n := tr.Node(s11)
	if n.Org != "org:ORG-C1" || n.Country != "CY" || n.Registry != "ripencc" || n.Layer != LayerRPSL || n.Depth != 3 {
		t.Errorf("Node(11) = %+v", n)
	}
	if n := tr.Node(s5); n.Org != "netname:ripencc:SUBNET-5" {
		t.Errorf("Node(5).Org = %q, want the netname key", n.Org)
	}
	if tr.Layer(s11) != LayerRPSL || tr.Layer(root) != LayerRoot {
		t.Error("Layer wrong")
	}
	if !tr.IsUnary(s12) || tr.IsUnary(s8) {
		t.Error("IsUnary wrong")
	}
	if got := chainStrings(tr, mustAddr(t, "122.1.2.3")); !slices.Equal(got, []string{
		"0.0.0.0/0", "100.0.0.1 - 140.255.255.255", "120.0.0.1 - 125.255.255.255", "122.0.0.0/8",
	}) {
		t.Errorf("Chain = %v", got)
	}
	// The IPv6 family is empty but has its root.
	v6 := mustAddr(t, "2001:db8::1")
	if got := tr.Lookup(v6); got != tr.Root(false) || tr.Range(got).String() != "::/0" {
		t.Errorf("IPv6 lookup = %v", got)
	}
	if got := tr.Lookup(netip.Addr{}); got != None {
		t.Errorf("Lookup(invalid) = %v", got)
	}
	if got := len(slices.Collect(tr.All())); got != tr.Len() || got != 9 {
		t.Errorf("All has %d nodes, Len %d, want 9", got, tr.Len())
	}
}

func TestFind(t *testing.T) {
	// Equal ranges from two layers are one node, of the more structural
	// layer, with the other's attributes filling its blanks.
	tr, _ := build(t,
		"2|iana|20190911|1|19830101|20190612|+0000\niana|ZZ|ipv4|10.0.0.0|16777216|20100119|ripencc\n",
		"inetnum: 10.0.0.0 - 10.255.255.255\nnetname: TEN\ncountry: NL\nsource: RIPE\n\ninetnum: 10.1.0.0 - 10.1.0.255\nnetname: SUB\nsource: RIPE\n",
	)
	id, ok := tr.Find(mustRange(t, "10.0.0.0/8"))
	n := tr.Node(id)
	if !ok || n.Layer != LayerIANA || n.Depth != 1 || n.Org != "netname:ripencc:TEN" || n.Country != "NL" || n.Registry != "ripencc" {
		t.Fatalf("Find(10/8) = %v %v %+v", id, ok, n)
	}
	if sub, ok := tr.Find(mustRange(t, "10.1.0.0/24")); !ok || tr.Parent(sub) != id {
		t.Errorf("Find(10.1.0.0/24) = %v %v", sub, ok)
	}
	for _, r := range []string{"10.0.0.0/9", "10.1.0.0/16", "10.1.0.0/25", "11.0.0.0/8", "2001:db8::/32"} {
		if id, ok := tr.Find(mustRange(t, r)); ok {
			t.Errorf("Find(%s) = %v, want not found", r, tr.Range(id))
		}
	}
	if _, ok := tr.Find(Range{}); ok {
		t.Error("Find(invalid) found something")
	}
}

// TestLookupMatchesBruteForce compares Lookup on random hierarchies with a
// linear scan for the smallest containing range.
func TestLookupMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 20; round++ {
		in := randomDelegated(rng, 300, round%2 == 0)
		tr, _ := build(t, in...)
		for q := 0; q < 500; q++ {
			a := randomAddr(rng, round%2 == 0)
			got := tr.Lookup(a)
			want := None
			var wantSize uint64
			for id := range tr.All() {
				r := tr.Range(id)
				if !r.Contains(a) {
					continue
				}
				if want == None || r.NumAddrs() < wantSize {
					want, wantSize = id, r.NumAddrs()
				}
			}
			if got != want {
				t.Fatalf("round %d: Lookup(%s) = %s, want %s", round, a, tr.Range(got), tr.Range(want))
			}
		}
	}
}

func BenchmarkLookupSmall(b *testing.B) {
	tr, _ := build(b, figure72)
	a := netip.MustParseAddr("121.0.0.2")
	b.ReportAllocs()
	for b.Loop() {
		tr.Lookup(a)
	}
}
