// Command gen writes the world map the node's dashboard draws:
// land.txt, the land of Natural Earth's 1:110m data (public domain; the
// world-atlas npm package's land-110m.json, TopoJSON) as an SVG path in
// an equirectangular 360×180 space, and countries.csv, each country's
// position as the median latitude and longitude of its addresses in
// DB-IP's IP to City Lite (CC BY 4.0).
//
//	npm pack world-atlas@2.0.2 && tar xzf world-atlas-2.0.2.tgz
//	go run ./internal/worldmap/gen -land package/land-110m.json -dbip $MICRA_DATA/geo/dbip-city-lite-ipv4-2026-06.prefix.csv.gz -out internal/worldmap
package main

import (
	"bufio"
	"cmp"
	"compress/gzip"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

func main() {
	land := flag.String("land", "", "world-atlas land-110m.json")
	dbip := flag.String("dbip", "", "DB-IP IP to City Lite prefix CSV (gzipped)")
	out := flag.String("out", ".", "output folder")
	flag.Parse()
	if *land != "" {
		path, err := landPath(*land)
		if err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(*out, "land.txt"), []byte(path+"\n"), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	if *dbip != "" {
		rows, err := countries(*dbip)
		if err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(*out, "countries.csv"), []byte(rows), 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

type topology struct {
	Arcs      [][][2]float64 `json:"arcs"`
	Transform struct {
		Scale     [2]float64 `json:"scale"`
		Translate [2]float64 `json:"translate"`
	} `json:"transform"`
	Objects map[string]struct {
		Geometries []struct {
			Type string          `json:"type"`
			Arcs json.RawMessage `json:"arcs"`
		} `json:"geometries"`
	} `json:"objects"`
}

// landPath decodes the TopoJSON land object into one SVG path: x is the
// longitude + 180, y 90 − the latitude, to 0.1 degree.
func landPath(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	var t topology
	if err := json.Unmarshal(b, &t); err != nil {
		return "", err
	}
	// Arcs are delta-encoded quantized positions.
	arcs := make([][][2]float64, len(t.Arcs))
	for i, a := range t.Arcs {
		var x, y float64
		for _, p := range a {
			x, y = x+p[0], y+p[1]
			arcs[i] = append(arcs[i], [2]float64{x*t.Transform.Scale[0] + t.Transform.Translate[0], y*t.Transform.Scale[1] + t.Transform.Translate[1]})
		}
	}
	ring := func(idx []int) [][2]float64 {
		var pts [][2]float64
		for _, i := range idx {
			a := arcs[max(i, ^i)]
			if i < 0 {
				a = slices.Clone(a)
				slices.Reverse(a)
			}
			if len(pts) > 0 {
				a = a[1:] // the arcs of a ring share their ends
			}
			pts = append(pts, a...)
		}
		return pts
	}
	var sb strings.Builder
	for _, g := range t.Objects["land"].Geometries {
		var polys [][][]int
		switch g.Type {
		case "Polygon":
			var p [][]int
			if err := json.Unmarshal(g.Arcs, &p); err != nil {
				return "", err
			}
			polys = [][][]int{p}
		case "MultiPolygon":
			if err := json.Unmarshal(g.Arcs, &polys); err != nil {
				return "", err
			}
		default:
			return "", fmt.Errorf("geometry %s", g.Type)
		}
		for _, p := range polys {
			for _, r := range p {
				// A ring that crosses the antimeridian is cut where it
				// jumps across the map, rather than drawn across it.
				var last string
				prevX, cut := 0.0, false
				for i, pt := range ring(r) {
					s := fmt.Sprintf("%.1f %.1f", pt[0]+180, 90-pt[1])
					if s == last {
						continue
					}
					last = s
					jump := i > 0 && math.Abs(pt[0]-prevX) > 180
					cut = cut || jump
					prevX = pt[0]
					if i == 0 || jump {
						sb.WriteString("M" + s)
					} else {
						sb.WriteString("L" + s)
					}
				}
				if !cut {
					sb.WriteString("Z")
				}
			}
		}
	}
	return strings.ReplaceAll(sb.String(), ".0", ""), nil
}

// countries returns "cc,lat,lon" lines: each country's median latitude
// and longitude over its addresses (each prefix weighted by its size, in
// /24s), to 0.1 degree.
func countries(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return "", err
	}
	r := csv.NewReader(bufio.NewReaderSize(zr, 1<<20))
	r.FieldsPerRecord = -1
	type wpt struct{ v, w float64 }
	lat, lon := map[string][]wpt{}, map[string][]wpt{}
	for first := true; ; first = false {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", err
		}
		if first || len(rec) < 8 {
			continue
		}
		p, err := netip.ParsePrefix(rec[0])
		if err != nil || len(rec[1]) != 2 {
			continue
		}
		la, err1 := strconv.ParseFloat(rec[6], 64)
		lo, err2 := strconv.ParseFloat(rec[7], 64)
		if err1 != nil || err2 != nil {
			continue
		}
		w := math.Pow(2, float64(max(0, 24-p.Bits())))
		lat[rec[1]] = append(lat[rec[1]], wpt{la, w})
		lon[rec[1]] = append(lon[rec[1]], wpt{lo, w})
	}
	median := func(s []wpt) float64 {
		slices.SortFunc(s, func(a, b wpt) int { return cmp.Compare(a.v, b.v) })
		var total, run float64
		for _, p := range s {
			total += p.w
		}
		for _, p := range s {
			if run += p.w; run >= total/2 {
				return p.v
			}
		}
		return s[len(s)-1].v
	}
	ccs := make([]string, 0, len(lat))
	for cc := range lat {
		ccs = append(ccs, cc)
	}
	slices.Sort(ccs)
	var sb strings.Builder
	sb.WriteString("# country,latitude,longitude: the median position of the country's addresses in DB-IP IP to City Lite 2026-06 (CC BY 4.0, https://db-ip.com); internal/worldmap/gen\n")
	for _, cc := range ccs {
		fmt.Fprintf(&sb, "%s,%.1f,%.1f\n", cc, median(lat[cc]), median(lon[cc]))
	}
	return sb.String(), nil
}
