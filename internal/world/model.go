package world

import (
	"math"
	"net/netip"
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
