package overlay

import (
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Per-peer budgets of the requests that make this node work on a peer's
// word: a probe sends HTTP HEADs from the node's address (a flood would
// turn volunteers into a traffic source). It is a token bucket per remote
// peer; a request beyond the budget is answered with an OVERLOADED error
// frame and costs nothing more. Honest senders stay far below: a
// coordinator asks a candidate at most once per decision. (Crawl requests,
// the URLs nodes hand each other, are bounded by the results package.)
const (
	// DefaultProbeRate is the probes per second a peer may ask for,
	// sustained, and DefaultProbeBurst the probes it may ask for at once
	// (a coordinator delegating many subnets at the same time).
	DefaultProbeRate  = 4
	DefaultProbeBurst = 64

	// maxLimitedPeers bounds the buckets kept; beyond it the idle ones
	// (full again) are forgotten, then any.
	maxLimitedPeers = 4096
)

// RequestLimits sets the per-peer budget of probe requests: probes per
// second and burst (defaults DefaultProbeRate and DefaultProbeBurst). The
// rate must be positive and the burst at least 1.
func RequestLimits(probeRate float64, probeBurst int) Option {
	return func(c *config) error {
		if probeRate <= 0 || probeBurst < 1 {
			return fmt.Errorf("request limits: the rate must be positive and the burst at least 1, got %g and %d", probeRate, probeBurst)
		}
		c.rateLimits = newRateLimits(probeRate, probeBurst)
		return nil
	}
}

// rateLimits holds the per-peer buckets of one overlay. Safe for
// concurrent use.
type rateLimits struct {
	probe *peerLimiter
}

func newRateLimits(probeRate float64, probeBurst int) *rateLimits {
	return &rateLimits{probe: newPeerLimiter(probeRate, float64(probeBurst))}
}

func defaultRateLimits() *rateLimits {
	return newRateLimits(DefaultProbeRate, DefaultProbeBurst)
}

// peerLimiter is a token bucket per peer.
type peerLimiter struct {
	mu    sync.Mutex
	rate  float64 // tokens per second
	burst float64
	m     map[peer.ID]*bucket
	now   func() time.Time
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newPeerLimiter(rate, burst float64) *peerLimiter {
	return &peerLimiter{rate: rate, burst: burst, m: make(map[peer.ID]*bucket), now: time.Now}
}

// allow takes cost tokens from p's bucket and reports whether it had them.
func (l *peerLimiter) allow(p peer.ID, cost float64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.m[p]
	if b == nil {
		if len(l.m) >= maxLimitedPeers {
			l.evict(now)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.m[p] = b
	}
	if dt := now.Sub(b.at).Seconds(); dt > 0 {
		b.tokens = min(l.burst, b.tokens+dt*l.rate)
	}
	b.at = now
	if b.tokens < cost {
		return false
	}
	b.tokens -= cost
	return true
}

// evict forgets the buckets that have refilled (their peers are idle), and
// if none has, a quarter of them.
func (l *peerLimiter) evict(now time.Time) {
	for p, b := range l.m {
		if b.tokens+now.Sub(b.at).Seconds()*l.rate >= l.burst {
			delete(l.m, p)
		}
	}
	for p := range l.m {
		if len(l.m) < maxLimitedPeers*3/4 {
			break
		}
		delete(l.m, p)
	}
}

// limit refuses a request of kind what from p beyond its budget in l
// (ErrOverloaded); this node's own requests are never refused.
func (o *Overlay) limit(l *peerLimiter, p peer.ID, what string) error {
	if p == o.h.ID() || l.allow(p, 1) {
		return nil
	}
	return fmt.Errorf("%w: %s rate limit of %g a second reached", ErrOverloaded, what, l.rate)
}
