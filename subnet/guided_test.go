package subnet

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"
)

func msDur(v int) time.Duration { return time.Duration(v) * time.Millisecond }

// storeProfile stores one subnet's probes, in ms per node.
func storeProfile(t *testing.T, c *MemProbeCache, r string, rtt map[string]int) {
	t.Helper()
	for n, v := range rtt {
		c.Put(n, mustRange(t, r), msDur(v))
	}
}

func TestGuidedShiftedNeighbours(t *testing.T) {
	// S (10.4.1.0/24) sits where its neighbours do; the neighbours' probes
	// are stored. Nobody is under the threshold, so the search must prune
	// everybody else to stop.
	tr := rpslTree(t, "10.0.0.0 - 10.255.255.255", "10.4.0.0 - 10.4.255.255", "10.4.1.0 - 10.4.1.255")
	place := map[string]int{"a": 144, "b": 148, "c": 260, "d": 300}
	for _, tc := range []struct {
		name       string
		neighbours int // profiles stored at S's place
		answers    map[string]int
		asked      []string
	}{
		// The old search kept asking b: its prediction less a tenth was
		// not clear of the best by the tolerance. b cannot beat a by more
		// than the tolerance, so it is not asked.
		{"a near tie is not asked", 2, place, []string{"a"}},
		// S's access link is 12 ms slower than its neighbours': every
		// answer is shifted, which the fit absorbs.
		{"a constant shift is a different access delay", 2, map[string]int{"a": 156, "b": 160, "c": 272, "d": 312}, []string{"a"}},
		// One neighbour alone cannot tell S's place from a chance fit
		// (the prior of an unseen place is as large): a second answer
		// must confirm it.
		{"one neighbour needs a second answer", 1, place, []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := &MemProbeCache{}
			for i := range tc.neighbours {
				storeProfile(t, cache, []string{"10.4.2.0/24", "10.4.3.0/24"}[i], place)
			}
			p := &fakeProber{rtt: tc.answers}
			m := &IPMicra{Tree: tr, Table: NewMemTable("d", "c", "b", "a"), Prober: p, Cache: cache,
				Config: SearchConfig{Guided: true, Threshold: 50 * time.Millisecond}}
			d, err := m.Delegate(context.Background(), mustAddr(t, "10.4.1.1"))
			if err != nil || d.Node != "a" || !slices.Equal(p.asked, tc.asked) {
				t.Errorf("node %s asked %v err %v; want a after %v", d.Node, p.asked, err, tc.asked)
			}
		})
	}
}

func TestGuidedWidensNeighbourhood(t *testing.T) {
	// S's sibling is at place B; two subnets higher up are at place A,
	// where S is. The first answer (from the node nearest B) rules B out;
	// the search then takes the profiles further up and asks the node they
	// predict, not the paper's next.
	for _, tc := range []struct {
		name   string
		ranges []string
	}{
		{"one level up", []string{"10.0.0.0 - 10.255.255.255", "10.4.0.0 - 10.4.255.255", "10.4.1.0 - 10.4.1.255"}},
		// A level between, where nothing but S itself has stored probes
		// once c has answered. Those are answers, not a neighbour: taken
		// for a profile, S fitted itself, the search trusted it, stopped
		// widening there and went on in the paper's order (b, then a).
		{"past a level of S's own probes", []string{"10.0.0.0 - 10.255.255.255", "10.4.0.0 - 10.7.255.255", "10.4.0.0 - 10.4.255.255", "10.4.1.0 - 10.4.1.255"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := rpslTree(t, tc.ranges...)
			placeA := map[string]int{"a": 20, "b": 80, "c": 150}
			placeB := map[string]int{"a": 150, "b": 90, "c": 20}
			cache := &MemProbeCache{}
			storeProfile(t, cache, "10.4.2.0/24", placeB)
			storeProfile(t, cache, "10.1.0.0/16", placeA)
			storeProfile(t, cache, "10.2.0.0/16", placeA)
			p := &fakeProber{rtt: placeA}
			m := &IPMicra{Tree: tr, Table: NewMemTable("c", "b", "a"), Prober: p, Cache: cache, Config: SearchConfig{Guided: true}}
			d, err := m.Delegate(context.Background(), mustAddr(t, "10.4.1.1"))
			if err != nil || d.Node != "a" || !slices.Equal(p.asked, []string{"c", "a"}) {
				t.Errorf("node %s asked %v err %v; want a after c, a", d.Node, p.asked, err)
			}
		})
	}
}

