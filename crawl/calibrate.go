package crawl

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// CalibrationConfig tunes a Calibrator. Zero fields take the defaults
// noted.
type CalibrationConfig struct {
	// Factor: a fetch is slow when its RTT exceeds Factor times the page's
	// baseline, the median of its history (default 2).
	Factor float64
	// MinIncrease: and when it exceeds the baseline by at least this much,
	// so that jitter on near servers is not read as a change (default
	// 10 ms).
	MinIncrease time.Duration
	// Consecutive slow fetches of one page make a signal (default 2: the
	// thesis' "repeats for more than one time continuously").
	Consecutive int
	// History is how many recent fetch times of a page are kept (default
	// 5); a page needs at least two before any fetch can be slow.
	History int
	// MaxPages bounds the pages remembered, least recently fetched first
	// out (default 65536; about 150 bytes each).
	MaxPages int

	// Reference, when set, returns the RTT with which this node won the
	// delegation holding a server address (the probe its coordinator
	// stored), false when unknown. A server whose first FarFetches
	// fetches all took more than FarFactor times it and FarIncrease above
	// it is far: signalled once (Slow.Far), so that the node has the part
	// of the range holding it searched apart (a registry range is not
	// always one place). It is called without the Calibrator's lock.
	Reference func(netip.Addr) (time.Duration, bool)
	// FarFactor (default 1.5) and FarIncrease (default 10 ms, the
	// evaluation's split trigger) make a server far.
	FarFactor   float64
	FarIncrease time.Duration
	// FarFetches is how many fetches of a server are compared, the least
	// counting (default 2).
	FarFetches int
	// MaxServers bounds the servers remembered (default 65536).
	MaxServers int
}

// DefaultFarIncrease is CalibrationConfig.FarIncrease's default.
const DefaultFarIncrease = 10 * time.Millisecond

func (c CalibrationConfig) withDefaults() CalibrationConfig {
	if c.Factor == 0 {
		c.Factor = 2
	}
	if c.MinIncrease == 0 {
		c.MinIncrease = 10 * time.Millisecond
	}
	if c.Consecutive == 0 {
		c.Consecutive = 2
	}
	if c.History == 0 {
		c.History = 5
	}
	if c.MaxPages == 0 {
		c.MaxPages = 65536
	}
	if c.FarFactor == 0 {
		c.FarFactor = 1.5
	}
	if c.FarIncrease == 0 {
		c.FarIncrease = DefaultFarIncrease
	}
	if c.FarFetches == 0 {
		c.FarFetches = 2
	}
	if c.MaxServers == 0 {
		c.MaxServers = 65536
	}
	return c
}

func (c CalibrationConfig) validate() error {
	var errs []error
	if c.Factor <= 1 {
		errs = append(errs, fmt.Errorf("calibration factor %v must exceed 1", c.Factor))
	}
	if c.MinIncrease < 0 || c.Consecutive < 1 || c.History < 2 || c.History > 64 || c.MaxPages < 1 {
		errs = append(errs, errors.New("calibration needs MinIncrease ≥ 0, Consecutive ≥ 1, History in 2..64 and MaxPages ≥ 1"))
	}
	if c.FarFactor < 1 || c.FarIncrease < 0 || c.FarFetches < 1 || c.FarFetches > 64 || c.MaxServers < 1 {
		errs = append(errs, errors.New("calibration needs FarFactor ≥ 1, FarIncrease ≥ 0, FarFetches in 1..64 and MaxServers ≥ 1"))
	}
	return errors.Join(errs...)
}

// Slow is a calibration signal: Page's fetches from Addr became slow, or,
// when Far is set, the server at Addr is far from this node compared with
// the delegation holding it.
type Slow struct {
	Page     string
	Addr     netip.Addr    // the server address of the last slow fetch
	RTT      time.Duration // the last slow fetch's RTT; Far: the least of the server's fetches
	Baseline time.Duration // the median of the history before the slowdown; Far: the reference
	Count    int           // consecutive slow fetches; Far: the server's fetches compared
	Far      bool
}

