package world

import (
	"compress/gzip"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/micra-net/micra/internal/realdata"
)

// Paths of the latency data, relative to the data directory
// (../shared/data in a checkout).
const (
	serversFile = "latency/wonderproxy-2020-07-19/servers-2020-07-19.csv"
	pingsFile   = "latency/wonderproxy-2020-07-19/pings-2020-07-19-2020-07-20-grouped.csv.gz"
)

// maxServers bounds the servers file (the real one has 246): the RTT
// matrices grow with its square.
const maxServers = 2048

// DataEnv names the environment variable that points at the data
// directory when Params.DataDir is empty.
const DataEnv = realdata.Env

// Location is one city of the real latency data: a WonderProxy server
// with its country. Every subnet, site and node of a world is placed at a
// Location.
type Location struct {
	ID          int     `json:"id"`           // the server id in the WonderProxy files
	City        string  `json:"city"`         // e.g. "Frankfurt"
	Country     string  `json:"country"`      // ISO 3166 alpha-2, as the RIR files write it
	CountryName string  `json:"country_name"` // as the WonderProxy file writes it
	Registry    string  `json:"registry"`     // the RIR serving the country
	Lat         float64 `json:"lat"`
	Lon         float64 `json:"lon"`
}

// latencyData is the parsed latency data: the locations with a known
// country, and the symmetric matrices of mean RTT and of its deviation in
// milliseconds, row-major over location indices.
type latencyData struct {
	locs      []Location
	byCountry map[string][]int // country code → location indices, ascending
	rtt       []float64        // n×n; the diagonal is the data's loopback value
	mdev      []float64        // n×n
	estimated int              // unordered pairs with no measurement, estimated from distance
	measured  []bool           // n×n: whether the matrix measured the pair (nil for the model)
	sums      DataFile         // servers file
	pings     DataFile
}

// DataFile names one input file of a world with its SHA-256, so that a
// spec records exactly what it was generated from.
type DataFile struct {
	Path   string `json:"path"` // relative to the data directory; "builtin:" and a path in the module for a file the binary embeds
	SHA256 string `json:"sha256"`
}

func (d *latencyData) n() int { return len(d.locs) }

// at returns the mean RTT in ms between location indices i and j.
func (d *latencyData) at(i, j int) float64 { return d.rtt[i*len(d.locs)+j] }

// dev returns the RTT deviation in ms between location indices i and j.
func (d *latencyData) dev(i, j int) float64 { return d.mdev[i*len(d.locs)+j] }

var latencyCache sync.Map // absolute data dir → *latencyOnce

type latencyOnce struct {
	once sync.Once
	d    *latencyData
	err  error
}

// Where a world's RTTs come from (Params.Latency, GeoParams.Latency).
const (
	// LatencyMatrix is the real all-pairs ping matrix in the data
	// directory (WonderProxy, 2020-07-19; no licence, so it never ships).
	LatencyMatrix = "matrix"
	// LatencyModel is the embedded model fitted to it (latmodel.go): what
	// a clean clone runs on.
	LatencyModel = "model"
)

// findLatency returns the latency data of source src (see
// Params.Latency) and the data directory: dataDir when not empty, else
// $MICRA_DATA, else one found beside the working directory (FindDataDir);
// "" when src is the model and none is found. With src "", a missing
// matrix is an error only when a data directory was named (dataDir or
// $MICRA_DATA): otherwise the model serves. The source used is returned.
func findLatency(dataDir, src string) (lat *latencyData, dir, used string, err error) {
	dir, derr := FindDataDir(dataDir)
	if derr != nil {
		dir = ""
	}
	named := dataDir != "" || os.Getenv(DataEnv) != ""
	if src == LatencyModel || (src == "" && derr != nil && errors.Is(derr, ErrNoData) && !named) {
		lat, err = modelLatency()
		return lat, dir, LatencyModel, err
	}
	if derr != nil {
		return nil, "", "", derr
	}
	lat, err = loadLatency(dir)
	return lat, dir, LatencyMatrix, err
}

