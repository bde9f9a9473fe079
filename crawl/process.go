package crawl

import (
	"net/http"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/micra-net/micra/crawl/internal/parse"
	"github.com/micra-net/micra/crawl/internal/textproc"
)

// The processing stage: detect, transform, index; the page's new state,
// record and links stored in one transaction.

// processor detects, transforms, indexes and extracts fetched pages.
func (c *Crawler) processor() {
	kw := textproc.NewBuilder()
	for j := range c.fetched {
		c.process(j, kw)
		c.end(j.l.host)
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
		if j.seen && st.Visits > 0 && bodyHash == st.BodyHash && indexedBefore && !e.Record {
			break // identical bytes: nothing to do
		}
		a := c.analyse(res, kw)
		doc := a.doc
		size, truncated = a.size, a.truncated
		links = doc.Links
		if doc.NoIndex {
			if indexedBefore {
				rec = mk(ChangeGone)
			}
			break
		}
		r := mk(ChangeNew)
		digest = c.fill(r, a, kw)
		c.stats.statements.Add(int64(len(r.Statements)))
		c.stats.structuredBad.Add(int64(doc.Structured.Malformed))
		switch {
		case !indexedBefore:
			rec = r
		case digest != st.Digest:
			r.Change = ChangeModified
			rec, changed = r, true
		case e.Record:
			rec = r // unchanged, for a requester that lacks the record
		}
	}
	var raw []byte
	if rec != nil {
		if raw = appendRecord(nil, rec); len(raw) > maxRecordBytes {
			c.stats.dropped.Add(1)
			raw, rec = nil, nil
		}
	}
	// Remember the page, schedule its revisit, keep its record until it is
	// delivered and its links for other nodes until they are handed on, in
	// one transaction with the end of its request: a crash before leaves
	// the request queued, after it the record pending and the links stored.
	local, localURLs, out := c.route(j, links)
	interval := c.nextInterval(st, changed || (rec != nil && rec.Change == ChangeModified), now)
	revisit := entry{URL: e.URL, Depth: e.Depth, Hops: e.Hops, Owners: e.Owners}
	key, stored, err := c.front.complete(j.l, func(p *pageState) {
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
	}, now.Add(interval), &revisit, raw, out)
	if err != nil {
		c.log.Error("frontier failed", "error", err)
	}
	c.storedOut(len(out), stored)
	if rec != nil {
		pr := pendingRecord{raw: raw, key: key, time: now}
		select {
		case c.records <- pr:
		case <-c.ctx.Done():
			// Shutting down: the batcher still drains records.
			c.records <- pr
		}
	}
	c.queueLocal(local, localURLs)
}

// fill sets what a record says of its page from the page's analysis a,
// whose keywords are in kw, and returns the page's change digest.
func (c *Crawler) fill(r *Record, a analysis, kw *textproc.Builder) (digest uint64) {
	doc := a.doc
	r.Type, r.Title, r.Lang, r.Canonical = DocType(a.typ), doc.Title, doc.Lang, doc.Canonical
	top := kw.Top(keywordBudget(a.size, c.cfg.maxKeywords))
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
	if a.typ.Parsed() {
		r.Fingerprint = kw.SimHash()
	}
	r.Statements = fromStructured(doc.Structured.Statements)
	digest = textproc.Digest(r.Title, top, urls)
	if len(r.Statements) > 0 {
		// Structured data that changed is a change an indexer stores (a
		// price, an event's date); a page without any keeps the digest
		// it had before statements existed.
		digest ^= statementsDigest(r.Statements)
	}
	return digest
}

// A record keeps at most one keyword per bytesPerKeyword bytes of its
// page (decoded), and never fewer than minKeywords: the heaviest of a
// page's vocabulary, so that a record stays near a twentieth of its page
// (a keyword costs about 4 bytes in a compressed batch, and links, URLs
// and the title take a quarter of a record). Large pages keep their whole
// vocabulary up to MaxKeywords; small, dense ones (a manual's page of one
// function) lose their lightest words, which cost the search evaluation
// nothing measurable (docs/search-quality.md).
const (
	bytesPerKeyword = 100
	minKeywords     = 64
)

// keywordBudget is how many keywords the record of a page of size bytes
// keeps, at most limit.
func keywordBudget(size int64, limit int) int {
	return int(min(int64(limit), max(minKeywords, size/bytesPerKeyword)))
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
		Structured: c.cfg.structured,
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
