package crawl

import (
	"errors"
	"mime"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// The dispatcher: hosts whose turn has come, under the operator's windows,
// the bandwidth caps, the hold check and per-address politeness, go to the
// fetchers.

// revisitPoll is how often due revisits are moved into the queues.
const revisitPoll = 30 * time.Second

// dispatch hands ready hosts to fetchers, honouring operator windows,
// bandwidth caps and per-address politeness.
func (c *Crawler) dispatch() {
	lastRevisit := time.Time{}
	for c.ctx.Err() == nil {
		now := time.Now()
		if !c.sched.open(now) {
			next := c.sched.nextOpen(now)
			c.log.Info("outside crawl window; holding", "until", next)
			for time.Now().Before(next) && c.sleep(next) {
			}
			continue
		}
		if at := c.meter.wait(now); !at.IsZero() {
			c.sleep(at)
			continue
		}
		if c.held() != nil {
			c.sleep(now.Add(holdPoll))
			continue
		}
		if now.Sub(lastRevisit) >= revisitPoll {
			lastRevisit = now
			if n, err := c.front.dueRevisits(now, 1000); err != nil {
				c.log.Error("moving revisits failed", "error", err)
			} else if n > 0 {
				c.log.Debug("revisits queued", "count", n)
			}
		}
		l, wait, err := c.front.next(now)
		if err != nil {
			c.log.Error("frontier failed", "error", err)
			c.sleep(now.Add(time.Second))
			continue
		}
		if l == nil {
			if wait.IsZero() || wait.After(now.Add(revisitPoll)) {
				wait = now.Add(revisitPoll)
			}
			c.sleep(wait)
			continue
		}
		u, err := url.Parse(l.entry.URL)
		if err != nil {
			c.finish(l, false, now)
			continue
		}
		addrs, err := c.fetch.Resolve(c.ctx, u.Hostname())
		if err != nil {
			if c.ctx.Err() != nil {
				c.putBack(l, now)
				return
			}
			c.log.Debug("host not fetchable", "host", l.host, "error", err)
			c.stats.fetchErrors.Add(1)
			if errors.Is(err, ErrForbiddenDestination) {
				// Only special-purpose addresses: retrying cannot help,
				// and a hostile page could keep the queues full of them.
				c.stats.dropped.Add(1)
				c.finish(l, false, now.Add(c.cfg.minDelay))
				continue
			}
			c.retryOrDrop(l, now, c.backoff(l.entry.Attempts))
			continue
		}
		addr := addrs[0]
		if c.disown != nil && c.disown.Disowned(addr, queuedAt(l.entry)) {
			c.handOff(l, addr, now)
			continue
		}
		if at, ok := c.polite.acquire(addr, now); !ok {
			c.putBack(l, at)
			continue
		}
		c.begin(l.host)
		select {
		case c.work <- &job{l: l, u: u, addr: addr}:
		case <-c.ctx.Done():
			c.end(l.host)
			c.polite.release(addr, now)
			c.putBack(l, now)
			return
		}
	}
}

// queuedAt is when e entered this node's queue, as Disowner.Disowned takes
// it: zero for a revisit, which this node scheduled itself (Added is when
// it came due). A request kept again after a hand-off (Keep) is marked
// Revisit too: it was this node's before, and goes again if its address
// is disowned again.
func queuedAt(e entry) time.Time {
	if e.Revisit {
		return time.Time{}
	}
	return e.Added
}

// handOffRetry is how long a request this node no longer crawls stays in
// its host's queue when the outgoing store is full, before the dispatcher
// tries to hand it off again: long enough not to spin on the store, short
// against the node's hand-on rounds that make room in it.
const handOffRetry = 5 * time.Second

// handOff moves a leased request whose address the Disowner disowned to
// the outgoing store, in the transaction that takes it out of its host's
// queue, and wakes the node's forwarder, which finds its owner. Nothing
// was sent to the host, so the host is ready again at once. If the store
// is full the request stays queued and its host waits handOffRetry.
func (c *Crawler) handOff(l *lease, addr netip.Addr, now time.Time) {
	e := l.entry
	o := Outlink{
		Request: Request{Link: e.URL, ParentLink: e.Parent, Depth: e.Depth, Owners: e.Owners},
		Addr:    addr.Unmap(), hops: e.Hops, again: true,
	}
	stored, err := c.front.handOff(l, o, now, now.Add(handOffRetry))
	switch {
	case err != nil:
		c.log.Error("frontier failed", "error", err)
	case stored:
		c.stats.handedOff.Add(1)
		c.outFull.Store(false)
		c.log.Debug("request handed off", "host", l.host, "url", e.URL)
		c.wakeOut()
	case !c.outFull.Swap(true):
		c.log.Warn("outgoing store full; requests for other nodes stay queued", "cap", c.cfg.outCap)
	}
	c.poke()
}

// putBack returns a lease unused; its host is ready again at t. At
// shutdown this keeps the host from waiting for the lease to expire after
// a restart. It wakes the dispatcher, which may be sleeping until the
// lease's expiry (a fetcher puts a page back after fetching its host's
// robots.txt).
func (c *Crawler) putBack(l *lease, t time.Time) {
	if err := c.front.putBack(l, t); err != nil {
		c.log.Error("frontier failed", "error", err)
	}
	c.poke()
}

func (c *Crawler) backoff(attempts int) time.Duration {
	d := time.Minute << min(attempts, 10)
	return min(d, c.cfg.maxBackoff)
}

func (c *Crawler) finish(l *lease, retry bool, readyAt time.Time) {
	if err := c.front.finish(l, retry, readyAt); err != nil {
		c.log.Error("frontier failed", "error", err)
	}
	c.poke()
}

// retryOrDrop requeues a failed request with backoff, or drops it after
// maxAttempts.
func (c *Crawler) retryOrDrop(l *lease, now time.Time, backoff time.Duration) {
	retry := l.entry.Attempts+1 < c.cfg.maxAttempts
	if !retry {
		c.stats.dropped.Add(1)
		backoff = c.cfg.minDelay
	}
	c.finish(l, retry, now.Add(backoff))
}

// hostDelay is the pause after a fetch from a host: the minimum delay, the
// robots.txt Crawl-delay (capped) and, when politeness is on, twice the
// server's last response time.
func (c *Crawler) hostDelay(crawlDelay time.Duration, t *Timing, host string) time.Duration {
	d := c.cfg.minDelay
	if crawlDelay > c.cfg.maxCrawlDelay {
		c.log.Debug("crawl-delay capped", "host", host, "delay", crawlDelay, "cap", c.cfg.maxCrawlDelay)
		crawlDelay = c.cfg.maxCrawlDelay
	}
	d = max(d, crawlDelay)
	if c.cfg.minDelay > 0 && t != nil {
		d = max(d, min(2*t.Total, c.cfg.maxCrawlDelay))
	}
	return d
}

// skipBody avoids downloading media that is never parsed.
func skipBody(_ int, h http.Header) bool {
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	for _, p := range []string{"image/", "audio/", "video/", "font/", "model/"} {
		if strings.HasPrefix(mt, p) {
			return true
		}
	}
	switch mt {
	case "application/pdf", "application/zip", "application/x-tar", "application/x-7z-compressed",
		"application/vnd.rar", "application/x-rar-compressed", "application/wasm", "application/java-archive",
		"application/x-msdownload", "application/vnd.android.package-archive", "application/x-iso9660-image":
		return true
	}
	return false
}
