package delegate

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/subnet"
)

// TestDelegatorDensity: the guided search's tolerance follows the peers'
// density by default. The peers sit within 8 ms of each other (the
// density rule's tolerance is then 2 ms); n1, asked first (its sibling
// range), answers 20 ms, and n2, 5 ms from it, 16 ms. A fifth of the
// threshold (10 ms) leaves n2 out, as no node can beat n1 by 10 ms by the
// triangle inequality; the density tolerance asks it.
func TestDelegatorDensity(t *testing.T) {
	setup := func() *fakeEnv {
		e := newEnv(t, "127.0.3.0/24", map[peer.ID]int{"n1": 20, "n2": 16, "n3": 26, "n4": 27, "n5": 28})
		e.delegate(t, "127.0.1.0/24", "n1")
		e.between = map[[2]peer.ID]int{}
		for i := 1; i <= 5; i++ {
			for j := i + 1; j <= 5; j++ {
				e.between[[2]peer.ID{peer.ID(fmt.Sprint("n", i)), peer.ID(fmt.Sprint("n", j))}] = 8
			}
		}
		e.between[[2]peer.ID{"n1", "n2"}] = 5
		return e
	}
	t.Run("density", func(t *testing.T) {
		e := setup()
		n, d := run(t, e, overlay.DelegateRequest{})
		if n != "n2" {
			t.Errorf("chose %s after asking %v; want n2, within the density tolerance", n, e.asked)
		}
		if st := d.Stats(); st.Nearest != 8*time.Millisecond || st.Tolerance != subnet.MinTolerance {
			t.Errorf("density %v, tolerance %v; want the median nearest RTT, 8ms, and its eighth within 2ms", st.Nearest, st.Tolerance)
		}
	})
	t.Run("fixed", func(t *testing.T) {
		e := setup()
		n, d := run(t, e, overlay.DelegateRequest{}, Tolerance(10*time.Millisecond))
		if n != "n1" || len(e.asked) != 1 {
			t.Errorf("chose %s after asking %v; want n1 alone, a fifth of the threshold", n, e.asked)
		}
		if st := d.Stats(); st.Nearest != 0 || st.Tolerance != 10*time.Millisecond {
			t.Errorf("density %v, tolerance %v; want none and 10ms", st.Nearest, st.Tolerance)
		}
	})
}

// TestDensityCache: the density is measured again only when a minute old
// or when the peers' number moved by more than a tenth.
func TestDensityCache(t *testing.T) {
	peers := func(n int) []peer.ID {
		out := make([]peer.ID, n)
		for i := range out {
			out[i] = peer.ID(fmt.Sprint("p", i))
		}
		return out
	}
	calls := 0
	rtt := 10 * time.Millisecond
	between := func(a, b peer.ID) (time.Duration, bool) { calls++; return rtt, true }
	var c density
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	steps := []struct {
		name     string
		at       time.Duration
		peers    int
		rtt      time.Duration
		measured int
		want     time.Duration
	}{
		{"first", 0, 20, 10 * time.Millisecond, 1, 10 * time.Millisecond},
		{"fresh", 30 * time.Second, 20, 20 * time.Millisecond, 1, 10 * time.Millisecond},
		{"a tenth more peers", 40 * time.Second, 22, 20 * time.Millisecond, 1, 10 * time.Millisecond},
		{"more than a tenth", 41 * time.Second, 23, 20 * time.Millisecond, 2, 20 * time.Millisecond},
		{"fewer", 42 * time.Second, 20, 30 * time.Millisecond, 3, 30 * time.Millisecond},
		{"a minute old", 102 * time.Second, 20, 40 * time.Millisecond, 4, 40 * time.Millisecond},
	}
	for _, s := range steps {
		rtt = s.rtt
		before, measured := calls, c.measured
		got := c.get(t0.Add(s.at), peers(s.peers), between)
		if got != s.want || c.measured != s.measured {
			t.Errorf("%s: density %v after %d measurements; want %v after %d", s.name, got, c.measured, s.want, s.measured)
		}
		if c.measured == measured && calls != before {
			t.Errorf("%s: cached, yet read %d RTTs", s.name, calls-before)
		}
	}
	// A measurement is bounded by subnet.NearestRTT's sample: fewer than
	// twice 256 of 1,000 peers, each against every peer.
	calls = 0
	c.get(t0.Add(time.Hour), peers(1000), between)
	if calls > 2*256*1000 {
		t.Errorf("read %d RTTs for 1,000 peers; want fewer than 2 × 256 × 1,000", calls)
	}

	// While one call measures, another takes the value before.
	fixed := func(d time.Duration) func(a, b peer.ID) (time.Duration, bool) {
		return func(a, b peer.ID) (time.Duration, bool) { return d, true }
	}
	var c2 density
	c2.get(t0, peers(4), fixed(10*time.Millisecond))
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	slow := func(a, b peer.ID) (time.Duration, bool) {
		once.Do(func() { close(started); <-release })
		return 30 * time.Millisecond, true
	}
	done := make(chan time.Duration)
	go func() { done <- c2.get(t0.Add(time.Hour), peers(4), slow) }()
	<-started
	if got := c2.get(t0.Add(time.Hour), peers(4), fixed(50*time.Millisecond)); got != 10*time.Millisecond {
		t.Errorf("during a measurement: %v; want the value before, 10ms", got)
	}
	close(release)
	if got := <-done; got != 30*time.Millisecond || c2.measured != 2 {
		t.Errorf("measured %v in %d measurements; want 30ms in 2", got, c2.measured)
	}
}
