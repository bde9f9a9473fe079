package world

import (
	"cmp"
	"math"
	"net/netip"
	"slices"
	"time"
)

// endpoint is where the latency model puts an address.
type endpoint struct {
	loc      int
	lastMile float64 // ms
	bw       float64 // bytes/s
}

// endpoint returns the model's view of address a: the effective location,
// last mile and bandwidth of the smallest range containing it, or the
// defaults for addresses outside every organisation's range.
func (w *World) endpoint(a netip.Addr) endpoint {
	u, ok := addrU32(a)
	if !ok {
		return endpoint{w.defLoc, defaultLastMile, defaultBW}
	}
	return w.endpointU(u)
}

func (w *World) endpointU(u uint32) endpoint {
	i := w.lookup(u)
	if i < 0 {
		return endpoint{w.defLoc, defaultLastMile, defaultBW}
	}
	b := &w.blocks[i]
	return endpoint{b.loc, b.lastMile, b.bw}
}

// meanRTT returns the model's mean RTT in ms between two endpoints.
func (w *World) meanRTT(x, y endpoint) float64 { return w.lat.meanRTT(x, y, w.p.IntraCityRTT) }

// sampleRTT returns one RTT in ms between two endpoints (see
// latencyData.sampleRTT).
func (w *World) sampleRTT(x, y endpoint, z float64) float64 {
	return w.lat.sampleRTT(x, y, w.p.IntraCityRTT, w.p.Jitter, z)
}

// meanRTT returns the mean RTT in ms between two endpoints: the measured
// RTT between their locations (intra, in ms, within one location) plus the
// last mile of each.
func (d *latencyData) meanRTT(x, y endpoint, intra float64) float64 {
	base := intra
	if x.loc != y.loc {
		base = d.at(x.loc, y.loc)
	}
	return base + x.lastMile + y.lastMile
}

// jitterSD returns the standard deviation in ms of one RTT sample: the
// measured deviation between the two locations plus a twentieth of the
// last miles, times jitter.
func (d *latencyData) jitterSD(x, y endpoint, jitter float64) float64 {
	dev := 0.1
	if x.loc != y.loc {
		dev = d.dev(x.loc, y.loc)
	}
	return jitter * (dev + 0.05*(x.lastMile+y.lastMile))
}

// sampleRTT returns one RTT in ms: the mean plus a normal jitter clipped
// at two deviations (so the mean is kept), never below half the mean.
func (d *latencyData) sampleRTT(x, y endpoint, intra, jitter, z float64) float64 {
	m := d.meanRTT(x, y, intra)
	z = math.Max(-2, math.Min(2, z))
	return math.Max(m/2, m+z*d.jitterSD(x, y, jitter))
}

// bandwidth returns a path's throughput in bytes/s.
func (w *World) bandwidth(x, y endpoint, rttMs float64) float64 {
	bw := math.Min(x.bw, y.bw)
	if rttMs > 0 {
		bw = math.Min(bw, tcpWindow/(rttMs/1000))
	}
	return bw
}

// locRTT returns the mean RTT in ms between two locations of the data
// (intra within one), no last miles; false when either is not the data's.
func (d *latencyData) locRTT(a, b Location, intra float64) (float64, bool) {
	i, ok1 := d.index(a)
	j, ok2 := d.index(b)
	switch {
	case !ok1 || !ok2:
		return 0, false
	case i == j:
		return intra, true
	}
	return d.at(i, j), true
}

// index returns the index of location l in the data, by its server id.
func (d *latencyData) index(l Location) (int, bool) {
	i, ok := slices.BinarySearchFunc(d.locs, l.ID, func(x Location, id int) int { return cmp.Compare(x.ID, id) })
	if ok && d.locs[i] == l {
		return i, true
	}
	for i, x := range d.locs {
		if x == l {
			return i, true
		}
	}
	return 0, false
}

// LocRTT returns the latency data's mean RTT between two of its locations
// (Locations), the intra-city RTT within one, without last miles: what a
// map of the matrix predicts. ok is false for another location.
func (w *World) LocRTT(a, b Location) (rtt time.Duration, ok bool) {
	ms, ok := w.lat.locRTT(a, b, w.p.IntraCityRTT)
	return msDur(ms), ok
}

// LocRTT is World.LocRTT for a real-geo world.
func (g *Geo) LocRTT(a, b Location) (rtt time.Duration, ok bool) {
	ms, ok := g.lat.locRTT(a, b, g.p.IntraCityRTT)
	return msDur(ms), ok
}
