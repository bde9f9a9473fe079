package subnet

import (
	"fmt"
	"testing"
	"time"
)

// A star of nodes around a backbone: node i sits at position pos[i] on a
// line and reaches it through its access delay acc[i], so the RTT between
// two nodes is their distance plus both access delays (a tree metric).
func lineMetric(pos, acc []time.Duration) ([]string, func(a, b string) (time.Duration, bool)) {
	names := make([]string, len(pos))
	idx := map[string]int{}
	for i := range pos {
		names[i] = fmt.Sprintf("n%02d", i)
		idx[names[i]] = i
	}
	return names, func(a, b string) (time.Duration, bool) {
		i, ok1 := idx[a]
		j, ok2 := idx[b]
		if !ok1 || !ok2 || i == j {
			return 0, false
		}
		d := pos[i] - pos[j]
		if d < 0 {
			d = -d
		}
		return d + acc[i] + acc[j], true
	}
}

func TestNodeMapTreeMetric(t *testing.T) {
	ms := time.Millisecond
	pos := []time.Duration{0, 5 * ms, 11 * ms, 20 * ms, 32 * ms, 47 * ms, 60 * ms, 80 * ms}
	acc := []time.Duration{1 * ms, 7 * ms, 3 * ms, 2 * ms, 9 * ms, 4 * ms, 1 * ms, 6 * ms}
	names, between := lineMetric(pos, acc)
	places := NodeMap(names, between, func(n string) string { return "C" + n[2:] })
	if len(places) != len(names) {
		t.Fatalf("%d places for %d nodes", len(places), len(names))
	}
	for i, p := range places {
		n := names[i]
		if p.Country != "C"+n[2:] {
			t.Errorf("%s: country %q", n, p.Country)
		}
		for j, m := range names {
			if j == i {
				continue
			}
			if d, _ := between(n, m); p.RTT[m] != d {
				t.Errorf("place near %s: %s at %v, measured %v", n, m, p.RTT[m], d)
			}
		}
		// Every node but the two ends has nodes on both sides, so the
		// triangle finds its access delay exactly; an end's estimate is
		// above it, bounded by its nearest node's RTT.
		own := p.RTT[n]
		switch {
		case i > 0 && i < len(names)-1 && own != 2*acc[i]:
			t.Errorf("place near %s: its own RTT %v, want twice its access delay %v", n, own, 2*acc[i])
		case own < 2*acc[i]:
			t.Errorf("place near %s: its own RTT %v below twice its access delay %v", n, own, 2*acc[i])
		}
	}
}

func TestNodeMapLeavesOutUnmeasuredNodes(t *testing.T) {
	between := func(a, b string) (time.Duration, bool) {
		if a == "lone" || b == "lone" {
			return 0, false
		}
		return 30 * time.Millisecond, true
	}
	places := NodeMap([]string{"a", "b", "lone", "c"}, between, nil)
	if len(places) != 3 {
		t.Fatalf("%d places, want 3 (the node nobody measured is none)", len(places))
	}
	for _, p := range places {
		if _, ok := p.RTT["lone"]; ok {
			t.Errorf("%s names the unmeasured node", p.Name)
		}
		if p.Country != "" {
			t.Errorf("%s: country %q without a country function", p.Name, p.Country)
		}
		// Equal RTTs: the tip is half of 30+30-30, 15 ms each way.
		for n, d := range p.RTT {
			if "near "+n == p.Name && d != 30*time.Millisecond {
				t.Errorf("%s: own RTT %v, want 30ms", p.Name, d)
			}
		}
	}
}

func TestNearestRTT(t *testing.T) {
	ms := time.Millisecond
	// Neighbours' RTTs: n0–n1 6, n1–n2 12 (n2's nearest is n1), n2–n3 14,
	// n3–n4 20: nearest 6, 6, 12, 14, 20, median 12.
	pos := []time.Duration{0, 4 * ms, 14 * ms, 26 * ms, 44 * ms}
	acc := []time.Duration{1 * ms, 1 * ms, 1 * ms, 1 * ms, 1 * ms}
	names, between := lineMetric(pos, acc)
	if got := NearestRTT(names, between); got != 12*ms {
		t.Errorf("NearestRTT = %v, want 12ms", got)
	}
	if got := NearestRTT(names[:1], between); got != 0 {
		t.Errorf("one node: %v, want 0", got)
	}
	// Nine nodes 10 ms apart on a line; only the pairs with n0, n1 or n2
	// are measured. The others' nearest measured node is one of those
	// three, 10 to 60 ms away (median over all nine 20 ms); they cover
	// fewer than half the others and are left out: the median is the
	// three's 10 ms.
	pos = nil
	acc = nil
	for i := range 9 {
		pos, acc = append(pos, time.Duration(10*i)*ms), append(acc, 0)
	}
	names, between = lineMetric(pos, acc)
	known := map[string]bool{names[0]: true, names[1]: true, names[2]: true}
	sparse := func(a, b string) (time.Duration, bool) {
		if !known[a] && !known[b] {
			return 0, false
		}
		return between(a, b)
	}
	if got := NearestRTT(names, sparse); got != 10*ms {
		t.Errorf("sparse pairs: NearestRTT = %v, want 10ms from the well-covered nodes", got)
	}
}

func TestDensityTolerance(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		tol, nearest, want time.Duration
	}{
		{0, 0, 10 * ms},        // a fifth of the threshold
		{0, 40 * ms, 5 * ms},   // an eighth of the nearest
		{0, 8 * ms, 2 * ms},    // never below MinTolerance
		{0, 200 * ms, 10 * ms}, // nor above a fifth of the threshold
		{3 * ms, 40 * ms, 3 * ms},
		{-1, 40 * ms, 0},
	} {
		got := SearchConfig{Threshold: 50 * ms, Tolerance: c.tol, Nearest: c.nearest}.EffectiveTolerance()
		if got != c.want {
			t.Errorf("tolerance %v, nearest %v: %v, want %v", c.tol, c.nearest, got, c.want)
		}
	}
}