// Calibrator is IPMicra's dynamic calibration of delegations (thesis
// 7.6.2) on the crawler's side: it keeps the recent fetch times of each
// page and signals when a page's fetches become slower than its history —
// more than Factor times its median, on Consecutive fetches in a row. The
// node turns a signal into a re-delegation of the server's subnet, which
// the coordinator decides with fresh probes. After a signal the page's
// history restarts from the slow fetches, so a slowdown that persists (no
// better node exists) is signalled once, not on every fetch. With a
// Reference it also judges each server once, from its first fetches,
// against the probe the delegation holding it was won with (Slow.Far).
//
// The times compared are Timing.RTT: the round trip of the request, not
// the body's download, so page sizes and 304s do not read as slowdowns.
// A Calibrator is safe for concurrent use and holds at most MaxPages
// pages.
type Calibrator struct {
	cfg     CalibrationConfig
	mu      sync.Mutex
	pages   *lru[string, pageTimes]
	servers *lru[netip.Addr, serverTimes]
}

// serverTimes is what the far check keeps of a server.
type serverTimes struct {
	n      int
	least  time.Duration
	judged bool
}

type pageTimes struct {
	times []time.Duration // oldest first, at most History
	slow  []time.Duration // the current run of slow fetches
}

// NewCalibrator returns a Calibrator for cfg.
func NewCalibrator(cfg CalibrationConfig) (*Calibrator, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Calibrator{cfg: cfg, pages: newLRU[string, pageTimes](cfg.MaxPages),
		servers: newLRU[netip.Addr, serverTimes](cfg.MaxServers)}, nil
}

// Observe records one fetch of page from server address addr that took
// rtt, and reports a signal when it completes a run of slow fetches, or
// (with a Reference) when it shows the server far.
func (c *Calibrator) Observe(page string, addr netip.Addr, rtt time.Duration) (Slow, bool) {
	if rtt <= 0 {
		return Slow{}, false
	}
	if s, ok := c.observePage(page, addr, rtt); ok {
		return s, true
	}
	return c.observeServer(page, addr, rtt)
}

// observeServer is the far check of Observe.
func (c *Calibrator) observeServer(page string, addr netip.Addr, rtt time.Duration) (Slow, bool) {
	if c.cfg.Reference == nil || !addr.IsValid() {
		return Slow{}, false
	}
	c.mu.Lock()
	st := c.servers.touch(addr)
	if st.judged {
		c.mu.Unlock()
		return Slow{}, false
	}
	st.n++
	if st.least == 0 || rtt < st.least {
		st.least = rtt
	}
	n, least := st.n, st.least
	st.judged = n >= c.cfg.FarFetches
	c.mu.Unlock()
	if n < c.cfg.FarFetches {
		return Slow{}, false
	}
	ref, ok := c.cfg.Reference(addr)
	if !ok || !c.Far(least, ref) {
		return Slow{}, false
	}
	return Slow{Page: page, Addr: addr, RTT: least, Baseline: ref, Count: n, Far: true}, true
}

// Far reports whether rtt, to a server, is far from ref, the RTT with
// which this node won the delegation holding it: more than FarFactor
// times ref and at least FarIncrease above it. It is the test behind
// Slow.Far, for a node that confirms a far signal with a probe before it
// acts on it.
func (c *Calibrator) Far(rtt, ref time.Duration) bool {
	return ref > 0 && float64(rtt) > c.cfg.FarFactor*float64(ref) && rtt-ref >= c.cfg.FarIncrease
}

// observePage is the page history check of Observe.
func (c *Calibrator) observePage(page string, addr netip.Addr, rtt time.Duration) (Slow, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pages.touch(page)
	if len(p.times) >= 2 {
		base := median(p.times)
		if float64(rtt) > c.cfg.Factor*float64(base) && rtt-base >= c.cfg.MinIncrease {
			p.slow = append(p.slow, rtt)
			if len(p.slow) < c.cfg.Consecutive {
				return Slow{}, false
			}
			s := Slow{Page: page, Addr: addr, RTT: rtt, Baseline: base, Count: len(p.slow)}
			// The slow regime becomes the history: signalled once.
			p.times = append(p.times[:0], p.slow...)
			p.slow = p.slow[:0]
			return s, true
		}
	}
	// A normal fetch ends a run of slow ones, which join the history.
	p.times = append(p.times, p.slow...)
	p.slow = p.slow[:0]
	p.times = append(p.times, rtt)
	if n := len(p.times) - c.cfg.History; n > 0 {
		p.times = append(p.times[:0], p.times[n:]...)
	}
	return Slow{}, false
}

// Forget drops a page's history, for example after its subnet was
// re-delegated away from this node.
func (c *Calibrator) Forget(page string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pages.remove(page)
}

// Len returns the number of pages remembered.
func (c *Calibrator) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pages.len()
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
