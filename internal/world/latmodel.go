package world

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/binary"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"sync"
)

// The embedded latency model: what a world's RTTs come from when the real
// matrix is not at hand (a clean clone, with nothing beside it). The
// WonderProxy matrix has no licence and never ships; the model is fitted to
// it and only its parameters ship, with places whose coordinates are
// GeoNames' (latmodel/NOTICE). Between two places i and j, d km apart
// along the great circle, in regions r and s (country.region):
//
//	rtt(i, j)  = max(floor, access_i + access_j + offset_rs + (slope + slope_rs + slope_i + slope_j) · d / 100)
//	mdev(i, j) = e^(devA + devB · ln rtt(i, j) + devResidual(i, j))
//
// Slopes are in ms of RTT per 100 km (light in fibre covers 100 km per ms of
// RTT along a path as long as the great circle). access is a place's own
// delay to the paths its region shares, slope_i how much longer than the
// great circle its paths run, offset_rs and slope_rs what a pair of regions
// adds (an exchange far away, an ocean cable). devResidual is a fixed
// per-pair draw from the deviations' residuals, its uniform variate a hash
// of the two place ids, the same in every world.
//
// The model is smooth: it has the detours geography and these terms
// predict, not the matrix's pair-by-pair ones. Drawing those at random per
// pair (from the residuals' distribution) was tried and rejected: it gives
// the right spread of RTTs but scatters them where real detours are
// shared by neighbouring places, and the searches then did far worse than
// on the matrix (docs/latency-model.md).
//
// The fit (latmodel_fit_test.go) is an iteratively reweighted least
// squares for the least absolute error relative to the RTT, with ridge
// penalties on the region and place terms; its error is in
// latmodel/params.json and docs/latency-model.md.

// Embedded model files, under latmodel/.
const (
	latModelPlaces = "latmodel/places.csv"
	latModelParams = "latmodel/params.json"
	// latModelFormat is params.json's format; the loader refuses others.
	latModelFormat = "micra-latency-model/1"
)

//go:embed latmodel/places.csv
var latModelPlacesCSV []byte

//go:embed latmodel/params.json
var latModelParamsJSON []byte

// latModel is params.json: the fitted parameters of the embedded model.
type latModel struct {
	Format string `json:"format"`
	// Fitted says what the parameters were fitted to, and the fit's error.
	Fitted      string                `json:"fitted"`
	Floor       float64               `json:"floor_ms"`     // the least structural RTT between two places
	Slope       float64               `json:"slope"`        // ms of RTT per 100 km, every pair
	RegionPairs map[string]regionPair `json:"region_pairs"` // "eu/na", regions in ascending order
	Places      map[string]placeTerm  `json:"places"`       // by place id
	DevA        float64               `json:"dev_a"`
	DevB        float64               `json:"dev_b"`
	DevResidual []float64             `json:"dev_residual"` // quantiles of the deviations' log residual
}

// regionPair is what a pair of regions adds to every path between them.
type regionPair struct {
	Offset float64 `json:"offset_ms"`
	Slope  float64 `json:"slope"` // ms per 100 km
}

// placeTerm is what a place adds to every path from it.
type placeTerm struct {
	Access float64 `json:"access_ms"`
	Slope  float64 `json:"slope"` // ms per 100 km
}

// Bounds of the embedded files, which are ours, but checked as any input:
// every other number at most 1e4 in magnitude.
const (
	maxModelQuantiles = 1024
	maxModelRegions   = 64
	maxDevTerm        = 10 // |dev_a|, |dev_b|, |each deviation residual|
)

// rtt returns the model's mean RTT in ms between places a and b of
// regions ra and rb.
func (m *latModel) rtt(a, b Location, ra, rb string) float64 {
	pa, pb := m.Places[strconv.Itoa(a.ID)], m.Places[strconv.Itoa(b.ID)]
	rp := m.RegionPairs[regionKey(ra, rb)]
	d := greatCircleKm(a, b)
	return math.Max(m.Floor, pa.Access+pb.Access+rp.Offset+(m.Slope+rp.Slope+pa.Slope+pb.Slope)*d/100)
}

