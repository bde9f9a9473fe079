package crawl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/dgraph-io/badger/v4"
	"github.com/micra-net/micra/crawl/internal/parse"
	"github.com/micra-net/micra/crawl/internal/textproc"
	"github.com/micra-net/micra/crawl/internal/urlnorm"
)

// DefaultDepth in a Request means "use the crawler's MaxDepth".
const DefaultDepth = -1

// Request is a runtime crawl request, as in WebRACE: fetch Link (found on
// ParentLink, "" for seeds), follow its links Depth hops further, on behalf
// of Owners. The node submits seeds and URLs forwarded by other nodes; the
// crawler hands URLs of other nodes' subnets to Sink.Forward in this form.
type Request struct {
	Link       string
	ParentLink string
	Depth      int
	Owners     []string
}

// Router decides whether a discovered URL belongs to this node's subnets.
// addr is the address the URL's host resolved to. Route is called from
// several goroutines and must be safe for concurrent use; an error drops the
// URL.
type Router interface {
	Route(ctx context.Context, u *url.URL, addr netip.Addr) (local bool, err error)
}

// Sink receives the crawler's output. Each method is called from a single
// goroutine, never concurrently with itself.
type Sink interface {
	// Results receives a sealed batch of records. On error the crawler
	// retries the same batch with backoff, so a node should store the batch
	// in its outbox and return nil.
	Results(ctx context.Context, b Batch) error
	// Forward receives URLs that belong to other nodes. On error the URLs
	// are retried twice, then dropped with a warning.
	Forward(ctx context.Context, reqs []Request) error
}

// Stats are cumulative counters since New, and the current size of the
// queues.
type Stats struct {
	Fetched, NotModified, FetchErrors, RobotsDenied int64
	Records, Batches, Forwarded, Dropped            int64
	WireBytes, RecordBytes                          int64

	// Queued is the number of requests waiting in the host queues, those
	// being fetched or processed included; it survives restarts.
	Queued int64
	// Hosts is the number of hosts in the ready index: hosts with queued
	// requests (a host whose queue ran empty leaves at its next turn).
	Hosts int64
	// HostsReady is the number of those hosts that politeness lets the
	// crawler fetch from now.
	HostsReady int64
	// InFlight is the number of requests taken from the queues and not yet
	// done: being fetched, waiting for a processor or being processed.
	// Queued == 0 && InFlight == 0 means the crawler is idle.
	InFlight int64
}

type stats struct {
	fetched, notModified, fetchErrors, robotsDenied atomic.Int64
	records, batches, forwarded, dropped            atomic.Int64
	wireBytes, recordBytes                          atomic.Int64
	inFlight                                        atomic.Int64
}

