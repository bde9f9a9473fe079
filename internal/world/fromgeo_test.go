package world

import (
	"bytes"
	"context"
	"errors"
	"math"
	"path/filepath"
	"testing"

	"github.com/micra-net/micra/internal/realdata"
	"github.com/micra-net/micra/subnet"
	"github.com/micra-net/micra/subnet/embedded"
)

// dbipData returns the DB-IP file of the shared data, skipping without it
// unless CI is set.
func dbipData(t *testing.T) string {
	t.Helper()
	if raceEnabled {
		t.Skip("real-data tests run without -race")
	}
	return filepath.Join(realdata.Need(t, DBIPFile), DBIPFile)
}

// TestGeoWorld checks a world drawn from the DB-IP file: its sites are the
// file's rows ReadGeoSites draws, at their places, in the real hierarchy's
// shape (same smallest range, organisation and registry country as the
// real addresses), with the RTTs of the real-geo model, byte for byte the
// same world twice.
func TestGeoWorld(t *testing.T) {
	f := dbipData(t)
	ctx := context.Background()
	p := DefaultParams()
	p.Sites, p.Nodes, p.Port, p.Geo = 200, 12, 0, f
	w, err := Generate(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Generate(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(w.Spec(), again.Spec()) {
		t.Fatal("the same parameters gave another world")
	}
	real, _, err := ReadGeoSites(f, p.Sites, p.Seed, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := embedded.Tree()
	if err != nil {
		t.Fatal(err)
	}
	wt, err := w.Tree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sites := w.Sites()
	if len(sites) != len(real) || len(w.Nodes()) != p.Nodes {
		t.Fatalf("%d sites and %d nodes, want %d and %d", len(sites), len(w.Nodes()), len(real), p.Nodes)
	}
	pairs := map[subnet.ID]subnet.ID{} // world smallest range → real one
	back := map[subnet.ID]subnet.ID{}
	orgs := map[string]string{} // real organisation key → world organisation key
	for i, s := range sites {
		g := real[i]
		if s.Place.Lat != g.Lat || s.Place.Lon != g.Lon || s.Kind != RealHosted {
			t.Fatalf("site %d at %v, %v (%v), want the row's %v, %v", i, s.Place.Lat, s.Place.Lon, s.Kind, g.Lat, g.Lon)
		}
		if loc, km := w.lat.nearest(g.Lat, g.Lon); w.lat.locs[loc] != s.Loc || math.Abs(km-s.Place.KmToLoc) > 1e-9 {
			t.Fatalf("site %d at %s, %.1f km, want the nearest location %s", i, s.Loc.City, s.Place.KmToLoc, w.lat.locs[loc].City)
		}
		wid, rid := wt.SmallestNonUnary(s.Addrs[0]), rt.SmallestNonUnary(g.Addr)
		if wid == subnet.None || rid == subnet.None {
			t.Fatalf("site %d: no smallest range (world %v, real %v)", i, wid, rid)
		}
		if wt.Range(wid) != s.Subnet {
			t.Fatalf("site %d: subnet %v, the tree says %v", i, s.Subnet, wt.Range(wid))
		}
		if r, ok := pairs[wid]; ok && r != rid || back[rid] != 0 && back[rid] != wid {
			t.Fatalf("site %d: world range %v and real range %v do not correspond one to one", i, wt.Range(wid), rt.Range(rid))
		}
		pairs[wid], back[rid] = rid, wid
		if wt.Country(wid) != rt.Country(rid) {
			t.Fatalf("site %d: registry country %q, the real range's %q", i, wt.Country(wid), rt.Country(rid))
		}
		// The world's registry files name an allocation's holder by the
		// delegated file's opaque-id and an assignment's by its RPSL
		// organisation: a real organisation holding both shows as two.
		ro, wo := rt.Org(rid), wt.Org(wid)
		if ro != "" && wt.Layer(wid) != subnet.LayerRIR {
			if o, ok := orgs[ro]; ok && o != wo {
				t.Fatalf("site %d: real organisation %q split in the world (%q, %q)", i, ro, o, wo)
			}
			orgs[ro] = wo
		}
	}
	if len(pairs) < len(sites)/2 {
		t.Fatalf("only %d distinct ranges for %d sites", len(pairs), len(sites))
	}
	// The RTT model of NewGeo: the matrix between the places, the site's
	// last mile, the node's access delay of 1 to 10 ms.
	for _, n := range w.Nodes() {
		ne := w.endpoint(n.Addr)
		if ne.lastMile < geoAccessMin || ne.lastMile > geoAccessMax {
			t.Fatalf("node %v: access %v ms", n.Addr, ne.lastMile)
		}
		for _, s := range sites {
			se := w.endpoint(s.Addrs[0])
			want := w.lat.at(ne.loc, se.loc) + ne.lastMile + LastMileMS(s.Place.KmToLoc)
			if ne.loc == se.loc {
				want = p.IntraCityRTT + ne.lastMile + LastMileMS(s.Place.KmToLoc)
			}
			if got := float64(w.RTT(n.Addr, s)) / 1e6; math.Abs(got-want) > 0.02+0.001*want {
				t.Fatalf("RTT %v → %s = %.3f ms, want %.3f", n.Addr, s.Name, got, want)
			}
		}
	}
}

func TestGeoWorldParams(t *testing.T) {
	p := DefaultParams()
	p.Geo, p.FromReal = "x.csv", true
	if _, err := Generate(context.Background(), p); !errors.Is(err, ErrParams) {
		t.Fatalf("geo with from real: %v", err)
	}
	p.FromReal, p.Geo = false, filepath.Join(t.TempDir(), "missing.csv")
	if _, err := Generate(context.Background(), p); err == nil {
		t.Fatal("a missing geolocation file gave a world")
	}
}
