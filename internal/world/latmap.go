package world

import (
	"time"

	"github.com/micra-net/micra/subnet"
)

// LocRTTer gives the latency data's RTT between two of its locations:
// World and Geo.
type LocRTTer interface {
	Locations() []Location
	LocRTT(a, b Location) (time.Duration, bool)
}

// LatencyMap returns the latency map (subnet.SearchConfig.Places) of the
// data's locations for nodes at known locations (at[i] is nodes[i]'s): a
// place's RTT from node n is the matrix RTT between n's location and the
// place plus n's access delay. The access delays are not given: they are
// estimated from the RTTs measured between the nodes (between), which are
// the matrix RTTs plus both access delays, by least squares over every
// pair (exact when the measurements fit the matrix). With fewer than
// three nodes measured, or a negative estimate, an access delay counts as
// nothing. A node learns its own location from its operator or by
// geolocating its address; the matrix is public data.
func LatencyMap(w LocRTTer, nodes []string, at []Location, between func(a, b string) (time.Duration, bool)) []subnet.MapPlace {
	n := len(nodes)
	access := make([]float64, n)
	// For a complete set of pairs, with r_ij = measured − matrix:
	// S_i = Σ_j r_ij = (n−2)a_i + A and Σ_i S_i = 2(n−1)A.
	sum := make([]float64, n)
	cnt := make([]int, n)
	total, pairs := 0.0, 0
	for i := range n {
		for j := i + 1; j < n; j++ {
			m, ok1 := between(nodes[i], nodes[j])
			x, ok2 := w.LocRTT(at[i], at[j])
			if !ok1 || !ok2 {
				continue
			}
			r := float64(m-x) / float64(time.Millisecond)
			sum[i] += r
			sum[j] += r
			cnt[i]++
			cnt[j]++
			total += 2 * r
			pairs++
		}
	}
	if n >= 3 && pairs == n*(n-1)/2 {
		a := total / float64(2*(n-1))
		for i := range n {
			access[i] = max(0, (sum[i]-a)/float64(n-2))
		}
	}
	var out []subnet.MapPlace
	for _, l := range w.Locations() {
		p := subnet.MapPlace{Name: l.City + ", " + l.Country, Country: l.Country, RTT: make(map[string]time.Duration, n)}
		for i, node := range nodes {
			if d, ok := w.LocRTT(at[i], l); ok {
				p.RTT[node] = d + time.Duration(access[i]*float64(time.Millisecond))
			}
		}
		out = append(out, p)
	}
	return out
}