// Crawler crawls the URLs submitted to it and those it discovers that the
// Router keeps local, politely and persistently: fetch → detect →
// transform → index → extract, with bounded queues between the stages.
//
// New starts it; Close stops it. All methods are safe for concurrent use.
type Crawler struct {
	cfg    *config
	db     *badger.DB
	sink   Sink
	fetch  *Fetcher
	front  *frontier
	robots *robotsCache
	polite *politeness
	meter  *meter
	sched  schedule
	log    *slog.Logger
	stats  stats

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // dispatcher and fetchers
	pwg    sync.WaitGroup // processors
	owg    sync.WaitGroup // batcher and forwarder

	work    chan *job
	fetched chan *job
	records chan pendingRecord
	forward chan Request
	wake    chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// job is one URL moving through the pipeline.
type job struct {
	l    *lease
	u    *url.URL
	addr netip.Addr
	res  *Response
	st   pageState
	seen bool
}

// New opens the crawler's state in db (under KeyPrefix) and starts
// crawling. db stays owned by the caller and must outlive Close.
func New(db *badger.DB, sink Sink, opts ...Option) (*Crawler, error) {
	if db == nil || sink == nil {
		return nil, errors.New("crawl: db and sink are required")
	}
	cfg := defaults()
	for _, o := range opts {
		if err := o(cfg); err != nil {
			return nil, err
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var err error
	c := &Crawler{
		cfg: cfg, db: db, sink: sink, log: cfg.logger,
		fetch:   newFetcher(cfg),
		polite:  newPoliteness(cfg.perHost),
		meter:   &meter{rate: float64(cfg.bwCap), daily: cfg.dailyCap, loc: cfg.location},
		sched:   schedule{windows: cfg.windows, loc: cfg.location},
		work:    make(chan *job),
		fetched: make(chan *job, cfg.queueSize),
		records: make(chan pendingRecord, cfg.queueSize),
		forward: make(chan Request, cfg.queueSize*8),
		wake:    make(chan struct{}, 1),
	}
	c.robots = newRobotsCache(db, c.fetch, cfg.product, cfg.robotsTTL, cfg.minDelay, c.log)
	// A host that had a request in flight when the process died is ready
	// again after its delay from now, as after any request of it.
	c.front, err = openFrontier(db, cfg.expectedURLs, 2*cfg.fetchTO+time.Minute, cfg.perHost, func(host string) time.Duration {
		return c.hostDelay(c.robots.storedCrawlDelay(host), nil, host)
	})
	if err != nil {
		return nil, err
	}
	_ = db.View(func(txn *badger.Txn) error {
		if it, err := txn.Get(keyTraffic); err == nil {
			_ = it.Value(func(v []byte) error { return c.meter.restore(v) })
		}
		return nil
	})
	// Records made before a crash (or a shutdown whose last delivery
	// failed) and not delivered: they go out first.
	var carried []pendingRecord
	if err := c.front.pendingRecords(func(k, v []byte) bool {
		carried = append(carried, pendingRecord{raw: v, key: k, time: time.Now()})
		return true
	}); err != nil {
		return nil, fmt.Errorf("loading pending records: %w", err)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Go(c.dispatch)
	for range cfg.workers {
		c.wg.Go(c.fetcher)
	}
	for range cfg.procWorkers {
		c.pwg.Go(c.processor)
	}
	c.owg.Go(func() { c.batcher(carried) })
	c.owg.Go(c.forwarder)
	c.log.Info("crawler started", "workers", cfg.workers, "agent", cfg.userAgent())
	return c, nil
}

// Close stops dispatching, aborts fetches in flight (they are retried after
// a restart), lets the processors finish what was fetched, flushes the last
// batch and forwarded URLs to the sink (waiting up to 10 s; records the sink
// did not take stay in the DB and go out after the next New), and saves the
// frontier's Bloom filter. It does not close the DB. Safe to call more than
// once; later calls return the first result.
func (c *Crawler) Close() error {
	c.closeOnce.Do(func() {
		c.cancel()
		c.wg.Wait()
		close(c.fetched)
		c.pwg.Wait()
		close(c.records)
		close(c.forward)
		c.owg.Wait()
		err := c.front.close()
		err = errors.Join(err, c.db.Update(func(txn *badger.Txn) error {
			return txn.Set(keyTraffic, c.meter.state())
		}))
		c.closeErr = errors.Join(err, c.fetch.Close())
		c.log.Info("crawler stopped")
	})
	return c.closeErr
}

// Stats returns the counters and queue sizes. Counting HostsReady reads the
// ready index up to the first host that is not ready, so the cost of a call
// grows with the number of ready hosts (a key-only scan); the other figures
// are kept counts.
func (c *Crawler) Stats() Stats {
	s := &c.stats
	st := Stats{
		Fetched: s.fetched.Load(), NotModified: s.notModified.Load(), FetchErrors: s.fetchErrors.Load(),
		RobotsDenied: s.robotsDenied.Load(), Records: s.records.Load(), Batches: s.batches.Load(),
		Forwarded: s.forwarded.Load(), Dropped: s.dropped.Load(), WireBytes: s.wireBytes.Load(),
		RecordBytes: s.recordBytes.Load(), InFlight: s.inFlight.Load(),
	}
	st.Queued, st.Hosts = c.front.counts()
	if n, err := c.front.readyHosts(time.Now()); err == nil {
		st.HostsReady = n
	}
	return st
}

// Fetcher returns the crawler's fetcher, so that the node can probe with
// the same egress guard, source address and timing.
func (c *Crawler) Fetcher() *Fetcher { return c.fetch }

// Submit queues runtime crawl requests. Links are normalised; a link that
// was crawled before is queued again (the fetch is conditional). Submit
// does not consult the Router: the node routes before submitting.
func (c *Crawler) Submit(ctx context.Context, reqs ...Request) error {
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	var errs []error
	for _, r := range reqs {
		if err := ctx.Err(); err != nil {
			return err
		}
		u, err := urlnorm.Parse(r.Link)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %q: %w", ErrBadRequest, r.Link, err))
			continue
		}
		d := r.Depth
		if d < 0 {
			d = c.cfg.maxDepth
		}
		if len(r.Owners) > maxRecOwners {
			errs = append(errs, fmt.Errorf("%w: %d owners", ErrBadRequest, len(r.Owners)))
			continue
		}
		e := entry{URL: u.String(), Parent: r.ParentLink, Depth: d, Owners: r.Owners}
		if _, err := c.front.add(e, u, true, time.Now()); err != nil {
			return err
		}
	}
	c.poke()
	return errors.Join(errs...)
}

func (c *Crawler) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// sleep waits until t, a wake-up or shutdown; false on shutdown.
func (c *Crawler) sleep(t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return c.ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-c.ctx.Done():
		return false
	case <-c.wake:
		return true
	case <-tm.C:
		return true
	}
}

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
		if at, ok := c.polite.acquire(addr, now); !ok {
			c.putBack(l, at)
			continue
		}
		c.stats.inFlight.Add(1)
		select {
		case c.work <- &job{l: l, u: u, addr: addr}:
		case <-c.ctx.Done():
			c.stats.inFlight.Add(-1)
			c.polite.release(addr, now)
			c.putBack(l, now)
			return
		}
	}
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
			c.stats.inFlight.Add(-1)
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
		// The site's own lists of URLs: link sources like any page's.
		links := make([]parse.Link, len(rules.Sitemaps))
		for i, s := range rules.Sitemaps {
			links[i] = parse.Link{URL: s, Source: parse.FromRobots}
		}
		c.extract(j, links)
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
	st, seen, err := c.front.state(l.entry.URL)
	if err != nil {
		c.log.Error("frontier failed", "error", err)
	}
	j.st, j.seen = st, seen
	req := FetchRequest{URL: j.u, Addr: j.addr, SkipBody: skipBody, RedirectDelay: c.cfg.minDelay}
	if seen && st.Visits > 0 {
		req.ETag, req.LastModified = st.ETag, st.LastModified
	}
	// Same-host redirects to URLs not seen before are followed
	// (robots-checked); others become links, which the seen test then
	// drops or queues.
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
	res, err := c.fetch.Fetch(c.ctx, req)
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
	switch {
	case err == nil, errors.Is(err, ErrBodyTooLarge):
	case errors.Is(err, context.DeadlineExceeded) && res != nil && res.Truncated && len(res.Body) > 0:
		// The total timeout cut a slow body: keep what arrived.
	case errors.Is(err, ErrRedirectRefused) && res != nil && len(res.Header.Get("Location")) > 0:
		// An off-host redirect: hand the target to extraction as a link.
	default:
		c.stats.fetchErrors.Add(1)
		c.log.Debug("fetch failed", "url", l.entry.URL, "error", err)
		// Verdicts on the address or on the response's form: the same
		// request would get the same answer, so it is dropped at once
		// (counted in FetchErrors and Dropped) rather than retried.
		if errors.Is(err, ErrForbiddenDestination) || errors.Is(err, ErrTooManyRedirects) || errors.Is(err, ErrContentEncoding) ||
			errors.Is(err, ErrHeaderTooLarge) || errors.Is(err, ErrScheme) {
			c.stats.dropped.Add(1)
			c.finish(l, false, now.Add(delay))
			return false
		}
		c.retryOrDrop(l, now, max(delay, c.backoff(l.entry.Attempts)))
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

// processor detects, transforms, indexes and extracts fetched pages.
func (c *Crawler) processor() {
	kw := textproc.NewBuilder()
	for j := range c.fetched {
		c.process(j, kw)
		c.stats.inFlight.Add(-1)
	}
}

func (c *Crawler) process(j *job, kw *textproc.Builder) {
	res, e := j.res, j.l.entry
	now := time.Now()
	st := j.st
	var rec *Record
	var links []parse.Link
	changed := false
	indexedBefore := st.Indexed
	timing := FetchTiming{}
	if t := res.Timing; t != nil {
		t.mu.Lock()
		timing = FetchTiming{DNS: t.DNS, Connect: t.Connect, TTFB: t.TTFB, Total: t.Total}
		t.mu.Unlock()
	}
	size, truncated := int64(len(res.Body)), res.Truncated
	mk := func(kind ChangeKind) *Record {
		return &Record{URL: e.URL, FinalURL: res.URL.String(), Time: now, Status: res.Status, Change: kind, Timing: timing, Owners: e.Owners, Size: size, Truncated: truncated}
	}
	var digest, bodyHash uint64
	switch {
	case res.NotModified():
		c.stats.notModified.Add(1)
	case res.Status >= 300 && res.Status < 400:
		if loc, err := res.URL.Parse(res.Header.Get("Location")); err == nil && loc.Host != "" {
			links = append(links, parse.Link{URL: loc.String(), Source: parse.FromRedirect})
		}
	case res.Status == http.StatusNotFound || res.Status == http.StatusGone:
		if indexedBefore {
			rec = mk(ChangeGone)
		}
	case res.Status >= 200 && res.Status < 300:
		bodyHash = xxhash.Sum64(res.Body)
		if j.seen && st.Visits > 0 && bodyHash == st.BodyHash && indexedBefore {
			break // identical bytes: nothing to do
		}
		a := c.analyse(res, kw)
		typ, doc := a.typ, a.doc
		size, truncated = a.size, a.truncated
		links = doc.Links
		if doc.NoIndex {
			if indexedBefore {
				rec = mk(ChangeGone)
			}
			break
		}
		r := mk(ChangeNew)
		r.Type, r.Title, r.Lang, r.Canonical = DocType(typ), doc.Title, doc.Lang, doc.Canonical
		top := kw.Top(c.cfg.maxKeywords)
		r.Keywords = make([]Keyword, len(top))
		for i, k := range top {
			r.Keywords[i] = Keyword(k)
		}
		urls := make([]string, len(doc.Links))
		r.Links = make([]Link, len(doc.Links))
		for i, l := range doc.Links {
			r.Links[i] = Link{URL: l.URL, Anchor: l.Anchor}
			urls[i] = l.URL
		}
		if typ.Parsed() {
			r.Fingerprint = kw.SimHash()
		}
		digest = textproc.Digest(r.Title, top, urls)
		switch {
		case !indexedBefore:
			rec = r
		case digest != st.Digest:
			r.Change = ChangeModified
			rec, changed = r, true
		}
	}
	var raw []byte
	if rec != nil {
		if raw = appendRecord(nil, rec); len(raw) > maxRecordBytes {
			c.stats.dropped.Add(1)
			raw, rec = nil, nil
		}
	}
	// Remember the page, schedule its revisit and keep its record until it
	// is delivered, in one transaction with the end of its request: a
	// crash before leaves the request queued, after it the record pending.
	interval := c.nextInterval(st, changed || (rec != nil && rec.Change == ChangeModified), now)
	revisit := entry{URL: e.URL, Depth: e.Depth, Hops: e.Hops, Owners: e.Owners}
	key, err := c.front.complete(j.l, func(p *pageState) {
		if p.FirstVisit.IsZero() {
			p.FirstVisit = now
		}
		p.Visits++
		p.LastVisit = now
		p.Interval = interval
		if changed {
			p.Changes++
		}
		if res.Status >= 200 && res.Status < 300 {
			p.ETag, p.LastModified = res.Header.Get("ETag"), res.Header.Get("Last-Modified")
			p.BodyHash = bodyHash
		}
		if rec != nil {
			switch rec.Change {
			case ChangeNew, ChangeModified:
				p.Indexed, p.Digest = true, digest
			case ChangeGone:
				p.Indexed, p.Digest = false, 0
			}
		}
	}, now.Add(interval), &revisit, raw)
	if err != nil {
		c.log.Error("frontier failed", "error", err)
	}
	if rec != nil {
		pr := pendingRecord{raw: raw, key: key, time: now}
		select {
		case c.records <- pr:
		case <-c.ctx.Done():
			// Shutting down: the batcher still drains records.
			c.records <- pr
		}
	}
	c.extract(j, links)
}

// analysis is what the pipeline reads from a 2xx response's body.
type analysis struct {
	typ       parse.Type
	doc       *parse.Doc // its keywords are in the Builder
	size      int64      // decoded body bytes (inside a gzip file, for sitemap.xml.gz)
	truncated bool
}

// analyse detects, parses and indexes the body of res into kw (reset
// first): the one place that turns a body into keywords and links, shared
// by the crawl and Refetch so that an audit computes what a record holds.
func (c *Crawler) analyse(res *Response, kw *textproc.Builder) analysis {
	body, ctype, path := res.Body, res.Header.Get("Content-Type"), res.URL.Path
	a := analysis{size: int64(len(body)), truncated: res.Truncated}
	if gz, ok := unpackGzip(ctype, path, body, c.cfg.maxDecoded); ok {
		// sitemap.xml.gz and the like, or a page compressed with no
		// Content-Encoding to say so: the document is inside.
		body, ctype, path = gz.body, gz.ctype, gz.path
		a.size, a.truncated = int64(len(body)), a.truncated || gz.truncated
	}
	a.typ = parse.Detect(ctype, path, body)
	kw.Reset()
	a.doc = parse.Parse(a.typ, res.URL.String(), ctype, body, kw, parse.Options{
		Agent: c.cfg.product, MaxLinks: c.cfg.maxLinks, XRobotsTag: res.Header.Values("X-Robots-Tag"),
	})
	return a
}

// pendingRecord is an encoded record on its way to a batch, with its
// pending key (nil if it could not be stored) to delete once the batch is
// delivered.
type pendingRecord struct {
	raw  []byte
	key  []byte
	time time.Time
}

// nextInterval adapts the revisit interval to the page's observed change
// rate: the Cho–Garcia-Molina estimator over visits and detected changes,
// growing at most twofold per unchanged visit and halving on a change.
func (c *Crawler) nextInterval(st pageState, changed bool, now time.Time) time.Duration {
	cur := st.Interval
	if cur == 0 {
		return c.cfg.revisitMin * 4
	}
	var next time.Duration
	if changed {
		next = cur / 2
	} else {
		next = cur * 2
		n, x := float64(st.Visits+1), float64(st.Changes)
		span := now.Sub(st.FirstVisit)
		if x > 0 && span > 0 {
			// λ ≈ -ln((n - X + 0.5)/(n + 0.5)) / (span/n)
			lambda := -logf((n-x+0.5)/(n+0.5)) / (span.Seconds() / n)
			if lambda > 0 {
				next = min(next, time.Duration(float64(time.Second)/lambda))
			}
		}
	}
	return min(max(next, c.cfg.revisitMin), c.cfg.revisitMax)
}

// extract routes the links of a page: local ones into the frontier, in
// one batch, others to the forwarder. Links found in the page go one hop
// deeper and only while the page has depth left; a redirect target keeps
// the page's depth; a sitemap named by robots.txt gets at least depth 1, so
// that the URLs it lists are fetched.
func (c *Crawler) extract(j *job, links []parse.Link) {
	e := j.l.entry
	if len(links) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), 30*time.Second)
	defer cancel()
	var local []entry
	var localURLs []*url.URL
	for _, l := range links {
		depth := e.Depth - 1
		switch l.Source {
		case parse.FromRedirect:
			depth = e.Depth
		case parse.FromRobots:
			depth = max(e.Depth, 1)
		}
		if depth < 0 {
			continue
		}
		var u *url.URL
		var err error
		if l.Source == parse.FromRedirect || l.Source == parse.FromRobots {
			u, err = urlnorm.Parse(l.URL)
		} else {
			// The parser resolved and normalised it already.
			u, err = url.Parse(l.URL)
		}
		if err != nil {
			continue
		}
		// Keyed by net/url's form, as Submit and revisits key it.
		child := entry{URL: u.String(), Parent: e.URL, Depth: depth, Hops: e.Hops + 1, Owners: e.Owners}
		isLocal := strings.EqualFold(u.Host, j.u.Host)
		if !isLocal {
			addrs, err := c.fetch.Resolve(ctx, u.Hostname())
			if err != nil {
				c.stats.dropped.Add(1)
				continue
			}
			isLocal = c.cfg.router == nil
			if c.cfg.router != nil {
				isLocal, err = c.cfg.router.Route(ctx, u, addrs[0])
				if err != nil {
					c.stats.dropped.Add(1)
					continue
				}
			}
		}
		if !isLocal {
			select {
			case c.forward <- Request{Link: child.URL, ParentLink: child.Parent, Depth: child.Depth, Owners: child.Owners}:
			case <-ctx.Done():
				return
			}
			continue
		}
		local = append(local, child)
		localURLs = append(localURLs, u)
	}
	if len(local) == 0 {
		return
	}
	if _, err := c.front.addBatch(local, localURLs, false, time.Now()); err != nil {
		c.log.Error("frontier failed", "error", err)
		return
	}
	c.poke()
}

