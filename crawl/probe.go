package crawl

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"sync"
	"time"
)

// Probe attempts: DefaultProbeAttempts is what IPMicra's delegation asks
// of a node (the least of three HEADs rides out two slow or lost
// requests); MaxProbeAttempts bounds the requests one probe sends a server.
const (
	DefaultProbeAttempts = 3
	MaxProbeAttempts     = 9
)

// ErrProbe: too many attempts of a probe failed for its result to count.
var ErrProbe = errors.New("probe failed")

// Probe measures the round-trip time from the fetcher's source address to
// the server of rawURL, for IPMicra's delegation (a node is asked to probe
// a server; the nearest node crawls it). It sends attempts HTTP HEAD
// requests in turn (at most MaxProbeAttempts; fewer than one means
// DefaultProbeAttempts), each on a fresh connection that passes the egress
// guard like every fetch, and returns the least round-trip time they
// measured. A failed attempt (refused, timed out, reset, forbidden) counts
// as infinitely slow; when at least half of the attempts fail (the median
// would be a failure), Probe fails with an error wrapping ErrProbe and the
// first attempt's error. Any HTTP status is an answer; redirects are not
// followed.
//
// Why the least: a sample is the path's RTT plus delays that only add to
// it: queueing on the path, the server's scheduling, and the prober's own
// machine scheduling its goroutines (a volunteer's busy machine; in tests,
// a dozen nodes and the emulated Internet on two shared cores). The
// minimum of a few samples is the usual low-noise estimate of a path's RTT
// (TCP's min RTT, Vivaldi's and Pyxida's low-percentile filters). The median
// used before rides out one delayed sample, not a burst that delays two:
// the swarm test saw 83, 63 and 99 ms on a 51 ms path. On the emulated
// Internet, whose per-request jitter is symmetric around the mean RTT, the
// minimum reads low by about 0.85 of the path's jitter deviation, yet ranks
// nodes as well as the median does (README, "Delegation in the overlay").
//
// What one attempt measures: half the time from the start of the TCP
// connect to the first response byte; DNS and TLS are excluded. On a real
// network that is the handshake's RTT and the request's, plus the client's
// and server's delays. The emulated Internet (internal/world) completes
// the handshake at once and answers a connection's first request two RTTs
// after it accepted the connection, so the sum is again two RTTs plus
// delays. Either way a delay can only lengthen a sample, which the minimum
// needs: the window used before (the connect plus the request from its
// last byte written) left out the client's delay between the two, and on
// the emulated Internet, where the server's clock starts at the accept,
// that made a sample read short. Every attempt uses a fresh connection so
// that it includes a handshake.
func (f *Fetcher) Probe(ctx context.Context, rawURL string, attempts int) (time.Duration, error) {
	rtt, _, err := f.ProbeAddr(ctx, rawURL, attempts)
	return rtt, err
}

// ProbeAddr is Probe, and returns the server address the least round-trip
// time was measured to as well: the name resolved by the probe's own dial,
// so that a caller need not resolve it again.
func (f *Fetcher) ProbeAddr(ctx context.Context, rawURL string, attempts int) (time.Duration, netip.Addr, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return 0, netip.Addr{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return 0, netip.Addr{}, fmt.Errorf("%w: %q", ErrScheme, u.Scheme)
	}
	if attempts < 1 {
		attempts = DefaultProbeAttempts
	}
	attempts = min(attempts, MaxProbeAttempts)
	best, failed := time.Duration(-1), 0
	var at netip.Addr
	var first error
	for range attempts {
		if err := ctx.Err(); err != nil {
			return 0, netip.Addr{}, err
		}
		rtt, a, err := f.probeOnce(ctx, u)
		if err != nil {
			if ctx.Err() != nil {
				return 0, netip.Addr{}, ctx.Err()
			}
			if first == nil {
				first = err
			}
			failed++
			continue
		}
		if best < 0 || rtt < best {
			best, at = rtt, a
		}
	}
	if failed >= attempts-attempts/2 {
		return 0, netip.Addr{}, fmt.Errorf("%w: %d of %d attempts failed: %w", ErrProbe, failed, attempts, first)
	}
	return best, at, nil
}

// probeOnce sends one HEAD on a fresh connection and returns half the time
// from the start of the TCP connect (timed by the fetcher's dial, after the
// name's resolution) to the first response byte, and the address dialled.
func (f *Fetcher) probeOnce(ctx context.Context, u *url.URL) (time.Duration, netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.connectTO+f.cfg.headerTO)
	defer cancel()
	tm := &Timing{Start: time.Now()}
	var mu sync.Mutex // the hook runs on the transport's goroutines
	var first time.Time
	var remote netip.Addr
	ctx = context.WithValue(ctx, timingKey, tm)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(ci httptrace.GotConnInfo) {
			if ap, err := netip.ParseAddrPort(ci.Conn.RemoteAddr().String()); err == nil {
				mu.Lock()
				remote = ap.Addr().Unmap()
				mu.Unlock()
			}
		},
		GotFirstResponseByte: func() {
			mu.Lock()
			first = time.Now()
			mu.Unlock()
		},
	})
	hr, err := http.NewRequestWithContext(ctx, http.MethodHead, u.String(), nil)
	if err != nil {
		return 0, netip.Addr{}, fmt.Errorf("building request: %w", err)
	}
	hr.Header.Set("User-Agent", f.cfg.userAgent())
	hr.Close = true
	resp, err := f.probe.Do(hr)
	if err != nil {
		return 0, netip.Addr{}, fmt.Errorf("probing %s: %w", u.Redacted(), unwrapURLError(err))
	}
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	tm.mu.Lock()
	start := tm.connStart
	tm.mu.Unlock()
	if start.IsZero() || first.IsZero() || first.Before(start) {
		return 0, netip.Addr{}, fmt.Errorf("probing %s: no timing", u.Redacted())
	}
	return first.Sub(start) / 2, remote, nil
}

// RTT estimates the round-trip time to the server from the fetch's last
// request, as Probe measures it: on a reused connection the time to the
// first response byte; on a fresh one half of that time once DNS and TLS
// are taken out (the connect and the request, one RTT each on a real
// network; two RTTs charged to the first response on the emulated
// Internet). It is what calibration compares across fetches of a page.
func (t *Timing) RTT() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.Reused {
		return t.TTFB
	}
	return max(t.TTFB-t.DNS-t.TLS, 0) / 2
}
