// Package worldmap holds what the node's dashboard draws its map with: the
// outline of the land, from Natural Earth's 1:110m data (public domain, as
// the world-atlas npm package redistributes it), and a position for each
// country, the median position of its addresses in DB-IP's IP to City
// Lite (CC BY 4.0, https://db-ip.com). gen/ writes both files.
//
// Positions are in an equirectangular space of 360 × 180: x is the
// longitude + 180, y is 90 − the latitude.
package worldmap

import (
	_ "embed"
	"strconv"
	"strings"
	"sync"
)

//go:embed land.txt
var land string

//go:embed countries.csv
var countriesCSV string

// Land returns the land's outline as SVG path data in the map's space.
func Land() string { return strings.TrimSpace(land) }

var (
	once      sync.Once
	countries map[string][2]float64
)

// Country returns the position of the country with ISO 3166 alpha-2 code
// cc (upper case) in the map's space; ok is false for a code without one
// ("", "ZZ", "EU", "AP" and the like).
func Country(cc string) (x, y float64, ok bool) {
	once.Do(func() {
		countries = map[string][2]float64{}
		for _, line := range strings.Split(countriesCSV, "\n") {
			f := strings.Split(line, ",")
			if len(f) != 3 || strings.HasPrefix(line, "#") {
				continue
			}
			lat, err1 := strconv.ParseFloat(f[1], 64)
			lon, err2 := strconv.ParseFloat(f[2], 64)
			if err1 == nil && err2 == nil {
				countries[f[0]] = [2]float64{lon + 180, 90 - lat}
			}
		}
	})
	p, ok := countries[cc]
	return p[0], p[1], ok
}
