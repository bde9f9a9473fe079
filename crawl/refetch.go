package crawl

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/micra-net/micra/crawl/internal/textproc"
	"github.com/micra-net/micra/crawl/internal/urlnorm"
)

// Observation is what one fresh fetch of a page shows, in the terms of the
// Record the crawler would make of it: what an audit compares with another
// node's record of the page.
type Observation struct {
	URL      string // as requested, normalised
	FinalURL string // after same-host redirects
	Time     time.Time
	Status   int
	Type     DocType
	// Fingerprint is the SimHash the crawler's pipeline computes for the
	// body (Record.Fingerprint); 0 when the status is not 2xx or the type
	// is not parsed.
	Fingerprint uint64
	Size        int64 // decoded body bytes
	Truncated   bool
	// NoIndex: the page asks not to be indexed (robots meta or
	// X-Robots-Tag), so the crawler would make no record of it.
	NoIndex bool
}

// maxRefetchWait bounds how long Refetch waits for the server's turn under
// the crawler's politeness (another request to it in flight, its delay).
const maxRefetchWait = 30 * time.Second

// Refetch fetches rawURL once, as the crawler would — the egress guard,
// robots.txt, one request at a time and the minimum delay per server
// address, same-host redirects only, the body caps and the bandwidth
// meter — and analyses the body with the crawler's own pipeline, but
// neither queues the URL nor makes a record: a node audits another node's
// record of the page with it (overlay's audit protocol). It waits for the
// server's turn at most until ctx ends or 30 s, and for the bandwidth
// meter likewise (ErrTransferCap beyond). It fails with ErrRobotsDisallowed when robots.txt
// forbids the page, ErrBadRequest for a URL that is not http(s), and the
// fetcher's errors otherwise. Safe for concurrent use; it does not count in
// Stats.
func (c *Crawler) Refetch(ctx context.Context, rawURL string) (Observation, error) {
	u, err := urlnorm.Parse(rawURL)
	if err != nil {
		return Observation{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel) // Close aborts it
	defer stop()
	if at := c.meter.wait(time.Now()); time.Until(at) > maxRefetchWait {
		return Observation{}, fmt.Errorf("%w until %s", ErrTransferCap, at.Format(time.RFC3339))
	} else if err := c.waitUntil(ctx, at); err != nil {
		return Observation{}, err
	}
	addrs, err := c.fetch.Resolve(ctx, u.Hostname())
	if err != nil {
		return Observation{}, err
	}
	addr := addrs[0]
	deadline := time.Now().Add(maxRefetchWait)
	acquire := func() error {
		for {
			at, ok := c.polite.acquire(addr, time.Now())
			if ok {
				return nil
			}
			if at.After(deadline) {
				return fmt.Errorf("refetch %s: server %s busy past %s: %w", u.Host, addr, maxRefetchWait, context.DeadlineExceeded)
			}
			if err := c.waitUntil(ctx, at); err != nil {
				return err
			}
		}
	}
	if err := acquire(); err != nil {
		return Observation{}, err
	}
	rules, _, fetched, err := c.robots.rules(ctx, u)
	if err != nil {
		c.polite.release(addr, time.Now())
		return Observation{}, err
	}
	if fetched && c.cfg.minDelay > 0 {
		// robots.txt was just fetched from the server: the page waits for
		// the server's delay like any next request.
		c.polite.release(addr, time.Now().Add(c.hostDelay(rules.CrawlDelay, nil, u.Host)))
		if err := acquire(); err != nil {
			return Observation{}, err
		}
	}
	if !rules.Allowed(u.RequestURI()) {
		c.polite.release(addr, time.Now().Add(c.cfg.minDelay))
		return Observation{}, fmt.Errorf("%w: %s", ErrRobotsDisallowed, u)
	}
	req := FetchRequest{URL: u, Addr: addr, SkipBody: skipBody, RedirectDelay: c.cfg.minDelay,
		CheckRedirect: func(_ context.Context, next *url.URL) error {
			if !strings.EqualFold(next.Host, u.Host) || next.Scheme != u.Scheme {
				return errOffHost
			}
			if !rules.Allowed(next.RequestURI()) {
				return ErrRobotsDisallowed
			}
			return nil
		}}
	res, err := c.fetch.Fetch(ctx, req)
	now := time.Now()
	var wire int64
	if res != nil {
		wire = res.WireBytes
	}
	c.meter.charge(wire+512, now)
	c.polite.release(addr, now.Add(c.hostDelay(rules.CrawlDelay, timingOf(res), u.Host)))
	switch {
	case err == nil, errors.Is(err, ErrBodyTooLarge):
	case errors.Is(err, ErrRedirectRefused) && res != nil:
		// An off-host redirect: the status says what the page is.
	default:
		return Observation{}, err
	}
	obs := Observation{URL: u.String(), FinalURL: res.URL.String(), Time: now, Status: res.Status,
		Size: int64(len(res.Body)), Truncated: res.Truncated}
	if res.Status >= 200 && res.Status < 300 {
		kw := textproc.NewBuilder()
		a := c.analyse(res, kw)
		obs.Type, obs.Size, obs.Truncated = DocType(a.typ), a.size, a.truncated
		obs.NoIndex = a.doc != nil && a.doc.NoIndex
		if a.typ.Parsed() {
			obs.Fingerprint = kw.SimHash()
		}
	}
	return obs, nil
}

// waitUntil sleeps until t, returning early with ctx's error.
func (c *Crawler) waitUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// FingerprintDistance is the number of differing bits of two record
// fingerprints (64-bit SimHash): 0 for the same weighted stems, a few for
// a trivial edit, about 32 for unrelated pages.
func FingerprintDistance(a, b uint64) int { return textproc.Hamming(a, b) }