// loadLatency reads (once per process and directory) the latency data in
// dataDir.
func loadLatency(dataDir string) (*latencyData, error) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, err
	}
	v, _ := latencyCache.LoadOrStore(abs, &latencyOnce{})
	lo := v.(*latencyOnce)
	lo.once.Do(func() { lo.d, lo.err = readLatency(abs) })
	return lo.d, lo.err
}

func readLatency(dir string) (*latencyData, error) {
	d := &latencyData{byCountry: map[string][]int{}}
	sf, err := openData(dir, serversFile)
	if err != nil {
		return nil, err
	}
	defer sf.Close()
	h := sha256.New()
	if err := d.readServers(io.TeeReader(sf, h)); err != nil {
		return nil, fmt.Errorf("%s: %w", serversFile, err)
	}
	d.sums = DataFile{Path: serversFile, SHA256: hex.EncodeToString(h.Sum(nil))}

	pf, err := openData(dir, pingsFile)
	if err != nil {
		return nil, err
	}
	defer pf.Close()
	h = sha256.New()
	if err := d.readPings(io.TeeReader(pf, h)); err != nil {
		return nil, fmt.Errorf("%s: %w", pingsFile, err)
	}
	d.pings = DataFile{Path: pingsFile, SHA256: hex.EncodeToString(h.Sum(nil))}
	return d, nil
}

func openData(dir, rel string) (*os.File, error) {
	f, err := os.Open(filepath.Join(dir, rel))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s in %s", ErrNoData, rel, dir)
	}
	return f, err
}

// readServers parses id,name,title,location,state,country,state_abbv,
// continent,latitude,longitude,... and keeps the servers whose country is
// known, ordered by id.
func (d *latencyData) readServers(r io.Reader) error {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	for rec, err := range csvRows(cr, func(h []string) bool { return len(h) >= 10 && h[0] == "id" && h[5] == "country" }) {
		if err != nil {
			return err
		}
		if len(rec) < 10 || strings.TrimSpace(rec[0]) == "" {
			continue
		}
		id, err1 := strconv.Atoi(rec[0])
		lat, err2 := strconv.ParseFloat(rec[8], 64)
		lon, err3 := strconv.ParseFloat(rec[9], 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return fmt.Errorf("%w: server row %q: %v", ErrBadData, rec, err)
		}
		c, ok := countries[rec[5]]
		if !ok {
			continue
		}
		city := rec[2]
		if city == "" {
			city = rec[1]
		}
		d.locs = append(d.locs, Location{ID: id, City: city, Country: c.code, CountryName: rec[5], Registry: c.registry, Lat: lat, Lon: lon})
		if len(d.locs) > maxServers {
			return fmt.Errorf("%w: more than %d servers", ErrBadData, maxServers)
		}
	}
	slices.SortFunc(d.locs, func(a, b Location) int { return a.ID - b.ID })
	d.locs = slices.CompactFunc(d.locs, func(a, b Location) bool { return a.ID == b.ID })
	if len(d.locs) < 2 {
		return fmt.Errorf("%w: fewer than two usable servers", ErrBadData)
	}
	for i, l := range d.locs {
		d.byCountry[l.Country] = append(d.byCountry[l.Country], i)
	}
	return nil
}

