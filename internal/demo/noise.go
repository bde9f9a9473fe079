// The noise of the demo's timed probes, fitted against the world's RTTs.

package demo

import (
	"fmt"
	"io"
	"math"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/internal/swarm"
)

// maxNoiseSamples bounds the probes kept for the fit.
const maxNoiseSamples = 100_000

// farProbe splits the probes for the fit: the multiplicative part comes
// from probes of servers at least this far, where an added millisecond or
// two is lost in the spread, the additive part from the nearer ones.
const farProbe = 50 * time.Millisecond

// minNear is the fewest near probes the additive part is fitted from.
const minNear = 20

// slowProbe is the excess of a probe counted in the tail: queueing on the
// machine, not the world's jitter.
const slowProbe = 10 * time.Millisecond

type probeSample struct {
	self    peer.ID
	reached netip.Addr
	rtt     time.Duration
}

// probeNoise keeps the nodes' timed probes (node.ProbeObserver). It is
// safe for concurrent use.
type probeNoise struct {
	mu      sync.Mutex
	samples []probeSample
}

func (p *probeNoise) observe(self peer.ID, reached netip.Addr, rtt time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.samples) < maxNoiseSamples {
		p.samples = append(p.samples, probeSample{self, reached, rtt})
	}
}

// noiseFit is the probes' noise in the model of micra bench delegation's
// --rtt-noise and --rtt-jitter: measured = true × e^x + |y|, x ~ N(Bias,
// Sigma²), y ~ N(0, Jitter²).
type noiseFit struct {
	N, Far, Near int           // probes fitted; of them, of far and of near servers
	Bias, Sigma  float64       // of ln(measured ÷ true) over the far probes: median, and 1.4826 × its median absolute deviation
	Jitter       time.Duration // the near probes' median of measured − true × e^Bias, ÷ 0.674 (the median of |N(0, 1)|); 0 with fewer than minNear
	Excess       [3]time.Duration
	Slow         int // probes more than slowProbe over the true RTT
}

// fit compares each probe with the true mean RTT (the world's RTTAddr)
// between the probing node's address and the address the probe reached.
func (p *probeNoise) fit(trueRTT func(a, b netip.Addr) time.Duration, nodes map[peer.ID]netip.Addr) noiseFit {
	p.mu.Lock()
	defer p.mu.Unlock()
	var f noiseFit
	var logs []float64
	var excess []time.Duration
	type pair struct{ m, t time.Duration }
	var near []pair
	for _, s := range p.samples {
		from, ok := nodes[s.self]
		if !ok {
			continue
		}
		t := trueRTT(from, s.reached)
		if t <= 0 || s.rtt <= 0 {
			continue
		}
		f.N++
		excess = append(excess, s.rtt-t)
		if s.rtt-t > slowProbe {
			f.Slow++
		}
		if t >= farProbe {
			logs = append(logs, math.Log(float64(s.rtt)/float64(t)))
		} else {
			near = append(near, pair{s.rtt, t})
		}
	}
	f.Far, f.Near = len(logs), len(near)
	if len(logs) > 0 {
		f.Bias = median(logs)
		dev := make([]float64, len(logs))
		for i, l := range logs {
			dev[i] = math.Abs(l - f.Bias)
		}
		f.Sigma = 1.4826 * median(dev)
	}
	if len(near) >= minNear {
		add := make([]time.Duration, len(near))
		for i, n := range near {
			add[i] = n.m - time.Duration(float64(n.t)*math.Exp(f.Bias))
		}
		f.Jitter = time.Duration(float64(max(median(add), 0)) / 0.674)
	}
	if len(excess) > 0 {
		slices.Sort(excess)
		for i, q := range []float64{0.1, 0.5, 0.9} {
			f.Excess[i] = excess[int(q*float64(len(excess)-1))]
		}
	}
	return f
}

func (f noiseFit) print(out io.Writer) {
	if f.N == 0 {
		return
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	fmt.Fprintf(out, "Probe noise, %d timed probes against the world's RTTs: measured − true %.2f / %.2f / %.2f ms (p10 / p50 / p90), %.1f %% over %v; ×e^N(%.3f, %.3f²) from the %d probes of servers ≥ %v",
		f.N, ms(f.Excess[0]), ms(f.Excess[1]), ms(f.Excess[2]), 100*float64(f.Slow)/float64(f.N), slowProbe, f.Bias, f.Sigma, f.Far, farProbe)
	if f.Near < minNear {
		fmt.Fprintf(out, " (%d nearer: too few to fit an added jitter)\n", f.Near)
		return
	}
	fmt.Fprintf(out, ", +|N(0, (%.2f ms)²)| from the %d nearer (bench delegation --rtt-noise %.3f --rtt-jitter %.2f)\n", ms(f.Jitter), f.Near, f.Sigma, ms(f.Jitter))
}

// betweenNoise compares the RTTs between nodes that the coordinators'
// guided search sees (Overlay.Between, from each node) with the world's:
// the own measurements of each node to the others, and how many pairs
// between two others each knows from announcements.
func betweenNoise(nodes []*swarm.Node, trueRTT func(a, b netip.Addr) time.Duration, out io.Writer) {
	var own probeNoise
	addrs := map[peer.ID]netip.Addr{}
	for _, n := range nodes {
		addrs[n.ID()] = n.Addr
	}
	heard, pairs := 0, 0
	for _, n := range nodes {
		o := n.Overlay()
		for i, a := range nodes {
			if a != n {
				if d, ok := o.Between(n.ID(), a.ID()); ok {
					own.observe(n.ID(), a.Addr, d)
				}
			}
			for _, b := range nodes[i+1:] {
				if a != n && b != n {
					pairs++
					if _, ok := o.Between(a.ID(), b.ID()); ok {
						heard++
					}
				}
			}
		}
	}
	f := own.fit(trueRTT, addrs)
	if f.N == 0 {
		return
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	fmt.Fprintf(out, "Inter-node RTTs the coordinators measured (%d of %d ordered pairs; of the pairs between two others, %d of %d known from announcements): measured − true %.2f / %.2f / %.2f ms (p10 / p50 / p90), ×e^N(%.3f, %.3f²) over the %d pairs ≥ %v\n",
		f.N, len(nodes)*(len(nodes)-1), heard, pairs, ms(f.Excess[0]), ms(f.Excess[1]), ms(f.Excess[2]), f.Bias, f.Sigma, f.Far, farProbe)
}

func median[T float64 | time.Duration](v []T) T {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
