package subnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestOverlapsAreCutDeterministically(t *testing.T) {
	tests := []struct {
		name         string
		inputs       []string
		want         []string // all ranges below the roots, in preorder, with their layer
		clipped      int
		pieces, dups int
		combined     int
	}{{
		name: "partial overlap within one file: the range starting first wins",
		inputs: []string{
			"2|ripencc|1|2|19700101|20260720|+0200\n" +
				"ripencc|NL|ipv4|10.0.0.0|512|20000101|allocated|A\n" +
				"ripencc|DE|ipv4|10.0.1.0|512|20000101|allocated|B\n",
		},
		want:    []string{"10.0.0.0/23 rir", "10.0.1.0/24 rir", "10.0.2.0/24 rir"},
		clipped: 1, pieces: 2,
	}, {
		name: "routing data crossing an allocation boundary is cut at it",
		inputs: []string{
			"2|apnic|1|1|19700101|20130812|+1000\napnic|AU|ipv4|10.0.0.0|256|20000101|allocated\n",
			"10.0.0.128,10.0.1.127,64500,Example Net\n",
		},
		want:    []string{"10.0.0.0/24 rir", "10.0.0.128/25 asn", "10.0.1.0/25 asn"},
		clipped: 1, pieces: 2,
	}, {
		name: "the newer file wins over the older one of the same layer",
		inputs: []string{
			"2|ripencc|1|1|19700101|20130812|+0200\nripencc|NL|ipv4|10.0.1.0|512|20000101|allocated\n",
			"2|ripencc|1|1|19700101|20260720|+0200\nripencc|DE|ipv4|10.0.0.0|512|20000101|allocated|X\n",
		},
		want:    []string{"10.0.0.0/23 rir", "10.0.1.0/24 rir", "10.0.2.0/24 rir"},
		clipped: 1, pieces: 2,
	}, {
		name: "equal ranges of one layer merge, blanks filled",
		inputs: []string{
			"2|ripencc|1|1|19700101|20130812|+0200\nripencc|NL|ipv4|10.0.0.0|256|20000101|allocated\n",
			"2|ripencc|1|1|19700101|20260720|+0200\nripencc||ipv4|10.0.0.0|256|20000101|allocated|X\n",
		},
		want: []string{"10.0.0.0/24 rir"},
		dups: 1,
	}, {
		name: "equal ranges of different layers merge, the more structural wins",
		inputs: []string{
			"10.0.0.0,10.0.0.255,64500,Example Net\n",
			"2|ripencc|1|1|19700101|20260720|+0200\nripencc|NL|ipv4|10.0.0.0|256|20000101|allocated|X\n",
		},
		want:     []string{"10.0.0.0/24 rir"},
		combined: 1,
	}, {
		name: "routing data containing an allocation is cut around it",
		inputs: []string{
			"2|ripencc|1|1|19700101|20260720|+0200\nripencc|NL|ipv4|10.0.1.0|256|20000101|allocated|X\n",
			"10.0.0.0,10.0.3.255,64500,Example Net\n",
		},
		want:    []string{"10.0.0.0/24 asn", "10.0.1.0/24 rir", "10.0.2.0/23 asn"},
		clipped: 1, pieces: 3, combined: 1,
	}, {
		name: "a range crossing two nested ranges is cut at both ends",
		inputs: []string{
			"inetnum: 10.0.0.0 - 10.0.3.255\nsource: RIPE\n\ninetnum: 10.0.0.0 - 10.0.1.255\nsource: RIPE\n\n" +
				"inetnum: 10.0.1.128 - 10.0.4.255\nnetname: CROSS\nsource: RIPE\n",
		},
		want:    []string{"10.0.0.0/22 rpsl", "10.0.0.0/23 rpsl", "10.0.1.128/25 rpsl", "10.0.2.0/23 rpsl", "10.0.4.0/24 rpsl"},
		clipped: 1, pieces: 3,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, rep := build(t, tc.inputs...)
			var got []string
			for id := range tr.All() {
				if tr.Parent(id) == None {
					continue
				}
				n := tr.Node(id)
				got = append(got, n.Range.String()+" "+n.Layer.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("ranges\n got %q\nwant %q", got, tc.want)
			}
			if rep.Clipped != tc.clipped || rep.Pieces != tc.pieces || rep.Duplicates != tc.dups || rep.Combined != tc.combined {
				t.Errorf("report clipped %d pieces %d dups %d combined %d, want %d %d %d %d",
					rep.Clipped, rep.Pieces, rep.Duplicates, rep.Combined, tc.clipped, tc.pieces, tc.dups, tc.combined)
			}
		})
	}
}

