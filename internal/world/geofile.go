package world

import (
	"fmt"
	"net/netip"

	"github.com/micra-net/micra/internal/geo"
)

// DBIPFile is the path of DB-IP's IP-to-City Lite IPv4 file (CC BY 4.0:
// "IP Geolocation by DB-IP", https://db-ip.com) relative to the data
// directory.
const DBIPFile = "geo/dbip-city-lite-ipv4-2026-06.prefix.csv.gz"

// GeoFileStats says what ReadGeoSites read.
type GeoFileStats struct {
	Path     string   `json:"path"`
	Rows     int      `json:"rows"`     // usable rows in the file
	Skipped  int      `json:"skipped"`  // malformed rows skipped
	Examples []string `json:"examples"` // the first skipped rows, "file:line: reason"
	Kept     int      `json:"kept"`     // rows that may be taken (all usable rows without a filter)
	Sampled  int      `json:"sampled"`  // rows taken as sites
}

// ReadGeoSites reads a geolocation CSV file (see package geo) and returns n
// of its rows drawn with seed (every row when it has n or fewer; n ≤ 0
// takes all), in file order, each as one address inside the row's prefix,
// also drawn with seed. With strict, a malformed row is an error;
// otherwise it is skipped and counted. keep, when not nil, chooses the rows
// that may be drawn by the address drawn in each.
func ReadGeoSites(path string, n int, seed int64, strict bool, keep func(geo.Row, netip.Addr) bool) ([]GeoSite, GeoFileStats, error) {
	var opts []geo.Option
	if strict {
		opts = append(opts, geo.Strict())
	}
	st := GeoFileStats{Path: path}
	r, err := geo.Open(path, opts...)
	if err != nil {
		return nil, st, err
	}
	defer r.Close()
	rows, err := geo.SampleFunc(r, n, uint64(seed), func(row geo.Row) bool {
		if keep == nil || keep(row, siteAddr(row, seed)) {
			st.Kept++
			return true
		}
		return false
	})
	gs := r.Stats()
	st.Rows, st.Skipped, st.Examples = gs.Rows, gs.Skipped, gs.Examples
	if err != nil {
		return nil, st, err
	}
	if len(rows) == 0 {
		return nil, st, fmt.Errorf("%s: %w: no usable rows", path, ErrBadData)
	}
	out := make([]GeoSite, len(rows))
	for i, row := range rows {
		out[i] = GeoSite{Addr: siteAddr(row, seed), Lat: row.Lat, Lon: row.Lon, Country: row.Country, City: row.City}
	}
	st.Sampled = len(out)
	return out, st, nil
}

// siteAddr is the address a row's site gets: drawn inside its prefix.
func siteAddr(row geo.Row, seed int64) netip.Addr {
	return row.Addr(mix(uint64(seed), "geo-addr", uint64(row.Line)))
}
