package subnet

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// claimWorld is a search over the thesis example (figure 7.2) with nodes
// at known places: ms[n] is n's true RTT to the address searched, and
// between[{a,b}] the RTT between two nodes, as each measures the other.
type claimWorld struct {
	tr      *Tree
	tab     *MemTable
	prober  *fakeProber
	between map[[2]string]int
}

func newClaimWorld(t *testing.T, rtt map[string]int, between map[[2]string]int) *claimWorld {
	t.Helper()
	tr, _ := build(t, figure72)
	var nodes []string
	for n := range rtt {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	return &claimWorld{tr: tr, tab: NewMemTable(nodes...), prober: &fakeProber{rtt: rtt}, between: between}
}

func (w *claimWorld) measured(a, b string) (time.Duration, bool) {
	if ms, ok := w.between[[2]string{a, b}]; ok {
		return time.Duration(ms) * time.Millisecond, true
	}
	if ms, ok := w.between[[2]string{b, a}]; ok {
		return time.Duration(ms) * time.Millisecond, true
	}
	return 0, false
}

func (w *claimWorld) search(t *testing.T, cc *ClaimCheck) (Decision, error) {
	t.Helper()
	if cc != nil {
		cc.Measured = w.measured
	}
	m := &IPMicra{Tree: w.tr, Table: w.tab, Prober: w.prober, Cache: &MemProbeCache{Tree: w.tr},
		Config: SearchConfig{Claims: cc, MaxProbes: 16}}
	return m.Delegate(context.Background(), mustAddr(t, "121.0.0.1"))
}

func TestClaimCheck(t *testing.T) {
	ms := time.Millisecond
	// The liar A (asked first: the paper's search asks the nodes in
	// order) answers 1 ms; it is really 150 ms away, next to W1 and W2 (5
	// and 8 ms from it), which are 140 and 150 ms from the site. H is
	// honest, 30 ms from the site.
	liarWorld := func() (map[string]int, map[[2]string]int) {
		return map[string]int{"A": 1, "W1": 140, "W2": 150, "H": 30},
			map[[2]string]int{{"W1", "A"}: 5, {"W2", "A"}: 8, {"H", "A"}: 160, {"W1", "H"}: 150, {"W2", "H"}: 155, {"W1", "W2"}: 6}
	}
	t.Run("a liar is refuted by two witnesses and the next best wins", func(t *testing.T) {
		rtt, between := liarWorld()
		w := newClaimWorld(t, rtt, between)
		tally := &ClaimTally{}
		d, err := w.search(t, &ClaimCheck{Tally: tally})
		if err != nil {
			t.Fatal(err)
		}
		if d.Node != "H" || d.RTT != 30*ms {
			t.Fatalf("decision %+v; want H at 30 ms", d)
		}
		if len(d.Rejected) != 1 || d.Rejected[0].Node != "A" || d.Rejected[0].Claim != ms || len(d.Rejected[0].Witnesses) < 2 {
			t.Fatalf("rejected %+v; want A's 1 ms claim, refuted by two witnesses", d.Rejected)
		}
		if r, _ := tally.Counts("A"); r != 1 || tally.Rejected() != 1 || !tally.Barred("A") {
			t.Errorf("tally: A rejected %d, %d in all, barred %v; want 1, 1, barred", r, tally.Rejected(), tally.Barred("A"))
		}
	})
	t.Run("without the check the liar wins", func(t *testing.T) {
		rtt, between := liarWorld()
		d, err := newClaimWorld(t, rtt, between).search(t, nil)
		if err != nil || d.Node != "A" {
			t.Fatalf("decision %+v, %v; want A", d, err)
		}
	})
	t.Run("a barred node is not asked until its bar ends", func(t *testing.T) {
		rtt, between := liarWorld()
		w := newClaimWorld(t, rtt, between)
		now := time.Unix(1e9, 0)
		tally := &ClaimTally{Strikes: 2, BarFor: time.Hour, Now: func() time.Time { return now }}
		for range 2 {
			if _, err := w.search(t, &ClaimCheck{Tally: tally}); err != nil {
				t.Fatal(err)
			}
		}
		if !tally.Barred("A") || !slices.Equal(tally.BarredNodes(), []string{"A"}) {
			t.Fatalf("A rejected twice and not barred: %v", tally.BarredNodes())
		}
		w.prober.asked = nil
		d, err := w.search(t, &ClaimCheck{Tally: tally})
		if err != nil || d.Node != "H" || slices.Contains(w.prober.asked, "A") || len(d.Rejected) != 0 {
			t.Errorf("decision %+v (%v) after asking %v; want H without asking A", d, err, w.prober.asked)
		}
		now = now.Add(time.Hour)
		if tally.Barred("A") {
			t.Error("A still barred after BarFor")
		}
	})
	t.Run("one witness alone cannot reject", func(t *testing.T) {
		// Only W1 is near the liar; W2 is far from everything, and H
		// sees A as near as the site and a claim of 1 ms allow.
		rtt, between := liarWorld()
		between[[2]string{"W2", "A"}] = 200
		between[[2]string{"H", "A"}] = 60
		between[[2]string{"W1", "W2"}] = 200
		rtt["W2"] = 100
		// (By the plain triangle inequality W1 and W2 both show A 90 ms
		// or more from the site: its floor, below, would raise it above H.)
		d, err := newClaimWorld(t, rtt, between).search(t, &ClaimCheck{})
		if err != nil || d.Node != "A" || len(d.Rejected) != 0 {
			t.Errorf("decision %+v, %v; want A kept: a single witness refutes it", d, err)
		}
	})
	t.Run("a claim counts for no less than two witnesses show", func(t *testing.T) {
		// B halves its RTT (50 ms, it answers 25): within the Factor,
		// no witness can refute it. A1 and A2, beyond the site (60 and
		// 62 ms from it), are 110 and 115 ms from B: by the plain
		// triangle inequality B is 50 and 53 ms from the site at least,
		// 40 and 43 less the 10 ms slack. Its answer counts for 40 (the
		// second largest) and C, honest at 35 ms, wins; nobody is
		// rejected. The paper's search asks A1, A2, B, then C.
		world := func(a2b int) *claimWorld {
			return newClaimWorld(t, map[string]int{"A1": 60, "A2": 62, "B": 25, "C": 35},
				map[[2]string]int{{"A1", "A2"}: 5, {"A1", "B"}: 110, {"A2", "B"}: a2b, {"A1", "C"}: 80, {"A2", "C"}: 85, {"B", "C"}: 60})
		}
		d, err := world(115).search(t, &ClaimCheck{Floor: true})
		if err != nil || d.Node != "C" || d.RTT != 35*ms || len(d.Rejected) != 0 {
			t.Fatalf("decision %+v, %v; want C at 35 ms, nobody rejected", d, err)
		}
		if d, err := world(115).search(t, &ClaimCheck{}); err != nil || d.Node != "B" {
			t.Errorf("without the floor: %+v, %v; want B", d, err)
		}
		// One witness alone raises no claim, but the trusted one does;
		// and an untrusted witness's second bound (the claimant too far
		// from it) raises none when some witness is trusted: a witness
		// that shortens its own probe would raise honest claims by it.
		if d, err := world(70).search(t, &ClaimCheck{Floor: true}); err != nil || d.Node != "B" {
			t.Errorf("A1 alone: %+v, %v; want B", d, err)
		}
		if d, err := world(70).search(t, &ClaimCheck{Floor: true, Trusted: func(n string) bool { return n == "A1" }}); err != nil || d.Node != "C" {
			t.Errorf("A1 alone, trusted: %+v, %v; want C", d, err)
		}
		if d, err := world(115).search(t, &ClaimCheck{Floor: true, Trusted: func(n string) bool { return n == "C" }}); err != nil || d.Node != "B" {
			t.Errorf("A1 and A2, untrusted, by the second bound: %+v, %v; want B", d, err)
		}
	})
	t.Run("a raised answer is no measurement", func(t *testing.T) {
		// B1 and B2 answer 25 and 26 ms and A1 and A2 raise them to 100
		// and more. C, honest at 35 ms and 5 and 6 ms from B1 and B2,
		// wins next. Taken as witnesses at 100 ms from the site, B1 and
		// B2 would raise C to 85 ms and A1 would win.
		between := map[[2]string]int{{"A1", "A2"}: 5, {"A1", "C"}: 80, {"A2", "C"}: 85, {"B1", "C"}: 5, {"B2", "C"}: 6}
		for i, b := range []string{"B1", "B2"} {
			between[[2]string{"A1", b}] = 170 + 2*i
			between[[2]string{"A2", b}] = 175 + 2*i
		}
		w := newClaimWorld(t, map[string]int{"A1": 60, "A2": 62, "B1": 25, "B2": 26, "C": 35}, between)
		d, err := w.search(t, &ClaimCheck{Floor: true})
		if err != nil || d.Node != "C" || d.RTT != 35*ms || len(d.Rejected) != 0 {
			t.Errorf("decision %+v, %v; want C at 35 ms, nobody rejected", d, err)
		}
	})
	t.Run("a detour within the factor is no lie", func(t *testing.T) {
		// H is 40 ms from the site; W, 60 ms from H, sees the site at
		// 180 ms through a detour (more than 60 + 40, less than
		// 2.5 × 100 + 20).
		w := newClaimWorld(t, map[string]int{"H": 40, "W": 180, "V": 175},
			map[[2]string]int{{"W", "H"}: 60, {"V", "H"}: 62, {"W", "V"}: 3})
		d, err := w.search(t, &ClaimCheck{})
		if err != nil || d.Node != "H" || len(d.Rejected) != 0 {
			t.Errorf("decision %+v, %v; want H", d, err)
		}
	})
	t.Run("a delayed ping is refuted from the site's side", func(t *testing.T) {
		// M claims 10 ms but every node measures it far: S1 and S2, at
		// the site, see it 300 ms away.
		w := newClaimWorld(t, map[string]int{"M": 10, "S1": 12, "S2": 14},
			map[[2]string]int{{"S1", "M"}: 300, {"S2", "M"}: 310, {"S1", "S2"}: 2})
		d, err := w.search(t, &ClaimCheck{})
		if err != nil {
			t.Fatal(err)
		}
		if d.Node != "S1" || len(d.Rejected) != 1 || d.Rejected[0].Node != "M" {
			t.Errorf("decision %+v; want S1 after rejecting M", d)
		}
		// N, next to M's true place, sees the site as far as S1 and S2
		// see M: the site is in one place, and M is rejected still.
		w = newClaimWorld(t, map[string]int{"M": 10, "S1": 12, "S2": 14, "N": 290},
			map[[2]string]int{{"S1", "M"}: 300, {"S2", "M"}: 310, {"S1", "S2"}: 2, {"N", "M"}: 5, {"N", "S1"}: 295, {"N", "S2"}: 296})
		d, err = w.search(t, &ClaimCheck{})
		if err != nil || (d.Node != "S1" && d.Node != "S2") || len(d.Rejected) != 1 || d.Rejected[0].Node != "M" {
			t.Errorf("decision %+v, %v; want S1 or S2 after rejecting M, a node near M seeing the site far", d, err)
		}
	})
	t.Run("a witness that answers better decides again", func(t *testing.T) {
		// B, asked as a witness, answers better than the claim: no
		// rejection, and the better answer wins.
		w := newClaimWorld(t, map[string]int{"A": 20, "B": 10},
			map[[2]string]int{{"A", "B"}: 15})
		w.tab = NewMemTable("A") // only A is searched at first...
		w.tab.AddNode("B")       // ...B only as a witness, near A
		d, err := w.search(t, &ClaimCheck{})
		if err != nil || d.Node != "B" || len(d.Rejected) != 0 {
			t.Errorf("decision %+v, %v; want B without rejections", d, err)
		}
	})
	t.Run("a suspect witness frames nobody", func(t *testing.T) {
		// F1 and F2 had claims rejected; they claim the site is 300 ms
		// from them, 5 ms from the honest H, who is at 20 ms.
		w := newClaimWorld(t, map[string]int{"H": 20, "F1": 300, "F2": 300},
			map[[2]string]int{{"F1", "H"}: 5, {"F2", "H"}: 5, {"F1", "F2"}: 1})
		tally := &ClaimTally{Strikes: 5}
		tally.record("F1", true)
		tally.record("F2", true)
		d, err := w.search(t, &ClaimCheck{Tally: tally})
		if err != nil || d.Node != "H" || len(d.Rejected) != 0 {
			t.Errorf("decision %+v, %v; want H: suspects are no witnesses", d, err)
		}
		if _, passed := tally.Counts("H"); passed != 1 {
			t.Errorf("H's claim passed %d times; want 1", passed)
		}
	})
	t.Run("witnesses that shorten their probes frame nobody the trusted cannot confirm", func(t *testing.T) {
		// H is honest, 10 ms from the site. F1 and F2 are 210 ms from
		// H and claim the site is 60 ms from them (it is 200): by the
		// second bound H is too far from them, 210 > 2.5 × (60 + 10) +
		// 20. C, the coordinator, is 100 ms from H and sees nothing
		// wrong. The paper's search asks C, F1, F2, then H, the first
		// under the threshold.
		world := func() *claimWorld {
			return newClaimWorld(t, map[string]int{"H": 10, "F1": 60, "F2": 60, "C": 105},
				map[[2]string]int{{"F1", "H"}: 210, {"F2", "H"}: 210, {"F1", "F2"}: 5, {"C", "H"}: 100, {"C", "F1"}: 150, {"C", "F2"}: 150})
		}
		d, err := world().search(t, &ClaimCheck{})
		if err != nil || len(d.Rejected) != 1 || d.Rejected[0].Node != "H" {
			t.Fatalf("decision %+v, %v: trusting every witness, F1 and F2 should have framed H", d, err)
		}
		d, err = world().search(t, &ClaimCheck{Trusted: func(n string) bool { return n == "C" }})
		if err != nil || d.Node != "H" || len(d.Rejected) != 0 {
			t.Errorf("decision %+v, %v; want H: only C is trusted, and C finds H's claim possible", d, err)
		}
		// A liar refuted by the second bound from the trusted C and one
		// other witness is rejected.
		w := newClaimWorld(t, map[string]int{"A": 1, "C": 12, "S": 14, "H": 30},
			map[[2]string]int{{"C", "A"}: 300, {"S", "A"}: 310, {"C", "S"}: 2, {"H", "A"}: 290, {"C", "H"}: 20, {"S", "H"}: 21})
		d, err = w.search(t, &ClaimCheck{Trusted: func(n string) bool { return n == "C" }})
		if err != nil || len(d.Rejected) != 1 || d.Rejected[0].Node != "A" || d.Node == "A" {
			t.Errorf("decision %+v, %v; want A rejected by C and another", d, err)
		}
	})
	t.Run("an address in several places is no lie", func(t *testing.T) {
		// An anycast address (or a CDN's): P1 and P2 are 60 and 62 ms
		// from its point of presence P, Q1 and Q2 5 and 6 ms from its
		// point Q, the two sides 300 ms apart. P1 and P2, asked first,
		// see Q1 too far for the site and its claim (300 > 2.5 × (60 +
		// 5) + 20); Q2, next to Q1, sees the site near: it is in two
		// places.
		between := map[[2]string]int{{"P1", "P2"}: 3, {"Q1", "Q2"}: 2}
		for _, p := range []string{"P1", "P2"} {
			for _, q := range []string{"Q1", "Q2"} {
				between[[2]string{p, q}] = 300
			}
		}
		w := newClaimWorld(t, map[string]int{"P1": 60, "P2": 62, "Q1": 5, "Q2": 6}, between)
		tally := &ClaimTally{}
		d, err := w.search(t, &ClaimCheck{Tally: tally})
		if err != nil || d.Node != "Q1" || d.RTT != 5*ms || len(d.Rejected) != 0 {
			t.Fatalf("decision %+v, %v; want Q1 at 5 ms, nobody rejected", d, err)
		}
		if tally.Rejected() != 0 || len(tally.BarredNodes()) != 0 {
			t.Errorf("tally: %d rejected, %v barred; want none", tally.Rejected(), tally.BarredNodes())
		}
		// The first bound still holds: L, asked first, claims 1 ms from
		// next to R1 and R2, which see the site 150 ms away.
		between[[2]string{"R1", "R2"}] = 3
		for _, n := range []string{"P1", "P2", "Q1", "Q2"} {
			for _, r := range []string{"R1", "R2", "L"} {
				between[[2]string{n, r}] = 200
			}
		}
		between[[2]string{"R1", "L"}] = 5
		between[[2]string{"R2", "L"}] = 6
		w = newClaimWorld(t, map[string]int{"P1": 60, "P2": 62, "Q1": 5, "Q2": 6, "R1": 150, "R2": 152, "L": 1}, between)
		d, err = w.search(t, &ClaimCheck{})
		if err != nil || d.Node != "Q1" || len(d.Rejected) != 1 || d.Rejected[0].Node != "L" || d.Rejected[0].Upper {
			t.Errorf("decision %+v, %v; want Q1 after L is refuted by the first bound", d, err)
		}
	})
	t.Run("witnesses near the claimant that see the site near clear it", func(t *testing.T) {
		// The anycast address again, with Q2 and Q3 10 and 12 ms from Q1
		// (30 and 32 ms from the site) and Q15 at a third point, 40 ms
		// from the site and 100 ms from P and Q, which nobody refutes.
		// Asked after Q1 is refuted, Q2 and Q3 see the site nearer Q1
		// than P1's bound allows: Q1 stands. Without them Q1's rejection
		// would stand and Q15, asked next, would win.
		between := map[[2]string]int{{"P1", "P2"}: 3, {"Q1", "Q2"}: 10, {"Q1", "Q3"}: 12, {"Q2", "Q3"}: 5}
		for _, p := range []string{"P1", "P2"} {
			for _, q := range []string{"Q1", "Q2", "Q3"} {
				between[[2]string{p, q}] = 300
			}
			between[[2]string{p, "Q15"}] = 100
		}
		for _, q := range []string{"Q1", "Q2", "Q3"} {
			between[[2]string{q, "Q15"}] = 100
		}
		w := newClaimWorld(t, map[string]int{"P1": 60, "P2": 62, "Q1": 5, "Q15": 40, "Q2": 30, "Q3": 32}, between)
		tally := &ClaimTally{}
		d, err := w.search(t, &ClaimCheck{Tally: tally})
		if err != nil || d.Node != "Q1" || len(d.Rejected) != 0 {
			t.Fatalf("decision %+v, %v; want Q1, nobody rejected", d, err)
		}
		if tally.Rejected() != 0 {
			t.Errorf("tally: %d rejected; want none", tally.Rejected())
		}
	})
	t.Run("too many rejections fail the search", func(t *testing.T) {
		rtt := map[string]int{"W1": 140, "W2": 150}
		between := map[[2]string]int{{"W1", "W2"}: 6}
		for _, l := range []string{"L1", "L2", "L3", "L4", "L5"} {
			rtt[l] = 1
			between[[2]string{"W1", l}] = 5
			between[[2]string{"W2", l}] = 5
		}
		d, err := newClaimWorld(t, rtt, between).search(t, &ClaimCheck{})
		if !errors.Is(err, ErrNoNodes) || len(d.Rejected) != MaxRejections {
			t.Errorf("decision %+v, %v; want ErrNoNodes after %d rejections", d, err, MaxRejections)
		}
	})
}

func TestClaimTallyBounded(t *testing.T) {
	tally := &ClaimTally{MaxNodes: 8, Strikes: 2}
	tally.record("liar", true)
	tally.record("liar", true)
	for i := range 100 {
		tally.record(string(rune('a'+i%26))+string(rune('a'+i/26)), false)
	}
	tally.mu.Lock()
	n := len(tally.nodes)
	tally.mu.Unlock()
	if n > 8 {
		t.Errorf("%d nodes kept; want at most 8", n)
	}
	if !tally.Barred("liar") || tally.Rejected() != 2 {
		t.Errorf("the liar was forgotten before honest nodes: barred %v, %d rejected", tally.Barred("liar"), tally.Rejected())
	}
}