func TestMergeKeepsWinnerAndFillsBlanks(t *testing.T) {
	tr, _ := build(t,
		"2|ripencc|1|1|19700101|20130812|+0200\nripencc|NL|ipv4|10.0.0.0|256|20000101|allocated\n",
		"2|ripencc|1|1|19700101|20260720|+0200\nripencc||ipv4|10.0.0.0|256|20000101|assigned|X\n",
	)
	n := tr.Node(tr.Lookup(mustAddr(t, "10.0.0.1")))
	if n.Org != "ripencc:X" || n.Country != "NL" || n.Status != "assigned" {
		t.Errorf("merged node %+v: want the newer file's org and status, the older file's country", n)
	}
}

// TestRandomBuilds builds random, heavily overlapping inputs of every format
// and checks the properties the rest of micra relies on.
func TestRandomBuilds(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for round := 0; round < 40; round++ {
		is4 := round%2 == 0
		inputs := randomDelegated(rng, 200, is4)
		tr, _ := build(t, inputs...)
		again, _ := build(t, inputs...)
		if tr.ID() != again.ID() {
			t.Fatalf("round %d: two builds of the same inputs differ", round)
		}
		// Every address of every input range lies in a piece of it: a range
		// inside it of its layer, or of a more structural layer that the
		// piece was merged into.
		for _, r := range parsedRanges(t, inputs) {
			for q := 0; q < 3; q++ {
				a := randomIn(rng, r.rg)
				ok := false
				for _, id := range tr.Chain(a) {
					if tr.Node(id).Layer <= r.layer && r.rg.ContainsRange(tr.Range(id)) {
						ok = true
						break
					}
				}
				if !ok {
					t.Fatalf("round %d: %s of %s (%s) not covered: chain %v", round, a, r.rg, r.layer, chainStrings(tr, a))
				}
			}
		}
		checkLayering(t, tr)
		// The snapshot encoding round-trips.
		var buf bytes.Buffer
		if err := tr.WriteSnapshot(&buf); err != nil {
			t.Fatal(err)
		}
		back, err := ReadSnapshot(&buf)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if back.ID() != tr.ID() || back.Len() != tr.Len() {
			t.Fatalf("round %d: snapshot round trip changed the tree", round)
		}
		for id := range tr.All() {
			if tr.Node(id) != back.Node(id) {
				t.Fatalf("round %d: node %d differs: %+v vs %+v", round, id, tr.Node(id), back.Node(id))
			}
		}
	}
}

func TestStrictStopsAtFirstMalformedLine(t *testing.T) {
	in := "2|apnic|1|2|19700101|20130812|+1000\napnic|AU|ipv4|10.0.0.0|256|20000101|allocated\napnic|AU|ipv4|10.0.1.0|zero|20000101|allocated\n"
	b, _ := NewBuilder(Strict())
	_, err := b.Add(context.Background(), "f.txt", strings.NewReader(in), FormatAuto)
	var le *LineError
	if !errors.As(err, &le) || le.Input != "f.txt" || le.Line != 3 || !errors.Is(err, ErrMalformed) {
		t.Fatalf("err = %v, want a LineError at f.txt:3", err)
	}
	if !strings.HasPrefix(err.Error(), "f.txt:3: ") {
		t.Errorf("error %q does not start with file:line", err)
	}
	// The failed input left nothing behind.
	tr, rep, err := b.Build()
	if err != nil || tr.Len() != 2 || len(rep.Inputs) != 0 {
		t.Errorf("after a failed Add: len %d inputs %d err %v", tr.Len(), len(rep.Inputs), err)
	}
}