// dev returns the model's RTT deviation in ms for a pair whose mean RTT is
// rtt ms.
func (m *latModel) dev(a, b Location, rtt float64) float64 {
	return math.Exp(m.DevA + m.DevB*math.Log(math.Max(rtt, 0.01)) + quantileAt(m.DevResidual, pairUniform(a.ID, b.ID, "deviation")))
}

// regionKey names a pair of regions in either order.
func regionKey(a, b string) string {
	if a > b {
		a, b = b, a
	}
	return a + "/" + b
}

// pairUniform returns a uniform variate in (0, 1) fixed by the unordered
// pair of place ids and the purpose.
func pairUniform(a, b int, purpose string) float64 {
	if a > b {
		a, b = b, a
	}
	h := sha256.New()
	var buf [16]byte
	binary.BigEndian.PutUint64(buf[:8], uint64(a))
	binary.BigEndian.PutUint64(buf[8:], uint64(b))
	h.Write(buf[:])
	io.WriteString(h, purpose)
	x := binary.BigEndian.Uint64(h.Sum(nil)) >> 11 // 53 bits
	return (float64(x) + 0.5) / (1 << 53)
}

// quantileAt interpolates the quantile function given by q, quantiles at
// probabilities (k + 0.5) / len(q), at u; beyond the outer ones it is flat.
func quantileAt(q []float64, u float64) float64 {
	if len(q) == 0 {
		return 0
	}
	x := u*float64(len(q)) - 0.5
	switch {
	case x <= 0:
		return q[0]
	case x >= float64(len(q)-1):
		return q[len(q)-1]
	}
	k := int(x)
	f := x - float64(k)
	return q[k]*(1-f) + q[k+1]*f
}

// decodeLatModel parses and checks params.json.
func decodeLatModel(b []byte) (*latModel, error) {
	var m latModel
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadData, latModelParams, err)
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadData, latModelParams, fmt.Sprintf(format, a...))
	}
	finite := func(xs ...float64) bool {
		for _, x := range xs {
			if math.IsNaN(x) || math.IsInf(x, 0) || math.Abs(x) > 1e4 {
				return false
			}
		}
		return true
	}
	switch {
	case m.Format != latModelFormat:
		return nil, bad("format %q, want %q", m.Format, latModelFormat)
	case !finite(m.Floor, m.Slope) || m.Floor <= 0:
		return nil, bad("floor or slope out of range")
	case !(math.Abs(m.DevA) <= maxDevTerm && math.Abs(m.DevB) <= maxDevTerm):
		// Bounded so that e^(a + b ln rtt + residual) stays finite and
		// positive for every RTT the other bounds allow.
		return nil, bad("deviation terms out of range")
	case len(m.RegionPairs) > maxModelRegions*maxModelRegions:
		return nil, bad("%d region pairs", len(m.RegionPairs))
	case len(m.DevResidual) > maxModelQuantiles:
		return nil, bad("%d deviation quantiles", len(m.DevResidual))
	}
	for k, rp := range m.RegionPairs {
		if !finite(rp.Offset, rp.Slope) {
			return nil, bad("region pair %s out of range", k)
		}
	}
	for k, p := range m.Places {
		if !finite(p.Access, p.Slope) {
			return nil, bad("place %s out of range", k)
		}
	}
	if len(m.DevResidual) == 0 || !finite(m.DevResidual...) || !slices.IsSorted(m.DevResidual) ||
		!(math.Abs(m.DevResidual[0]) <= maxDevTerm && math.Abs(m.DevResidual[len(m.DevResidual)-1]) <= maxDevTerm) {
		return nil, bad("deviation quantiles malformed")
	}
	return &m, nil
}

