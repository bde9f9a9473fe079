package crawl

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"sync"
	"time"
)

// Probe attempts: DefaultProbeAttempts is what IPMicra's delegation asks
// of a node (the median of three HEADs rides out one slow or lost
// request); MaxProbeAttempts bounds the requests one probe sends a server.
const (
	DefaultProbeAttempts = 3
	MaxProbeAttempts     = 9
)

// ErrProbe: too many attempts of a probe failed for a median to exist.
var ErrProbe = errors.New("probe failed")

// Probe measures the round-trip time from the fetcher's source address to
// the server of rawURL, for IPMicra's delegation (a node is asked to probe
// a server; the nearest node crawls it). It sends attempts HTTP HEAD
// requests in turn (at most MaxProbeAttempts; fewer than one means
// DefaultProbeAttempts), each on a fresh connection that passes the egress
// guard like every fetch, and returns the median. A failed attempt
// (refused, timed out, reset, forbidden) counts as infinitely slow; when
// the median is a failure, Probe fails with an error wrapping ErrProbe and
// the first attempt's error. Any HTTP status is an answer; redirects are
// not followed.
//
// What one attempt measures: half of the TCP connect plus the request's
// round trip (request written to the first response byte); DNS and TLS
// are excluded. On a real network the connect takes one RTT and the
// request one more. The emulated Internet (internal/world) completes the
// handshake at once and charges its RTT to the first response of a
// connection, so there too the sum is two RTTs. Either way the probe reads
// one RTT, which is why every attempt uses a fresh connection.
func (f *Fetcher) Probe(ctx context.Context, rawURL string, attempts int) (time.Duration, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return 0, fmt.Errorf("%w: %q", ErrScheme, u.Scheme)
	}
	if attempts < 1 {
		attempts = DefaultProbeAttempts
	}
	attempts = min(attempts, MaxProbeAttempts)
	const failed = time.Duration(1<<63 - 1)
	samples := make([]time.Duration, 0, attempts)
	var first error
	for range attempts {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		rtt, err := f.probeOnce(ctx, u)
		if err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			if first == nil {
				first = err
			}
			rtt = failed
		}
		samples = append(samples, rtt)
	}
	slices.Sort(samples)
	med := samples[len(samples)/2]
	if med == failed {
		return 0, fmt.Errorf("%w: %d of %d attempts failed: %w", ErrProbe, countFailed(samples, failed), attempts, first)
	}
	return med, nil
}

func countFailed(s []time.Duration, failed time.Duration) int {
	n := 0
	for _, d := range s {
		if d == failed {
			n++
		}
	}
	return n
}

// probeOnce sends one HEAD on a fresh connection and returns half of the
// connect plus the request's round trip. The connect is timed by the
// fetcher's dial (the TCP connect alone, not the name's resolution).
func (f *Fetcher) probeOnce(ctx context.Context, u *url.URL) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.connectTO+f.cfg.headerTO)
	defer cancel()
	tm := &Timing{Start: time.Now()}
	var mu sync.Mutex // the hooks run on the transport's goroutines
	var wrote, first time.Time
	ctx = context.WithValue(ctx, timingKey, tm)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) {
			mu.Lock()
			wrote = time.Now()
			mu.Unlock()
		},
		GotFirstResponseByte: func() {
			mu.Lock()
			first = time.Now()
			mu.Unlock()
		},
	})
	hr, err := http.NewRequestWithContext(ctx, http.MethodHead, u.String(), nil)
	if err != nil {
		return 0, fmt.Errorf("building request: %w", err)
	}
	hr.Header.Set("User-Agent", f.cfg.userAgent())
	hr.Close = true
	resp, err := f.probe.Do(hr)
	if err != nil {
		return 0, fmt.Errorf("probing %s: %w", u.Redacted(), unwrapURLError(err))
	}
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if wrote.IsZero() || first.IsZero() || first.Before(wrote) {
		return 0, fmt.Errorf("probing %s: no timing", u.Redacted())
	}
	tm.mu.Lock()
	connect := tm.Connect
	tm.mu.Unlock()
	return (first.Sub(wrote) + connect) / 2, nil
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
