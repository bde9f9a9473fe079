package world

import (
	"testing"
	"time"
)

// matrix is a hand-made LocRTTer: RTTs in ms between location ids.
type matrix struct {
	locs []Location
	rtt  map[[2]int]float64
}

func (m matrix) Locations() []Location { return m.locs }

func (m matrix) LocRTT(a, b Location) (time.Duration, bool) {
	if a.ID == b.ID {
		return msDur(2), true
	}
	v, ok := m.rtt[[2]int{min(a.ID, b.ID), max(a.ID, b.ID)}]
	return msDur(v), ok
}

func TestLatencyMap(t *testing.T) {
	m := matrix{
		locs: []Location{{ID: 1, City: "Berlin", Country: "DE"}, {ID: 2, City: "Munich", Country: "DE"}, {ID: 3, City: "New York", Country: "US"}},
		rtt:  map[[2]int]float64{{1, 2}: 12, {1, 3}: 90, {2, 3}: 100},
	}
	at := []Location{m.locs[0], m.locs[0], m.locs[1], m.locs[2]} // two nodes share Berlin
	nodes := []string{"a", "b", "c", "d"}
	access := map[string]float64{"a": 1, "b": 7, "c": 3.5, "d": 10}
	measured := func(x, y string) (time.Duration, bool) {
		i, j := index(nodes, x), index(nodes, y)
		d, _ := m.LocRTT(at[i], at[j])
		return d + msDur(access[x]+access[y]), true
	}
	places := LatencyMap(m, nodes, at, measured)
	if len(places) != 3 || places[1].Name != "Munich, DE" || places[1].Country != "DE" {
		t.Fatalf("places %+v; want Berlin, Munich, New York", places)
	}
	// Every place's RTT from a node is the matrix's plus the node's own
	// access delay, which the RTTs between the nodes give exactly.
	for _, p := range places {
		l := m.locs[index([]string{"Berlin, DE", "Munich, DE", "New York, US"}, p.Name)]
		for i, n := range nodes {
			d, _ := m.LocRTT(at[i], l)
			want := d + msDur(access[n])
			if got := p.RTT[n]; absDur(got-want) > time.Microsecond {
				t.Errorf("%s from %s: %v, want %v", p.Name, n, got, want)
			}
		}
	}

	// A pair unmeasured: the access delays cannot be solved for, and
	// count as nothing.
	partial := func(x, y string) (time.Duration, bool) {
		if x == "a" && y == "d" || x == "d" && y == "a" {
			return 0, false
		}
		return measured(x, y)
	}
	places = LatencyMap(m, nodes, at, partial)
	if got, want := places[2].RTT["c"], msDur(100); got != want {
		t.Errorf("New York from c without every pair: %v, want the matrix's %v", got, want)
	}
	// A node at a location the data does not hold is unknown to the map.
	none := func(x, y string) (time.Duration, bool) { return 0, false }
	places = LatencyMap(m, []string{"a", "x"}, []Location{m.locs[0], {ID: 99}}, none)
	if _, ok := places[0].RTT["x"]; ok || len(places[0].RTT) != 1 {
		t.Errorf("Berlin knows %v; want a only", places[0].RTT)
	}
}

func index(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

func absDur(d time.Duration) time.Duration { return max(d, -d) }
