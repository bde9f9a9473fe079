package crawl

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/micra-net/micra/crawl/internal/parse"
	"github.com/micra-net/micra/crawl/internal/robots"
	"github.com/micra-net/micra/crawl/internal/urlnorm"
)

// The fetch stage: robots.txt, the fetch and its redirects, for one leased
// request at a time per fetcher.

// fetcher runs robots checks and fetches for leased hosts.
func (c *Crawler) fetcher() {
	for {
		var j *job
		select {
		case <-c.ctx.Done():
			return
		case j = <-c.work:
		}
		if !c.fetchOne(j) {
			c.end(j.l.host)
		}
	}
}

// fetchOne fetches the page of j and reports whether it went on to the
// processors.
func (c *Crawler) fetchOne(j *job) bool {
	l := j.l
	rules, fresh, fetched, err := c.robots.rules(c.ctx, j.u)
	if err != nil {
		c.polite.release(j.addr, time.Now())
		c.finish(l, true, time.Now()) // shutting down; retried after restart
		return false
	}
	if fresh && len(rules.Sitemaps) > 0 {
		c.addSitemaps(j, rules.Sitemaps)
	}
	if fetched && c.cfg.minDelay > 0 {
		// robots.txt was just fetched from the server: the page waits for
		// the host's delay like any next request would.
		now := time.Now()
		at := now.Add(c.hostDelay(rules.CrawlDelay, nil, l.host))
		c.polite.release(j.addr, at)
		c.putBack(l, at)
		return false
	}
	pq := j.u.RequestURI()
	if !rules.Allowed(pq) {
		c.stats.robotsDenied.Add(1)
		now := time.Now()
		c.polite.release(j.addr, now.Add(c.cfg.minDelay))
		c.finish(l, false, now.Add(c.cfg.minDelay))
		return false
	}
	res, err := c.fetch.Fetch(c.ctx, c.request(j, rules))
	if res != nil && len(res.Redirects) > 0 {
		c.markRedirects(res)
	}
	now := time.Now()
	var wire int64
	if res != nil {
		wire = res.WireBytes
	}
	c.meter.charge(wire+512, now)
	c.stats.wireBytes.Add(wire)
	delay := c.hostDelay(rules.CrawlDelay, timingOf(res), l.host)
	c.polite.release(j.addr, now.Add(delay))
	if c.ctx.Err() != nil && err != nil {
		// Aborted by Close: keep it queued. A page that arrived whole
		// is processed below even when Close has begun: the server
		// has served it, and fetching it again after a restart would
		// cost the site a second request.
		c.finish(l, true, now)
		return false
	}
	if !usable(res, err) {
		c.fetchFailed(l, err, now, delay)
		return false
	}
	if c.cfg.calib != nil && res != nil && res.Timing != nil {
		if s, slow := c.cfg.calib.Observe(l.entry.URL, res.Timing.Remote.Addr(), res.Timing.RTT()); slow {
			c.cfg.onSlow(s)
		}
	}
	if res.Status == http.StatusTooManyRequests || res.Status == http.StatusServiceUnavailable {
		wait, ok := RetryAfter(res.Header.Get("Retry-After"), now)
		if !ok {
			wait = c.backoff(l.entry.Attempts)
		}
		wait = min(max(wait, delay), c.cfg.maxBackoff)
		c.log.Debug("server asks to back off", "host", l.host, "status", res.Status, "wait", wait)
		c.retryOrDrop(l, now, wait)
		return false
	}
	c.stats.fetched.Add(1)
	j.res = res
	// The host may go on; the request stays queued until its processing
	// is complete, so that a crash before that fetches it again.
	if err := c.front.fetched(l, now.Add(delay)); err != nil {
		c.log.Error("frontier failed", "error", err)
	}
	c.poke()
	// Blocks while processors are busy: back-pressure. Processors run until
	// every fetcher has returned, so this cannot deadlock at shutdown and a
	// fetched page is always processed.
	c.fetched <- j
	return true
}

// addSitemaps routes the sitemaps a fresh robots.txt lists: the site's own
// lists of URLs, link sources like any page's.
func (c *Crawler) addSitemaps(j *job, sitemaps []string) {
	links := make([]parse.Link, len(sitemaps))
	for i, s := range sitemaps {
		links[i] = parse.Link{URL: s, Source: parse.FromRobots}
	}
	local, urls, out := c.route(j, links)
	stored, err := c.front.addOut(out)
	if err != nil {
		c.log.Error("frontier failed", "error", err)
	}
	c.storedOut(len(out), stored)
	c.queueLocal(local, urls)
}

