package demo

import (
	"math"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// TestNoiseFit draws probes from the model the fit assumes and checks that
// it recovers the model's parameters.
func TestNoiseFit(t *testing.T) {
	const sigma, jitter = 0.05, 1.5 // jitter in ms
	rng := rand.New(rand.NewPCG(1, 2))
	node := peer.ID("n")
	from := netip.MustParseAddr("10.0.0.1")
	truth := map[netip.Addr]time.Duration{}
	var p probeNoise
	for i := range 4000 {
		a := netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
		ms := 2 + 200*rng.Float64()
		truth[a] = time.Duration(ms * float64(time.Millisecond))
		measured := ms*math.Exp(sigma*rng.NormFloat64()) + math.Abs(jitter*rng.NormFloat64())
		p.observe(node, a, time.Duration(measured*float64(time.Millisecond)))
	}
	p.observe(peer.ID("stranger"), from, time.Millisecond) // not a node: ignored
	f := p.fit(func(_, b netip.Addr) time.Duration { return truth[b] }, map[peer.ID]netip.Addr{node: from})
	if f.N != 4000 || f.Far == 0 || f.Near == 0 {
		t.Fatalf("fitted %d probes (%d far, %d near), want the 4000 of the node in both ranges", f.N, f.Far, f.Near)
	}
	// The far probes' log ratio carries a little of the additive part (at
	// 50 ms, 1.5 ms is 3 %), so the bias is small and positive.
	if f.Bias < 0 || f.Bias > 0.03 || math.Abs(f.Sigma-sigma) > 0.01 {
		t.Errorf("multiplicative part: bias %.4f, sigma %.4f; want about 0 and %.2f", f.Bias, f.Sigma, sigma)
	}
	// The near probes carry the rest of the multiplicative spread.
	if got := f.Jitter.Seconds() * 1000; got < jitter*0.9 || got > jitter*1.2 {
		t.Errorf("additive part: %.2f ms, want about %.1f", got, jitter)
	}
	t.Logf("fit: %+v", f)
	if !(f.Excess[0] <= f.Excess[1] && f.Excess[1] <= f.Excess[2]) {
		t.Errorf("excess quantiles out of order: %v", f.Excess)
	}
}
