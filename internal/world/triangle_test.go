package world

import "testing"

// TestTriangleOnRealRTTs bounds what the real RTT matrix says about the
// claim check's bounds (subnet.ClaimCheck, RELIABILITY.md §10): how often
// real routes break the triangle inequality y ≤ z + x (y = rtt(W, s), z =
// rtt(W, A), x = rtt(A, s) over every triple of distinct locations), and
// how often by the check's factor and slack (2.5 and 20 ms, its
// defaults; 2 for comparison). And why a node that halves its RTTs cannot
// be told from an honest one: of triples whose W and S are within 2 ms of
// each other (near enough that a witness at W should see what a node at S
// sees), how often one sees A at no more than half the other's RTT, 20 ms
// or more apart.
func TestTriangleOnRealRTTs(t *testing.T) {
	d, _ := realLatency(t)
	n := d.n()
	var triples, broken, beyond2, beyond25 int
	var near, halved int
	for w := range n {
		for s := range n {
			if s == w {
				continue
			}
			y := d.at(w, s)
			for a := range n {
				if a == w || a == s {
					continue
				}
				z, x := d.at(w, a), d.at(a, s)
				triples++
				if y > z+x {
					broken++
				}
				if y > 2*(z+x)+20 {
					beyond2++
				}
				if y > 2.5*(z+x)+20 {
					beyond25++
				}
				if y <= 2 && w < s {
					near++
					lo, hi := min(z, x), max(z, x)
					if lo <= hi/2 && hi-lo >= 20 {
						halved++
					}
				}
			}
		}
	}
	t.Logf("%d locations, %d triples: %.1f %% break the triangle inequality; y > 2(z + x) + 20 ms: %d (1 in %d); "+
		"y > 2.5(z + x) + 20 ms: %d (1 in %d); of %d with W and S within 2 ms, one at most half the other's RTT to A, 20+ ms apart: %d (%.2f %%)",
		n, triples, 100*float64(broken)/float64(triples), beyond2, triples/max(beyond2, 1), beyond25, triples/max(beyond25, 1),
		near, halved, 100*float64(halved)/float64(max(near, 1)))
	switch {
	case triples < 10_000_000:
		t.Fatalf("%d triples from %d locations", triples, n)
	case broken*100 < triples*3 || broken*100 > triples*6:
		t.Errorf("%d of %d triples break the inequality, want 3 to 6 %% (RELIABILITY.md says 4.6)", broken, triples)
	case beyond25*40_000 > triples || beyond25 == 0:
		t.Errorf("%d triples beyond the factor 2.5, want at most 1 in 40,000 (RELIABILITY.md says 1 in 54,000)", beyond25)
	case beyond2*8_000 > triples || beyond2 <= beyond25:
		t.Errorf("%d triples beyond the factor 2, want at most 1 in 8,000 and more than at 2.5 (RELIABILITY.md says 1 in 11,000)", beyond2)
	case near < 3_000 || halved*200 < near:
		// A halved claim is within what honest routes show: asserted at
		// least 1 in 200 near triples (RELIABILITY.md says 0.7 %).
		t.Errorf("%d of %d near triples with one RTT at most half the other, want at least 1 in 200", halved, near)
	}
}