func TestGuidedMeasurementOverTriangle(t *testing.T) {
	// Two neighbours put x far (100 ms), a third, at another place, puts it
	// near (10 ms); all see y at 40 ms, so y is asked first and its answer
	// fits both places. The triangle inequality, from y's answer and an
	// RTT of 200 ms between x and y (a detour: real RTTs violate it), puts
	// x at 160 ms or more; the third neighbour's stored probe, a
	// measurement, gives x a chance, and x is asked: it is the nearest.
	tr := rpslTree(t, "10.0.0.0 - 10.255.255.255", "10.4.0.0 - 10.4.255.255", "10.4.1.0 - 10.4.1.255")
	cache := &MemProbeCache{}
	storeProfile(t, cache, "10.4.2.0/24", map[string]int{"x": 100, "y": 40})
	storeProfile(t, cache, "10.4.3.0/24", map[string]int{"x": 100, "y": 41})
	storeProfile(t, cache, "10.4.4.0/24", map[string]int{"x": 10, "y": 40})
	between := func(a, b string) (time.Duration, bool) {
		if a != b {
			return msDur(200), true
		}
		return 0, true
	}
	p := &fakeProber{rtt: map[string]int{"x": 10, "y": 40}}
	m := &IPMicra{Tree: tr, Table: NewMemTable("y", "x"), Prober: p, Cache: cache,
		Config: SearchConfig{Guided: true, Between: between}}
	d, err := m.Delegate(context.Background(), mustAddr(t, "10.4.1.1"))
	if err != nil || d.Node != "x" || !slices.Equal(p.asked, []string{"y", "x"}) {
		t.Errorf("node %s asked %v err %v; want x after y, x", d.Node, p.asked, err)
	}
}

func TestGuidedBestUnderThresholdWins(t *testing.T) {
	// x, predicted nearest, answers under the threshold; but one neighbour
	// in three puts y clearly nearer, a chance above 1 − confidence, so y
	// is asked too. It answers worse than x, and x must still win.
	tr := rpslTree(t, "10.0.0.0 - 10.255.255.255", "10.4.0.0 - 10.4.255.255", "10.4.1.0 - 10.4.1.255")
	cache := &MemProbeCache{}
	storeProfile(t, cache, "10.4.2.0/24", map[string]int{"x": 30, "y": 10})
	storeProfile(t, cache, "10.4.3.0/24", map[string]int{"x": 30, "y": 60})
	storeProfile(t, cache, "10.4.4.0/24", map[string]int{"x": 30, "y": 60})
	p := &fakeProber{rtt: map[string]int{"x": 30, "y": 45}}
	m := &IPMicra{Tree: tr, Table: NewMemTable("y", "x"), Prober: p, Cache: cache, Config: SearchConfig{Guided: true}}
	d, err := m.Delegate(context.Background(), mustAddr(t, "10.4.1.1"))
	if err != nil || d.Node != "x" || d.RTT != msDur(30) || !slices.Equal(p.asked, []string{"x", "y"}) {
		t.Errorf("decision %+v asked %v err %v; want x at 30 ms after x, y", d, p.asked, err)
	}
}