// batcher groups records into batches by size and age and hands them to
// the sink, carried (records pending from an earlier run) first. Once the
// sink has a batch, its records' pending keys are deleted.
func (c *Crawler) batcher(carried []pendingRecord) {
	var raw []byte
	var keys [][]byte
	var n int
	var oldest time.Time
	tick := time.NewTicker(min(c.cfg.batchAge/4+time.Millisecond, time.Second))
	defer tick.Stop()
	flush := func(final bool) {
		if n == 0 {
			return
		}
		b := sealBatch(raw, n, oldest)
		if c.deliver(b, final) {
			if err := c.front.deletePending(keys); err != nil {
				c.log.Error("frontier failed", "error", err)
			}
		}
		raw, keys, n, oldest = nil, nil, 0, time.Time{}
	}
	add := func(r pendingRecord) {
		if n > 0 && len(raw)+len(r.raw)+10 > c.cfg.batchBytes {
			flush(false)
		}
		raw = appendUvarint(raw, uint64(len(r.raw)))
		raw = append(raw, r.raw...)
		if r.key != nil {
			keys = append(keys, r.key)
		}
		if n == 0 {
			oldest = r.time
		}
		n++
		c.stats.records.Add(1)
		if len(raw) >= c.cfg.batchBytes {
			flush(false)
		}
	}
	for _, r := range carried {
		add(r)
	}
	for {
		select {
		case r, ok := <-c.records:
			if !ok {
				flush(true)
				return
			}
			add(r)
		case <-tick.C:
			if n > 0 && time.Since(oldest) >= c.cfg.batchAge {
				flush(false)
			}
		}
	}
}