// readPings parses source,destination,min,avg,max,mdev (gzip) into the
// symmetric matrices: the mean of both directions where both were
// measured, the one direction otherwise, and an estimate from the great
// circle distance where neither was.
func (d *latencyData) readPings(r io.Reader) error {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadData, err)
	}
	defer zr.Close()
	n := len(d.locs)
	idx := make(map[int]int, n)
	for i, l := range d.locs {
		idx[l.ID] = i
	}
	sum := make([]float64, n*n)
	dsum := make([]float64, n*n)
	cnt := make([]uint8, n*n)
	cr := csv.NewReader(zr)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	for rec, err := range csvRows(cr, func(h []string) bool { return len(h) >= 6 && h[0] == "source" && h[3] == "avg" }) {
		if err != nil {
			return err
		}
		if len(rec) < 6 {
			return fmt.Errorf("%w: ping row %q", ErrBadData, rec)
		}
		s, err1 := strconv.Atoi(rec[0])
		t, err2 := strconv.Atoi(rec[1])
		avg, err3 := strconv.ParseFloat(rec[3], 64)
		mdev, err4 := strconv.ParseFloat(rec[5], 64)
		if err := errors.Join(err1, err2, err3, err4); err != nil || avg < 0 || mdev < 0 || math.IsNaN(avg+mdev) || math.IsInf(avg+mdev, 0) {
			return fmt.Errorf("%w: ping row %q", ErrBadData, rec)
		}
		i, ok1 := idx[s]
		j, ok2 := idx[t]
		if !ok1 || !ok2 {
			continue // a server with no row in the servers file (ids 292-295)
		}
		for _, k := range []int{i*n + j, j*n + i} {
			if i == j && k != i*n+j {
				continue
			}
			sum[k] += avg
			dsum[k] += mdev
			cnt[k]++
		}
	}
	d.rtt = make([]float64, n*n)
	d.mdev = make([]float64, n*n)
	d.measured = make([]bool, n*n)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			k := i*n + j
			if cnt[k] > 0 {
				d.measured[k] = true
				d.rtt[k] = sum[k] / float64(cnt[k])
				d.mdev[k] = dsum[k] / float64(cnt[k])
				continue
			}
			if i < j {
				d.estimated++
			}
			d.rtt[k] = estimateRTT(d.locs[i], d.locs[j])
			d.mdev[k] = 0.01 * d.rtt[k]
		}
	}
	return nil
}

// csvRows yields the records of cr after its header, which header must
// accept; a read error or a header refused is yielded as ErrBadData, last.
func csvRows(cr *csv.Reader, header func([]string) bool) iter.Seq2[[]string, error] {
	return func(yield func([]string, error) bool) {
		for first := true; ; first = false {
			rec, err := cr.Read()
			switch {
			case errors.Is(err, io.EOF):
				return
			case err != nil:
				yield(nil, fmt.Errorf("%w: %v", ErrBadData, err))
				return
			case first && !header(rec):
				yield(nil, fmt.Errorf("%w: unexpected header %q", ErrBadData, rec))
				return
			case first:
				continue
			}
			if !yield(rec, nil) {
				return
			}
		}
	}
}

// estimateRTT estimates the RTT in ms between two places with no
// measurement: light in fibre covers about 100 km per ms of RTT, and real
// paths are about twice the great-circle distance, plus 5 ms of equipment.
func estimateRTT(a, b Location) float64 {
	return 5 + 2*greatCircleKm(a, b)/100
}

func greatCircleKm(a, b Location) float64 { return DistanceKm(a.Lat, a.Lon, b.Lat, b.Lon) }

// DistanceKm returns the great-circle distance in km between two points
// given in degrees.
func DistanceKm(lat1, lon1, lat2, lon2 float64) float64 {
	const r = 6371.0
	rad := math.Pi / 180
	dlat := (lat2 - lat1) * rad
	dlon := (lon2 - lon1) * rad
	h := math.Sin(dlat/2)*math.Sin(dlat/2) + math.Cos(lat1*rad)*math.Cos(lat2*rad)*math.Sin(dlon/2)*math.Sin(dlon/2)
	return 2 * r * math.Asin(math.Min(1, math.Sqrt(h)))
}

// FindDataDir returns the data directory holding the latency matrix: dir
// when it is not empty, else $MICRA_DATA, else the first "shared/data"
// found beside the current directory or one of its parents (a checkout
// keeps ../shared beside the repository); see realdata.Find. Its error
// wraps ErrNoData.
func FindDataDir(dir string) (string, error) {
	d, err := realdata.Find(dir, serversFile)
	if errors.Is(err, realdata.ErrNotFound) {
		return "", fmt.Errorf("%w%s", ErrNoData, strings.TrimPrefix(err.Error(), realdata.ErrNotFound.Error()))
	}
	return d, err
}