// readPlaces parses places.csv: id,city,country,lat,lon,geonames — the
// place id (the same as the matrix's server id), the city's short name as
// worlds show it, its ISO 3166 alpha-2 code, GeoNames' coordinates and
// name. It keeps the places whose country the world knows, by id.
func readPlaces(r io.Reader) ([]Location, error) {
	byCode := map[string]string{}
	for name, c := range countries {
		byCode[c.code] = name
	}
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 6
	var locs []Location
	for line := 1; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrBadData, latModelPlaces, err)
		}
		if line == 1 {
			if !slices.Equal(rec, []string{"id", "city", "country", "lat", "lon", "geonames"}) {
				return nil, fmt.Errorf("%w: %s: unexpected header %q", ErrBadData, latModelPlaces, rec)
			}
			continue
		}
		id, err1 := strconv.Atoi(rec[0])
		lat, err2 := strconv.ParseFloat(rec[3], 64)
		lon, err3 := strconv.ParseFloat(rec[4], 64)
		if err := errors.Join(err1, err2, err3); err != nil || math.Abs(lat) > 90 || math.Abs(lon) > 180 {
			return nil, fmt.Errorf("%w: %s line %d: %q", ErrBadData, latModelPlaces, line, rec)
		}
		name, ok := byCode[rec[2]]
		if !ok {
			continue
		}
		c := countries[name]
		locs = append(locs, Location{ID: id, City: rec[1], Country: c.code, CountryName: name, Registry: c.registry, Lat: lat, Lon: lon})
		if len(locs) > maxServers {
			return nil, fmt.Errorf("%w: %s: more than %d places", ErrBadData, latModelPlaces, maxServers)
		}
	}
	slices.SortFunc(locs, func(a, b Location) int { return a.ID - b.ID })
	if len(locs) < 2 || len(slices.CompactFunc(slices.Clone(locs), func(a, b Location) bool { return a.ID == b.ID })) != len(locs) {
		return nil, fmt.Errorf("%w: %s: fewer than two places, or an id twice", ErrBadData, latModelPlaces)
	}
	return locs, nil
}

// modelLatency builds the latency data of the embedded model: the places
// of places.csv, and every pair's RTT and deviation from params.json.
var modelLatency = sync.OnceValues(func() (*latencyData, error) {
	return buildModelLatency(latModelPlacesCSV, latModelParamsJSON)
})

func buildModelLatency(placesCSV, paramsJSON []byte) (*latencyData, error) {
	m, err := decodeLatModel(paramsJSON)
	if err != nil {
		return nil, err
	}
	locs, err := readPlaces(bytes.NewReader(placesCSV))
	if err != nil {
		return nil, err
	}
	d := &latencyData{locs: locs, byCountry: map[string][]int{}}
	for i, l := range locs {
		if _, ok := m.Places[strconv.Itoa(l.ID)]; !ok {
			return nil, fmt.Errorf("%w: %s has no terms for place %d (%s)", ErrBadData, latModelParams, l.ID, l.City)
		}
		d.byCountry[l.Country] = append(d.byCountry[l.Country], i)
	}
	n := len(locs)
	d.rtt = make([]float64, n*n)
	d.mdev = make([]float64, n*n)
	for i := range n {
		for j := i + 1; j < n; j++ {
			a, b := locs[i], locs[j]
			r := m.rtt(a, b, regionOf(a), regionOf(b))
			v := m.dev(a, b, r)
			d.rtt[i*n+j], d.rtt[j*n+i] = r, r
			d.mdev[i*n+j], d.mdev[j*n+i] = v, v
		}
	}
	d.sums = DataFile{Path: builtinPrefix + latModelPlaces, SHA256: sha256Hex(placesCSV)}
	d.pings = DataFile{Path: builtinPrefix + latModelParams, SHA256: sha256Hex(paramsJSON)}
	return d, nil
}

// builtinPrefix marks a DataFile embedded in the module rather than read
// from the data directory.
const builtinPrefix = "builtin:"

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// regionOf returns the model region of a location's country ("" for a
// country the world does not know).
func regionOf(l Location) string { return countries[l.CountryName].region }
