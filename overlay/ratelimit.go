package overlay

import (
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Per-peer budgets of the requests that make this node work on a peer's
// word: a probe sends HTTP HEADs from the node's address (a flood would
// turn volunteers into a traffic source), a forward queues URLs in its
// crawler. Each is a token bucket per remote peer; a request beyond the
// budget is answered with an OVERLOADED error frame and costs nothing
// more. Honest senders stay far below: a coordinator asks a candidate at
// most once per decision, and a crawler forwards in batches of up to 512
// URLs (node's defaults) and retries a refused batch later, so nothing is
// lost when the budget runs out.
const (
	// DefaultProbeRate is the probes per second a peer may ask for,
	// sustained, and DefaultProbeBurst the probes it may ask for at once
	// (a coordinator delegating many subnets at the same time).
	DefaultProbeRate  = 4
	DefaultProbeBurst = 64
	// DefaultForwardRate is the forwarded URLs per second a peer may send,
	// sustained, and DefaultForwardBurst the URLs at once (32 full
	// FORWARD frames of maxForwardURLs).
	DefaultForwardRate  = 1000
	DefaultForwardBurst = 32 * maxForwardURLs

	// maxLimitedPeers bounds the buckets kept; beyond it the idle ones
	// (full again) are forgotten, then any.
	maxLimitedPeers = 4096
)

// RequestLimits sets the per-peer budgets of probe requests (probes per
// second and burst) and forwarded URLs (URLs per second and burst).
// Defaults: DefaultProbeRate, DefaultProbeBurst, DefaultForwardRate,
// DefaultForwardBurst. A burst must be at least 1 (for forwards, at least
// maxForwardURLs, one full frame).
func RequestLimits(probeRate float64, probeBurst int, forwardRate float64, forwardBurst int) Option {
	return func(c *config) error {
		if probeRate <= 0 || forwardRate <= 0 || probeBurst < 1 || forwardBurst < maxForwardURLs {
			return fmt.Errorf("request limits: rates must be positive, bursts at least 1 and %d", maxForwardURLs)
		}
		c.rateLimits = newRateLimits(probeRate, probeBurst, forwardRate, forwardBurst)
		return nil
	}
}

// rateLimits holds the per-peer buckets of one overlay. Safe for
// concurrent use.
type rateLimits struct {
	probe, forward *peerLimiter
}

func newRateLimits(probeRate float64, probeBurst int, forwardRate float64, forwardBurst int) *rateLimits {
	return &rateLimits{
		probe:   newPeerLimiter(probeRate, float64(probeBurst)),
		forward: newPeerLimiter(forwardRate, float64(forwardBurst)),
	}
}

func defaultRateLimits() *rateLimits {
	return newRateLimits(DefaultProbeRate, DefaultProbeBurst, DefaultForwardRate, DefaultForwardBurst)
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

// limitProbe refuses a probe request from p beyond its budget.
func (o *Overlay) limitProbe(p peer.ID) error {
	if p == o.h.ID() || o.cfg.rateLimits.probe.allow(p, 1) {
		return nil
	}
	return fmt.Errorf("%w: probe rate limit of %g a second reached", ErrOverloaded, o.cfg.rateLimits.probe.rate)
}

// limitForward refuses a forward of n URLs from p beyond its budget.
func (o *Overlay) limitForward(p peer.ID, n int) error {
	if p == o.h.ID() || o.cfg.rateLimits.forward.allow(p, float64(n)) {
		return nil
	}
	return fmt.Errorf("%w: forward rate limit of %g URLs a second reached", ErrOverloaded, o.cfg.rateLimits.forward.rate)
}
