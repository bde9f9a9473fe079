package world

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strings"
	"testing"
)

// TestLatencyModel checks the embedded model as a clean clone has it: every
// place is in a country the world knows, the RTTs are symmetric, positive
// and finite, and a few of them are what the Internet measures (the ranges
// allow the model's error; docs/latency-model.md).
func TestLatencyModel(t *testing.T) {
	d, err := modelLatency()
	if err != nil {
		t.Fatal(err)
	}
	if d.n() < 240 || d.measured != nil || !strings.HasPrefix(d.pings.Path, builtinPrefix) {
		t.Fatalf("%d places", d.n())
	}
	n := d.n()
	for i := range n {
		for j := range n {
			r, v := d.at(i, j), d.dev(i, j)
			if r != d.at(j, i) || v != d.dev(j, i) || math.IsNaN(r+v) || math.IsInf(r+v, 0) || (i != j && (r <= 0 || v <= 0)) {
				t.Fatalf("rtt(%d,%d) = %v, dev %v; rtt(%d,%d) = %v", i, j, r, v, j, i, d.at(j, i))
			}
		}
	}
	city := func(name string) int {
		for i, l := range d.locs {
			if l.City == name {
				return i
			}
		}
		t.Fatalf("no place %q", name)
		return -1
	}
	for _, c := range []struct {
		a, b     string
		lo, hi   float64 // ms
		measured float64 // the matrix's, for the reader
	}{
		{"Frankfurt", "Amsterdam", 4, 15, 7.6},
		{"New York", "London", 60, 90, 71},
		{"Melbourne", "Toronto", 170, 260, 200},
		{"Tokyo", "Singapore", 50, 110, 70},
	} {
		if r := d.at(city(c.a), city(c.b)); r < c.lo || r > c.hi {
			t.Errorf("%s–%s: %.1f ms, want %v to %v (measured about %v)", c.a, c.b, r, c.lo, c.hi, c.measured)
		}
	}
	// The default city of every world is a place.
	city(DefaultParams().DefaultCity)
}

// TestLatencySource: without a data directory a world takes the model and
// says so; asking for the matrix without one is an error naming it; the
// spec records the source, so that Load regenerates the same world.
func TestLatencySource(t *testing.T) {
	t.Setenv(DataEnv, "")
	t.Chdir(t.TempDir()) // no shared/data beside it
	p := params(3, 30, 3)
	w, err := Generate(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if w.Params().Latency != LatencyModel || w.DataDir() != "" || !strings.Contains(w.DescribeLatency(), "embedded latency model") {
		t.Fatalf("latency %q, data dir %q: %s", w.Params().Latency, w.DataDir(), w.DescribeLatency())
	}
	if !bytes.Contains(w.Spec(), []byte(`"latency": "model"`)) || !bytes.Contains(w.Spec(), []byte(builtinPrefix+latModelParams)) {
		t.Fatal("the spec does not name the model")
	}
	dir := t.TempDir()
	if err := w.Write(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(context.Background(), dir, ""); err != nil {
		t.Fatalf("Load: %v", err)
	}
	p.Latency = LatencyMatrix
	if _, err := Generate(context.Background(), p); !errors.Is(err, ErrNoData) {
		t.Fatalf("the matrix without data: %v, want ErrNoData", err)
	}
	p.Latency = "nearest"
	if _, err := Generate(context.Background(), p); !errors.Is(err, ErrParams) {
		t.Fatalf("latency %q: %v, want ErrParams", p.Latency, err)
	}
	// A data directory named but without the matrix is an error, not the
	// model: the caller asked for the data.
	p.Latency = ""
	p.DataDir = t.TempDir()
	if _, err := Generate(context.Background(), p); !errors.Is(err, ErrNoData) {
		t.Fatalf("an empty data directory: %v, want ErrNoData", err)
	}
	// From real allocations without the registry files: the built-in
	// snapshot's.
	p = params(3, 150, 12)
	p.FromReal = true
	w, err = Generate(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(w.Spec(), []byte(builtinPrefix+"subnet/embedded/default.snap")) {
		t.Fatal("a world from real allocations does not name the built-in snapshot")
	}
}

// FuzzLatencyModel feeds arbitrary places and parameters to the model's
// decoder: it must not panic, and what it accepts gives symmetric, finite,
// positive RTTs.
func FuzzLatencyModel(f *testing.F) {
	f.Add(latModelPlacesCSV, latModelParamsJSON)
	f.Add([]byte("id,city,country,lat,lon,geonames\n1,A,DE,50,8,A\n2,B,FR,48,2,B\n"),
		[]byte(`{"format":"micra-latency-model/1","floor_ms":0.5,"slope":2,"places":{"1":{},"2":{}},"dev_residual":[0]}`))
	f.Add([]byte("id,city,country,lat,lon,geonames\n1,A,DE,95,8,A\n"), []byte(`{"format":"x"}`))
	f.Fuzz(func(t *testing.T, places, params []byte) {
		if len(places) > 1<<14 || len(params) > 1<<16 {
			return
		}
		d, err := buildModelLatency(places, params)
		if err != nil {
			if !errors.Is(err, ErrBadData) {
				t.Fatalf("error %v does not wrap ErrBadData", err)
			}
			return
		}
		n := d.n()
		for i := range n {
			for j := i + 1; j < n; j++ {
				r := d.at(i, j)
				if r != d.at(j, i) || !(r > 0) || math.IsInf(r, 0) || !(d.dev(i, j) > 0) || math.IsInf(d.dev(i, j), 0) {
					t.Fatalf("rtt(%d,%d) = %v, dev %v", i, j, r, d.dev(i, j))
				}
			}
		}
	})
}
