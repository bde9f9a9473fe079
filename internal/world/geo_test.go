package world

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/micra-net/micra/subnet"
)

// geoTree builds a hierarchy with one /16 allocation per country of the
// latency data (10.x.0.0/16 onwards, in location order) and returns it with
// each country's range.
func geoTree(t *testing.T) (*subnet.Tree, map[string]subnet.Range) {
	t.Helper()
	locs, err := LoadLocations("", "")
	if err != nil {
		t.Fatal(err)
	}
	byReg := map[string][]string{}
	ranges := map[string]subnet.Range{}
	next := 0
	for _, l := range locs {
		if _, ok := ranges[l.Country]; ok {
			continue
		}
		start := netip.AddrFrom4([4]byte{byte(10 + next/256), byte(next % 256), 0, 0})
		next++
		ranges[l.Country] = subnet.RangeOf(netip.PrefixFrom(start, 16))
		byReg[l.Registry] = append(byReg[l.Registry], fmt.Sprintf("%s|%s|ipv4|%s|65536|20200101|allocated", l.Registry, l.Country, start))
	}
	b, err := subnet.NewBuilder(subnet.Strict())
	if err != nil {
		t.Fatal(err)
	}
	for reg, rows := range byReg {
		in := fmt.Sprintf("2|%s|20200101|%d|19830101|20200101|+0000\n%s\n", reg, len(rows), strings.Join(rows, "\n"))
		if _, err := b.Add(context.Background(), reg, strings.NewReader(in), subnet.FormatAuto); err != nil {
			t.Fatal(err)
		}
	}
	tree, _, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return tree, ranges
}

func locByCity(t *testing.T, locs []Location, city string) Location {
	t.Helper()
	for _, l := range locs {
		if l.City == city {
			return l
		}
	}
	t.Fatalf("no location %q", city)
	return Location{}
}

func TestGeoPlacementAndRTT(t *testing.T) {
	tree, ranges := geoTree(t)
	locs, _ := LoadLocations("", "")
	fra := locByCity(t, locs, "Frankfurt")
	de := ranges["DE"]
	in := func(i int) netip.Addr { // the i-th address of the DE range
		a := de.Start
		for range i {
			a = a.Next()
		}
		return a
	}
	// 0.9 degrees of latitude north of Frankfurt is 100.1 km.
	sites := []GeoSite{
		{Addr: in(10), Lat: fra.Lat, Lon: fra.Lon, Country: "DE", City: "Frankfurt am Main"},
		{Addr: in(11), Lat: fra.Lat + 0.9, Lon: fra.Lon, Country: "DE", City: "Giessen-ish"},
		{Addr: in(10), Lat: 0, Lon: 0},                                         // repeated address: dropped
		{Addr: netip.MustParseAddr("203.0.113.9"), Lat: fra.Lat, Lon: fra.Lon}, // in no range: dropped
	}
	g, err := NewGeo(context.Background(), sites, tree, GeoParams{Seed: 7, Nodes: len(locs)})
	if err != nil {
		t.Fatal(err)
	}
	if got := g.Dropped(); got != 2 || len(g.Sites()) != 2 {
		t.Fatalf("dropped %d, kept %d sites; want 2 and 2", got, len(g.Sites()))
	}
	s0, s1 := g.Sites()[0], g.Sites()[1]
	if s0.Loc.ID != fra.ID || s0.Place.KmToLoc > 1e-6 || s0.Subnet != de || s0.Kind != RealHosted {
		t.Errorf("site at Frankfurt: %+v", s0)
	}
	if math.Abs(s1.Place.KmToLoc-100.1) > 0.5 {
		t.Errorf("site 0.9° north of %s is %.1f km from %s, want 100.1", fra.City, s1.Place.KmToLoc, s1.Loc.City)
	}

	// Every location holds exactly one node, inside its country's range,
	// with an access delay in [1, 10] ms.
	seen := map[int]bool{}
	var atFra Node
	for _, n := range g.Nodes() {
		if seen[n.Loc.ID] {
			t.Errorf("two nodes at %s", n.Loc.City)
		}
		seen[n.Loc.ID] = true
		if r := ranges[n.Loc.Country]; !r.Contains(n.Addr) || n.Subnet != r {
			t.Errorf("node at %s (%s) has address %s, subnet %s; want inside %s", n.Loc.City, n.Loc.Country, n.Addr, n.Subnet, r)
		}
		if a := g.AccessMS(n.Addr); a < geoAccessMin || a > geoAccessMax {
			t.Errorf("node %s: access %.2f ms", n.Addr, a)
		}
		if n.Loc.ID == fra.ID {
			atFra = n
		}
	}
	if len(seen) != len(locs) {
		t.Errorf("%d locations hold nodes, want %d", len(seen), len(locs))
	}

	// RTTs by hand: within Frankfurt, the intra-city RTT plus the access
	// delay (plus the last mile of 100 km: 2 ms at 200 km/ms, inflation 2).
	acc := g.AccessMS(atFra.Addr)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	if got, want := ms(g.RTT(atFra.Addr, s0)), 2+acc; math.Abs(got-want) > 1e-6 {
		t.Errorf("RTT from Frankfurt's node to a Frankfurt site = %.4f ms, want %.4f", got, want)
	}
	if s1.Loc.ID != fra.ID {
		t.Errorf("the site 100 km north of Frankfurt is placed at %s", s1.Loc.City)
	} else {
		// 2 × 100.1 km × 2 (inflation) / 200 km/ms.
		if got, want := ms(g.RTT(atFra.Addr, s1)), 2+acc+s1.Place.KmToLoc/50; math.Abs(got-want) > 1e-6 {
			t.Errorf("RTT to the site 100 km out = %.4f ms, want %.4f", got, want)
		}
	}
	if got := LastMileMS(100); got != 2 {
		t.Errorf("LastMileMS(100) = %v, want 2", got)
	}
	// Between two nodes: the measured RTT between their locations plus both
	// access delays; and a node elsewhere sees the site through the matrix.
	for _, n := range g.Nodes()[:20] {
		if n.Loc.ID == fra.ID {
			continue
		}
		li, lf := locIndex(g.lat, n.Loc.ID), locIndex(g.lat, fra.ID)
		want := g.lat.at(li, lf) + g.AccessMS(n.Addr) + acc
		if got := ms(g.RTTAddr(n.Addr, atFra.Addr)); math.Abs(got-want) > 1e-6 {
			t.Errorf("RTT %s-%s = %.4f, want %.4f", n.Loc.City, fra.City, got, want)
		}
		want = g.lat.at(li, lf) + g.AccessMS(n.Addr)
		if got := ms(g.RTT(n.Addr, s0)); math.Abs(got-want) > 1e-6 {
			t.Errorf("RTT %s to the Frankfurt site = %.4f, want %.4f", n.Loc.City, got, want)
		}
		// Samples keep the mean at z = 0 and stay within two deviations.
		if g.SampleRTT(n.Addr, s0, 0) != g.RTT(n.Addr, s0) {
			t.Errorf("SampleRTT at z=0 differs from RTT")
		}
		hi := want + 2*g.lat.jitterSD(g.ep[n.Addr], g.ep[s0.Addrs[0]], 1)
		if got := ms(g.SampleRTT(n.Addr, s0, 5)); got > hi+1e-6 || got < want {
			t.Errorf("SampleRTT at z=5 = %.4f, want in [%.4f, %.4f]", got, want, hi)
		}
	}
	if g.RTTAddr(netip.MustParseAddr("192.0.2.1"), atFra.Addr) != subnet.Unreachable {
		t.Error("an unknown address has an RTT")
	}

	// The same inputs give the same world; another seed other places.
	again, _ := NewGeo(context.Background(), sites, tree, GeoParams{Seed: 7, Nodes: len(locs)})
	other, _ := NewGeo(context.Background(), sites, tree, GeoParams{Seed: 8, Nodes: len(locs)})
	same, diff := true, false
	for i, n := range g.Nodes() {
		same = same && again.Nodes()[i] == n && again.AccessMS(n.Addr) == g.AccessMS(n.Addr)
		diff = diff || other.Nodes()[i].Loc != n.Loc
	}
	if !same || !diff {
		t.Errorf("same seed same nodes: %v; other seed other places: %v", same, diff)
	}
}