func TestLimits(t *testing.T) {
	b, _ := NewBuilder(MaxInputSize(100))
	in := "2|apnic|1|2|19700101|20130812|+1000\n" + strings.Repeat("apnic|AU|ipv4|10.0.0.0|256|20000101|allocated\n", 10)
	if _, err := b.Add(context.Background(), "big", strings.NewReader(in), FormatAuto); !errors.Is(err, ErrTooLarge) {
		t.Errorf("input over the size limit: err = %v", err)
	}
	b, _ = NewBuilder(MaxRanges(5))
	if _, err := b.Add(context.Background(), "many", strings.NewReader(in), FormatAuto); !errors.Is(err, ErrTooLarge) {
		t.Errorf("too many ranges: err = %v", err)
	}
	b, _ = NewBuilder(MaxIssues(2))
	bad := "2|apnic|1|2|19700101|20130812|+1000\n" + strings.Repeat("apnic|AU|ipv4|nope|256|20000101|allocated\n", 10)
	rep, err := b.Add(context.Background(), "bad", strings.NewReader(bad), FormatAuto)
	if err != nil || rep.Skipped != 10 || len(rep.Issues) != 2 {
		t.Errorf("skipped %d, issues %d, err %v; want 10, 2, nil", rep.Skipped, len(rep.Issues), err)
	}
	for _, o := range []Option{MaxInputSize(0), MaxRanges(-1), MaxIssues(-1)} {
		if _, err := NewBuilder(o); err == nil {
			t.Error("a bad option was accepted")
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b, _ = NewBuilder()
	many := "2|apnic|1|2|19700101|20130812|+1000\n" + strings.Repeat("apnic|AU|ipv4|10.0.0.0|256|20000101|allocated\n", 5000)
	if _, err := b.Add(ctx, "cancelled", strings.NewReader(many), FormatAuto); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: err = %v", err)
	}
}

func TestFormatDetection(t *testing.T) {
	tests := []struct {
		in   string
		want Format
	}{
		{"# comment\n\n2|apnic|1|2|3|4|5\n", FormatDelegated},
		{"2.3|lacnic|x\n", FormatDelegated},
		{"% whois\ninetnum: 1.0.0.0 - 1.0.0.255\n", FormatRPSL},
		{"1.0.0.0,1.0.0.255,13335,x\n", FormatIP2ASN},
		{"2001:db8::,2001:db8::ff,1,x\n", FormatIP2ASN},
		{"hello world\n", FormatAuto},
		{"", FormatAuto},
	}
	for _, tc := range tests {
		if got := detect([]byte(tc.in)); got != tc.want {
			t.Errorf("detect(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
	b, _ := NewBuilder()
	if _, err := b.Add(context.Background(), "x", strings.NewReader("hello\n"), FormatAuto); !errors.Is(err, ErrUnknownFormat) {
		t.Errorf("unknown format: err = %v", err)
	}
	for _, empty := range []string{"", "% no objects\n\n", "# nothing\n"} {
		if rep, err := b.Add(context.Background(), "empty", strings.NewReader(empty), FormatAuto); err != nil || rep.Ranges != 0 {
			t.Errorf("empty input %q: %+v %v", empty, rep, err)
		}
	}
	for _, s := range []string{"auto", "delegated", "RPSL", "ip2asn"} {
		if _, err := ParseFormat(s); err != nil {
			t.Errorf("ParseFormat(%q): %v", s, err)
		}
	}
	if _, err := ParseFormat("csv"); err == nil {
		t.Error("ParseFormat(csv) accepted")
	}
}

// inputRange is one range of an input as the parser should read it.
type inputRange struct {
	rg    Range
	layer Layer
}

// parsedRanges parses each input alone and returns its ranges.
func parsedRanges(t *testing.T, inputs []string) []inputRange {
	var out []inputRange
	for _, in := range inputs {
		b, _ := NewBuilder()
		if _, err := b.Add(context.Background(), "x", strings.NewReader(in), FormatAuto); err != nil {
			t.Fatal(err)
		}
		st := b.stages[0]
		for _, fam := range [][]rec{st.v4, st.v6} {
			for _, r := range fam {
				is4 := len(st.v4) > 0
				out = append(out, inputRange{Range{r.s.addr(is4), r.e.addr(is4)}, st.layer})
			}
		}
	}
	return out
}

// randomDelegated returns random inputs of all four kinds whose ranges lie
// in a small space so that they overlap often: an IANA file, two RIR files
// of different dates, RPSL objects and an ip2asn table.
func randomDelegated(rng *rand.Rand, n int, is4 bool) []string {
	base := netip.MustParseAddr("10.0.0.0")
	if !is4 {
		base = netip.MustParseAddr("2001:db8::")
	}
	// Ranges within base + [0, 2^16).
	pick := func(aligned bool) (Range, int) {
		bits := rng.IntN(12) + 1 // size 2^bits, up to 4096
		off := rng.Uint64N(1<<16 - 1<<bits)
		if aligned {
			off &^= 1<<bits - 1
		}
		s := keyOf(base).add(key{lo: off})
		size := uint64(1) << bits
		if !aligned && rng.IntN(3) == 0 {
			size = rng.Uint64N(size) + 1 // not a power of two
		}
		e := s.add(key{lo: size - 1})
		return Range{s.addr(is4), e.addr(is4)}, bits
	}
	fam := "ipv4"
	if !is4 {
		fam = "ipv6"
	}
	plen := func(bits int) int { return 128 - bits }
	var iana, rir1, rir2, rpsl, asn strings.Builder
	iana.WriteString("2|iana|1|0|19700101|20190911|+0000\n")
	rir1.WriteString("2|ripencc|1|0|19700101|20130812|+0200\n")
	rir2.WriteString("2.3|ripencc|1|0|19700101|20260720|+0200\n")
	for i := 0; i < n; i++ {
		switch rng.IntN(5) {
		case 0, 1:
			aligned := !is4
			r, bits := pick(aligned)
			w := &rir1
			if rng.IntN(2) == 0 {
				w = &rir2
			}
			val := fmt.Sprint(r.NumAddrs())
			if !is4 {
				val = fmt.Sprint(plen(bits))
			}
			fmt.Fprintf(w, "ripencc|NL|%s|%s|%s|20000101|allocated|ORG%d\n", fam, r.Start, val, rng.IntN(20))
		case 2:
			r, _ := pick(false)
			fmt.Fprintf(&rpsl, "%s: %s - %s\nnetname: N%d\norg: ORG-%d\nsource: RIPE\n\n",
				map[bool]string{true: "inetnum", false: "inet6num"}[is4], r.Start, r.End, i, rng.IntN(20))
		case 3:
			r, _ := pick(false)
			fmt.Fprintf(&asn, "%s,%s,%d,\"Org %d, Inc.\"\n", r.Start, r.End, 64500+rng.IntN(10), rng.IntN(10))
		case 4:
			if rng.IntN(4) == 0 {
				r, bits := pick(true)
				val := fmt.Sprint(r.NumAddrs())
				if !is4 {
					val = fmt.Sprint(plen(bits))
				}
				fmt.Fprintf(&iana, "iana|ZZ|%s|%s|%s|19930501|ripencc\n", fam, r.Start, val)
			}
		}
	}
	out := []string{iana.String(), rir1.String(), rir2.String()}
	if rpsl.Len() > 0 {
		out = append(out, rpsl.String())
	}
	if asn.Len() > 0 {
		out = append(out, asn.String())
	}
	return out
}

func randomAddr(rng *rand.Rand, is4 bool) netip.Addr {
	base := netip.MustParseAddr("10.0.0.0")
	if !is4 {
		base = netip.MustParseAddr("2001:db8::")
	}
	return keyOf(base).add(key{lo: rng.Uint64N(1<<16 + 512)}).addr(is4)
}

func randomIn(rng *rand.Rand, r Range) netip.Addr {
	s, e := keyOf(r.Start), keyOf(r.End)
	d := e.sub(s)
	return s.add(key{lo: rng.Uint64N(d.lo + 1)}).addr(r.Start.Is4())
}

// checkLayering checks that structural layers stay on top: no range has a
// parent of a less structural layer.
func checkLayering(t *testing.T, tr *Tree) {
	t.Helper()
	for id := range tr.All() {
		p := tr.Parent(id)
		if p == None {
			continue
		}
		if n, pn := tr.Node(id), tr.Node(p); pn.Layer > n.Layer {
			t.Fatalf("%s (%s) has parent %s (%s)", n.Range, n.Layer, pn.Range, pn.Layer)
		}
	}
}

func TestFailedAddLeavesNoTrace(t *testing.T) {
	b, _ := NewBuilder(Strict())
	ctx := context.Background()
	if _, err := b.Add(ctx, "good", strings.NewReader("inetnum: 10.0.0.0 - 10.0.0.255\norg: ORG-A\n"), FormatAuto); err != nil {
		t.Fatal(err)
	}
	// This input names ORG-A, adds a registry, then fails.
	bad := "organisation: ORG-A\norg-name: Leaked Name\n\ninetnum: 10.1.0.0 - 10.1.0.255\norg: ORG-B\nsource: NEWREG\n\ninetnum: 10.2.0.0/33\n"
	if _, err := b.Add(ctx, "bad", strings.NewReader(bad), FormatAuto); err == nil {
		t.Fatal("bad input accepted")
	}
	tr, _, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if name := tr.OrgName("org:ORG-A"); name != "" {
		t.Errorf("the failed input's organisation name leaked: %q", name)
	}
	if tr.NumOrgs() != 1 || len(tr.Stats().Registries) != 0 {
		t.Errorf("orgs %d registries %v after a failed input", tr.NumOrgs(), tr.Stats().Registries)
	}
}

func TestWholeSpaceIsTheRoot(t *testing.T) {
	tr, rep := build(t, "inetnum: 0.0.0.0 - 255.255.255.255\nnetname: IANA-BLK\n\ninet6num: ::/0\nnetname: ROOT\n\ninetnum: 10.0.0.0/8\n")
	if tr.Len() != 3 || rep.Combined != 2 {
		t.Errorf("len %d combined %d, want the two roots and 10/8, 2 combined", tr.Len(), rep.Combined)
	}
}
