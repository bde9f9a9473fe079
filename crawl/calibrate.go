package crawl

import (
	"container/list"
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
}

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
	return errors.Join(errs...)
}

// Slow is a calibration signal: Page's fetches from Addr became slow.
type Slow struct {
	Page     string
	Addr     netip.Addr    // the server address of the last slow fetch
	RTT      time.Duration // the last slow fetch's RTT
	Baseline time.Duration // the median of the history before the slowdown
	Count    int           // consecutive slow fetches
}

// Calibrator is IPMicra's dynamic calibration of delegations (thesis
// 7.6.2) on the crawler's side: it keeps the recent fetch times of each
// page and signals when a page's fetches become slower than its history —
// more than Factor times its median, on Consecutive fetches in a row. The
// node turns a signal into a re-delegation of the server's subnet, which
// the coordinator decides with fresh probes. After a signal the page's
// history restarts from the slow fetches, so a slowdown that persists (no
// better node exists) is signalled once, not on every fetch.
//
// The times compared are Timing.RTT: the round trip of the request, not
// the body's download, so page sizes and 304s do not read as slowdowns.
// A Calibrator is safe for concurrent use and holds at most MaxPages
// pages.
type Calibrator struct {
	cfg   CalibrationConfig
	mu    sync.Mutex
	ll    *list.List // of *pageTimes, most recent first
	pages map[string]*list.Element
}

type pageTimes struct {
	page  string
	times []time.Duration // oldest first, at most History
	slow  []time.Duration // the current run of slow fetches
}

// NewCalibrator returns a Calibrator for cfg.
func NewCalibrator(cfg CalibrationConfig) (*Calibrator, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Calibrator{cfg: cfg, ll: list.New(), pages: map[string]*list.Element{}}, nil
}

// Observe records one fetch of page from server address addr that took
// rtt, and reports a signal when it completes a run of slow fetches.
func (c *Calibrator) Observe(page string, addr netip.Addr, rtt time.Duration) (Slow, bool) {
	if rtt <= 0 {
		return Slow{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var p *pageTimes
	if el, ok := c.pages[page]; ok {
		c.ll.MoveToFront(el)
		p = el.Value.(*pageTimes)
	} else {
		p = &pageTimes{page: page}
		c.pages[page] = c.ll.PushFront(p)
		for c.ll.Len() > c.cfg.MaxPages {
			old := c.ll.Back()
			c.ll.Remove(old)
			delete(c.pages, old.Value.(*pageTimes).page)
		}
	}
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
	if el, ok := c.pages[page]; ok {
		c.ll.Remove(el)
		delete(c.pages, page)
	}
}

// Len returns the number of pages remembered.
func (c *Calibrator) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