func TestChanceOf(t *testing.T) {
	between := func(a, b string) (time.Duration, bool) {
		d := map[[2]string]int{{"a", "near"}: 10, {"a", "far"}: 300}[[2]string{min(a, b), max(a, b)}]
		return msDur(d), d > 0
	}
	for _, tc := range []struct {
		name    string
		node    string
		prev    []string
		between func(a, b string) (time.Duration, bool)
		want    float64
	}{
		{"first answer", "near", nil, between, chanceFit},
		{"no inter-node RTTs", "near", []string{"a"}, nil, chanceFit},
		{"unknown pair", "other", []string{"a"}, between, chanceFit},
		{"far from the earlier node: independent", "far", []string{"a"}, between, chanceFit},
		{"close to the earlier node: no evidence", "near", []string{"a"}, between, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := chanceOf(Probe{Node: tc.node, RTT: msDur(100)}, tc.prev, 0.1, tc.between)
			if got != tc.want {
				t.Errorf("chanceOf = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestProfileFit(t *testing.T) {
	p := &profile{rtt: map[string]time.Duration{"a": msDur(100), "b": msDur(200), "c": msDur(50)}, prior: 0.5}
	for _, tc := range []struct {
		name                 string
		answers              map[string]int
		shift                time.Duration
		plausible, confirmed bool
	}{
		{"exact, one answer", map[string]int{"a": 100}, 0, true, false},
		{"exact, two independent answers", map[string]int{"a": 100, "b": 200}, 0, true, true},
		{"shifted by an access delay", map[string]int{"a": 108, "b": 208}, msDur(8), true, true},
		{"shift too large: another place", map[string]int{"a": 160, "b": 260}, msDur(60), false, false},
		{"shape differs: another place", map[string]int{"a": 100, "b": 120}, -msDur(40), false, false},
		{"nothing matched", map[string]int{"z": 5}, 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var answers []Probe
			for _, n := range []string{"a", "b", "c", "z"} {
				if v, ok := tc.answers[n]; ok {
					answers = append(answers, Probe{Node: n, RTT: msDur(v)})
				}
			}
			p.fit(answers, 0.1, nil)
			// Confirmed: the only plausible place, it rules a candidate out.
			confirmed := p.plausible && prunable([]evidence{{prior: p.prior, like: 1, chance: p.chance, low: msDur(1)}}, 1-p.prior, 0) >= 0
			if p.shift != tc.shift || p.plausible != tc.plausible || confirmed != tc.confirmed {
				t.Errorf("shift %v plausible %v confirmed %v; want %v %v %v", p.shift, p.plausible, confirmed, tc.shift, tc.plausible, tc.confirmed)
			}
		})
	}
}

func TestWeigh(t *testing.T) {
	at := func(w float64, nodes ...string) *profile {
		p := &profile{rtt: map[string]time.Duration{}, weight: w}
		for _, n := range nodes {
			p.rtt[n] = msDur(20)
		}
		return p
	}
	// Profiles that know two nodes or more count with their weights, plus
	// one count for an unseen place; one that knows a single node is left
	// out of the total but gets its share of it.
	ps := []*profile{at(1, "a", "b"), at(1, "a", "c"), at(2, "b", "c"), at(4, "a")}
	weigh(ps)
	for i, want := range []float64{0.2, 0.2, 0.4, 0.8} {
		if math.Abs(ps[i].prior-want) > 1e-9 {
			t.Errorf("profile %d: prior %v, want %v", i, ps[i].prior, want)
		}
	}
}

func TestPrunable(t *testing.T) {
	// A candidate is ruled out at 100 ms when the profiles that say so hold
	// S with probability 0.95 or more.
	const target = 100 * time.Millisecond
	ev := func(prior, like, chance float64, low int) evidence {
		return evidence{prior: prior, like: like, chance: chance, low: msDur(low)}
	}
	for _, tc := range []struct {
		name string
		ev   []evidence
		open float64 // the prior no answer bears on
		want time.Duration
	}{
		{"the only plausible profile, well evidenced", []evidence{ev(0.5, 1, 0.01, 150)}, 0.5, msDur(150)},
		{"the only plausible profile, one answer", []evidence{ev(0.5, 1, 0.1, 150)}, 0.5, -1},
		{"it gives the candidate a chance", []evidence{ev(0.5, 1, 0.01, 90)}, 0.5, -1},
		// The Orlando case of README: after its neighbours' place was
		// refuted, S fitted the profiles of a rarer place (prior 0.1) on
		// five answers from nodes that see both places alike; a place that
		// fits as well and puts the candidate near keeps it.
		{"a competing place fits as well", []evidence{ev(0.1, 1, 0.005, 280), ev(0.02, 1, 0.3, 80)}, 0.88, -1},
		// The Sydney case: a profile that gives the candidate a chance but
		// fits the answers badly explains them little.
		{"a competing profile fits badly", []evidence{ev(0.7, 1, 0.03, 272), ev(0.08, 0.005, 0.03, 90)}, 0.22, msDur(272)},
		// A plausible profile that knows nothing of the candidate is
		// neither for nor against it.
		{"a plausible profile knows nothing of it", []evidence{ev(0.1, 1, 0.005, 280), {prior: 0.5, low: -1}}, 0.4, msDur(280)},
		{"without it the rarer place prunes", []evidence{ev(0.1, 1, 0.005, 280)}, 0.9, msDur(280)},
		{"two profiles agree", []evidence{ev(0.45, 1, 0.1, 150), ev(0.45, 1, 0.1, 130)}, 0.1, msDur(130)},
		// Los Angeles: one answer confirms a rare place of the country's
		// profiles; the others' places, refuted, hold no prior, so it
		// prunes; were they unseen places instead, it could not.
		{"the rest refuted", []evidence{ev(0.1, 1, 0.1, 280)}, 0.01, msDur(280)},
		{"the rest unseen", []evidence{ev(0.1, 1, 0.1, 280)}, 0.9, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := prunable(tc.ev, tc.open, target); got != tc.want {
				t.Errorf("prunable = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestGuidedAsksUnknownNodes(t *testing.T) {
	// A cold start: no stored probes but one neighbour's, which knows a
	// only (the node asked for it). a answers under the threshold; b, which
	// no profile knows, is 35 ms from a, so the triangle inequality leaves
	// it room to be 5 ms from S: it is asked, and wins. c, 200 ms from a,
	// cannot beat a and is not asked. Without Between nothing bounds b and
	// the paper's first answer under the threshold wins.
	tr := rpslTree(t, "10.0.0.0 - 10.255.255.255", "10.4.0.0 - 10.4.255.255", "10.4.1.0 - 10.4.1.255")
	d := map[[2]string]int{{"a", "b"}: 35, {"a", "c"}: 200, {"b", "c"}: 200}
	between := func(x, y string) (time.Duration, bool) {
		if x == y {
			return 0, true
		}
		return msDur(d[[2]string{min(x, y), max(x, y)}]), true
	}
	for _, tc := range []struct {
		name    string
		between func(a, b string) (time.Duration, bool)
		want    string
		asked   []string
	}{
		{"bounded by the triangle inequality", between, "b", []string{"a", "b"}},
		{"no inter-node RTTs", nil, "a", []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := &MemProbeCache{}
			storeProfile(t, cache, "10.4.2.0/24", map[string]int{"a": 40})
			p := &fakeProber{rtt: map[string]int{"a": 40, "b": 10, "c": 190}}
			m := &IPMicra{Tree: tr, Table: NewMemTable("a", "b", "c"), Prober: p, Cache: cache,
				Config: SearchConfig{Guided: true, Between: tc.between}}
			dec, err := m.Delegate(context.Background(), mustAddr(t, "10.4.1.1"))
			if err != nil || dec.Node != tc.want || !slices.Equal(p.asked, tc.asked) {
				t.Errorf("node %s asked %v err %v; want %s after %v", dec.Node, p.asked, err, tc.want, tc.asked)
			}
		})
	}
}

func TestGuidedHomes(t *testing.T) {
	// Nothing is stored yet, but b's own subnet lies in S's allocation:
	// its home's profile (b at nothing, everybody else at their RTT to b)
	// puts b nearest, so b is asked first and, nobody else having room to
	// beat it, alone. Without homes the paper's order asks a first.
	tr := rpslTree(t, "10.0.0.0 - 10.255.255.255", "10.4.0.0 - 10.4.255.255", "10.4.1.0 - 10.4.1.255", "10.4.9.0 - 10.4.9.255")
	d := map[[2]string]int{{"a", "b"}: 60, {"a", "c"}: 200, {"b", "c"}: 180}
	between := func(x, y string) (time.Duration, bool) {
		if x == y {
			return 0, true
		}
		return msDur(d[[2]string{min(x, y), max(x, y)}]), true
	}
	home := func(n string) (Range, bool) {
		if n == "b" {
			return mustRange(t, "10.4.9.0/24"), true
		}
		return Range{}, false
	}
	for _, tc := range []struct {
		name  string
		home  func(string) (Range, bool)
		asked []string
	}{
		{"home in the allocation", home, []string{"b"}},
		{"no homes", nil, []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &fakeProber{rtt: map[string]int{"a": 45, "b": 8, "c": 185}}
			m := &IPMicra{Tree: tr, Table: NewMemTable("a", "b", "c"), Prober: p, Cache: &MemProbeCache{},
				Config: SearchConfig{Guided: true, Between: between, Home: tc.home}}
			dec, err := m.Delegate(context.Background(), mustAddr(t, "10.4.1.1"))
			if err != nil || dec.Node != "b" || !slices.Equal(p.asked, tc.asked) {
				t.Errorf("node %s asked %v err %v; want b after %v", dec.Node, p.asked, err, tc.asked)
			}
		})
	}
}

func TestGuidedLatencyMap(t *testing.T) {
	// A cold start: nothing is stored, no node's home is near. The map
	// knows three places (two in Germany, one in the US) and what each
	// node would measure there. S is registered in one country and sits
	// at one of its places with a 5 ms access link the map does not know.
	// The map's places of S's country outweigh the others, so a node
	// nearest one of them is asked first (b). At Munich its answer fits
	// Munich alone (Berlin would need a 25 ms shift, which means another
	// place), and nobody else can beat it; at Berlin it fits both German
	// places, and a, nearest Berlin, is asked. In the US the other
	// country's place is d's. Without the map the paper's order asks d,
	// c, then b, which is under the threshold.
	places := []MapPlace{
		{Name: "Berlin", Country: "DE", RTT: map[string]time.Duration{"a": msDur(10), "b": msDur(40), "c": msDur(60), "d": msDur(150)}},
		{Name: "Munich", Country: "DE", RTT: map[string]time.Duration{"a": msDur(40), "b": msDur(10), "c": msDur(50), "d": msDur(150)}},
		{Name: "New York", Country: "US", RTT: map[string]time.Duration{"a": msDur(150), "b": msDur(150), "c": msDur(160), "d": msDur(10)}},
	}
	access := msDur(5)
	for _, tc := range []struct {
		name    string
		country string
		at      int // S's place
		places  []MapPlace
		want    string
		asked   []string
	}{
		{"Munich", "DE", 1, places, "b", []string{"b"}},
		{"Berlin", "DE", 0, places, "a", []string{"b", "a"}},
		{"New York", "US", 2, places, "d", []string{"d"}},
		{"no map", "DE", 1, nil, "b", []string{"d", "c", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, _ := build(t, "inetnum: 10.0.0.0 - 10.255.255.255\nnetname: BLOCK\ncountry: "+tc.country+"\nsource: RIPE\n\n"+
				"inetnum: 10.4.1.0 - 10.4.1.255\nnetname: S\ncountry: "+tc.country+"\nsource: RIPE\n")
			rtt := map[string]int{}
			for n, d := range places[tc.at].RTT {
				rtt[n] = int((d + access) / time.Millisecond)
			}
			p := &fakeProber{rtt: rtt}
			m := &IPMicra{Tree: tr, Table: NewMemTable("d", "c", "b", "a"), Prober: p, Cache: &MemProbeCache{},
				Config: SearchConfig{Guided: true, Threshold: 50 * time.Millisecond, Places: tc.places}}
			dec, err := m.Delegate(context.Background(), mustAddr(t, "10.4.1.1"))
			if err != nil || dec.Node != tc.want || !slices.Equal(p.asked, tc.asked) {
				t.Errorf("node %s asked %v err %v; want %s after %v", dec.Node, p.asked, err, tc.want, tc.asked)
			}
		})
	}
}