// deliver hands b to the sink, retrying with backoff; false if it could
// not before shutdown (its records stay pending for the next start).
func (c *Crawler) deliver(b Batch, final bool) bool {
	ctx := c.ctx
	if final || ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
	}
	for attempt := 0; ; attempt++ {
		err := c.sink.Results(ctx, b)
		if err == nil {
			c.stats.batches.Add(1)
			c.stats.recordBytes.Add(int64(len(b.Data)))
			return true
		}
		if ctx.Err() != nil {
			c.log.Warn("result batch not delivered at shutdown; kept for the next start", "records", b.Records, "error", err)
			return false
		}
		c.log.Warn("sink refused batch; retrying", "error", err, "attempt", attempt)
		select {
		case <-time.After(min(time.Second<<min(attempt, 6), time.Minute)):
		case <-ctx.Done():
		}
	}
}

// forwarder groups URLs for other nodes and hands them to the sink.
func (c *Crawler) forwarder() {
	var batch []Request
	var first time.Time
	tick := time.NewTicker(min(c.cfg.forwardAge/4+time.Millisecond, time.Second))
	defer tick.Stop()
	flush := func(final bool) {
		if len(batch) == 0 {
			return
		}
		ctx := c.ctx
		if final || ctx.Err() != nil {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
		}
		for attempt := range 3 {
			if err := c.sink.Forward(ctx, batch); err == nil {
				c.stats.forwarded.Add(int64(len(batch)))
				batch = nil
				return
			} else if attempt == 2 || ctx.Err() != nil {
				c.log.Warn("forwarding failed; URLs dropped", "count", len(batch), "error", err)
				c.stats.dropped.Add(int64(len(batch)))
				batch = nil
				return
			}
			select {
			case <-time.After(time.Second << attempt):
			case <-ctx.Done():
			}
		}
	}
	for {
		select {
		case r, ok := <-c.forward:
			if !ok {
				flush(true)
				return
			}
			if len(batch) == 0 {
				first = time.Now()
			}
			batch = append(batch, r)
			if len(batch) >= c.cfg.forwardBatch {
				flush(false)
			}
		case <-tick.C:
			if len(batch) > 0 && time.Since(first) >= c.cfg.forwardAge {
				flush(false)
			}
		}
	}
}