func locIndex(d *latencyData, id int) int {
	for i, l := range d.locs {
		if l.ID == id {
			return i
		}
	}
	return -1
}

// TestGeoSharedLocations: with more nodes than locations, each location
// holds as many nodes as the rounds, with distinct access delays, so that
// the nearest node to every site is well defined.
func TestGeoSharedLocations(t *testing.T) {
	tree, _ := geoTree(t)
	locs, _ := LoadLocations("", "")
	g, err := NewGeo(context.Background(), nil, tree, GeoParams{Seed: 1, Nodes: 2*len(locs) + 3})
	if err != nil {
		t.Fatal(err)
	}
	count := map[int]int{}
	access := map[int][]float64{}
	for _, n := range g.Nodes() {
		count[n.Loc.ID]++
		access[n.Loc.ID] = append(access[n.Loc.ID], g.AccessMS(n.Addr))
	}
	extra := 0
	for id, c := range count {
		switch c {
		case 2:
		case 3:
			extra++
		default:
			t.Errorf("location %d holds %d nodes", id, c)
		}
		for i := 1; i < len(access[id]); i++ {
			if access[id][i] == access[id][0] {
				t.Errorf("location %d: two nodes with access %.3f ms", id, access[id][0])
			}
		}
	}
	if extra != 3 || len(count) != len(locs) {
		t.Errorf("%d locations with a third node, %d with any; want 3 and %d", extra, len(count), len(locs))
	}
}

func TestGeoParams(t *testing.T) {
	tree, _ := geoTree(t)
	for _, p := range []GeoParams{{Nodes: 0}, {Nodes: 10_001}, {Nodes: 1, IntraCityRTT: -1}, {Nodes: 1, Jitter: 11}} {
		if _, err := NewGeo(context.Background(), nil, tree, p); !errors.Is(err, ErrParams) {
			t.Errorf("%+v: err = %v, want ErrParams", p, err)
		}
	}
	if _, err := NewGeo(context.Background(), nil, nil, GeoParams{Nodes: 1}); !errors.Is(err, ErrParams) {
		t.Errorf("no tree: %v", err)
	}
	// A hierarchy with no allocation in a node's country is refused.
	b, _ := subnet.NewBuilder()
	if _, err := b.Add(context.Background(), "x", strings.NewReader("2|arin|20200101|1|19830101|20200101|+0000\narin|US|ipv4|20.0.0.0|256|20200101|allocated\n"), subnet.FormatAuto); err != nil {
		t.Fatal(err)
	}
	small, _, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewGeo(context.Background(), nil, small, GeoParams{Nodes: 300}); !errors.Is(err, ErrBadData) {
		t.Errorf("hierarchy without allocations: %v", err)
	}
}