// request is the fetch of j, conditional when the page was fetched
// before, and notes the URL's frontier state in j. Same-host redirects to
// URLs not seen before are followed (robots-checked); others become links,
// which the seen test then drops or queues.
func (c *Crawler) request(j *job, rules *robots.Rules) FetchRequest {
	l := j.l
	st, seen, err := c.front.state(l.entry.URL)
	if err != nil {
		c.log.Error("frontier failed", "error", err)
	}
	j.st, j.seen = st, seen
	req := FetchRequest{URL: j.u, Addr: j.addr, SkipBody: skipBody, RedirectDelay: c.cfg.minDelay}
	if seen && st.Visits > 0 && !l.entry.Record {
		req.ETag, req.LastModified = st.ETag, st.LastModified
	}
	req.CheckRedirect = func(_ context.Context, next *url.URL) error {
		if !strings.EqualFold(next.Host, j.u.Host) || next.Scheme != j.u.Scheme {
			return errOffHost
		}
		if !rules.Allowed(next.RequestURI()) {
			return ErrRobotsDisallowed
		}
		if c.front.known(redirectKey(next)) {
			return errSeenTarget
		}
		return nil
	}
	return req
}

// usable reports whether a fetch's outcome is processed: a whole response,
// one cut at the body size limit or by the total timeout (what arrived is
// kept), or an off-host redirect (its target goes to extraction as a link).
func usable(res *Response, err error) bool {
	switch {
	case err == nil, errors.Is(err, ErrBodyTooLarge):
		return true
	case errors.Is(err, context.DeadlineExceeded) && res != nil && res.Truncated && len(res.Body) > 0:
		return true
	case errors.Is(err, ErrRedirectRefused) && res != nil && len(res.Header.Get("Location")) > 0:
		return true
	}
	return false
}

// fetchFailed counts a failed fetch and retries it later or drops it.
// Verdicts on the address or on the response's form are dropped at once
// (counted in FetchErrors and Dropped): the same request would get the
// same answer.
func (c *Crawler) fetchFailed(l *lease, err error, now time.Time, delay time.Duration) {
	c.stats.fetchErrors.Add(1)
	c.log.Debug("fetch failed", "url", l.entry.URL, "error", err)
	if errors.Is(err, ErrForbiddenDestination) || errors.Is(err, ErrTooManyRedirects) || errors.Is(err, ErrContentEncoding) ||
		errors.Is(err, ErrHeaderTooLarge) || errors.Is(err, ErrScheme) {
		c.stats.dropped.Add(1)
		c.finish(l, false, now.Add(delay))
		return
	}
	c.retryOrDrop(l, now, max(delay, c.backoff(l.entry.Attempts)))
}

var (
	errOffHost    = errors.New("redirect leaves the host")
	errSeenTarget = errors.New("redirect to a known url")
)

// redirectKey is the seen-set key of a redirect target: its normalised
// form, as links are keyed; "" if it does not normalise.
func redirectKey(u *url.URL) string {
	n, err := urlnorm.Parse(u.String())
	if err != nil {
		return ""
	}
	return n.String()
}

// markRedirects puts the hops of res's redirect chain that answered with
// another redirect into the seen set, so that a chain is followed once:
// another URL redirecting into it stops at the first known hop
// (errSeenTarget) and costs one request. Without this a redirect loop
// cost every URL that leads into it 1 + MaxRedirects requests: a world
// redirect-loop site linked by 18 URLs saw 1 + 18 × 6 = 109 requests. The
// hop that answered with content is kept out: it is a page that is also
// crawled under its own URL; so is a hop that never answered (the fetch
// failed on its way there), which must not pass for known.
func (c *Crawler) markRedirects(res *Response) {
	// res.URL is the last hop that answered, with res.Status; the hops
	// before it answered with redirects.
	n := 0
	for i, h := range res.Redirects {
		if h == res.URL {
			n = i
			if isRedirect(res.Status) {
				n++
			}
			break
		}
	}
	hops := res.Redirects[:n]
	keys := make([]string, 0, len(hops))
	for _, h := range hops {
		if k := redirectKey(h); k != "" {
			keys = append(keys, k)
		}
	}
	if err := c.front.markSeen(keys); err != nil {
		c.log.Error("frontier failed", "error", err)
	}
}

func timingOf(r *Response) *Timing {
	if r == nil {
		return nil
	}
	return r.Timing
}
