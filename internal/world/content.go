package world

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"html"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// RobotsAgent is the user-agent token the world's robots.txt files name in
// their agent-specific groups, and the agent Page.Disallowed is computed
// for.
const RobotsAgent = "micra"

// RobotsPolicy is what a site's robots.txt says.
type RobotsPolicy uint8

// Robots policies.
const (
	RobotsAllow    RobotsPolicy = iota // everything allowed
	RobotsDisallow                     // a section disallowed for every agent
	RobotsForAgent                     // a section disallowed in a group for RobotsAgent only; a "*" group allows all
	RobotsDelay                        // a Crawl-delay for every agent
	RobotsMissing                      // robots.txt is 404: everything allowed
	RobotsError                        // robots.txt answers 503: nothing may be crawled (RFC 9309 2.3.1.4)
)

var robotsNames = []string{"allow", "disallow", "agent", "delay", "missing", "error"}

// String returns the policy's name as the spec writes it.
func (p RobotsPolicy) String() string {
	if int(p) < len(robotsNames) {
		return robotsNames[p]
	}
	return "robots(" + strconv.Itoa(int(p)) + ")"
}

// MarshalText implements encoding.TextMarshaler.
func (p RobotsPolicy) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (p *RobotsPolicy) UnmarshalText(b []byte) error {
	return unmarshalName(b, robotsNames, (*uint8)(p), "robots policy")
}

// HostileKind is the misbehaviour of a hostile site while the running
// world's hostile mode is on. Off, a hostile site is a normal site.
type HostileKind uint8

// Hostile kinds, assigned in this order to the Params.Hostile sites.
const (
	NotHostile   HostileKind = iota
	SlowDrip                 // every response body trickles one byte per second (unscaled) for up to ten minutes
	HugeBody                 // every page streams a 1 GiB body with no Content-Length
	GzipBomb                 // every page is 1 MiB of gzip that inflates to 1 GiB
	RedirectLoop             // every URL redirects along an endless chain of new URLs, then round a two-URL cycle
	LinkTrap                 // every URL is a page linking to ever deeper, ever new URLs

	// Kinds added later, dealt after the first five (see Params.Hostile).

	HugeHeaders     // every response but robots.txt carries huge headers: 48 KiB on the home page; elsewhere 48 KiB, just under 1 MiB, just over 1 MiB or over 10 MiB
	BadCharset      // pages hold invalid UTF-8 and declare a charset that lies (header, meta or both)
	UnknownEncoding // pages come with a Content-Encoding nobody asked for and nobody knows
	FalseGzip       // pages say Content-Encoding: gzip and are not gzip (plain, or a gzip header before plain bytes)
	HiddenGzip      // pages are gzip-compressed and say Content-Encoding: identity, or nothing

	numHostileKinds = iota - 1
)

var hostileNames = []string{"", "slow-drip", "huge-body", "gzip-bomb", "redirect-loop", "link-trap",
	"huge-headers", "bad-charset", "unknown-encoding", "false-gzip", "hidden-gzip"}

// String returns the kind's name ("" for NotHostile).
func (h HostileKind) String() string {
	if int(h) < len(hostileNames) {
		return hostileNames[h]
	}
	return "hostile(" + strconv.Itoa(int(h)) + ")"
}

// MarshalText implements encoding.TextMarshaler.
func (h HostileKind) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (h *HostileKind) UnmarshalText(b []byte) error {
	return unmarshalName(b, hostileNames, (*uint8)(h), "hostile kind")
}

// Path styles of a site.
const (
	styleHTML  = iota // /garden-1/river-7.html
	styleDirs         // /garden-1/river-7/
	styleQuery        // /index.php?cat=1&page=7
)

// siteRec is one site.
type siteRec struct {
	id      int
	name    string
	aliases []string
	kind    SiteKind
	hostile HostileKind
	org     *org
	hosts   []*host
	loc     int   // of the first address
	block   int   // smallest non-unary block of the first address
	place   Place // a geo world's site's real place (Params.Geo)

	seed       uint64
	pages      int
	branch     int
	style      int
	robots     RobotsPolicy
	crawlDelay int // seconds, unscaled
	section    int // the disallowed section's page, -1 for none
	sitemap    bool
	feeds      bool
	gzip       bool
	validators bool
	flaky      bool
	created    int64 // unix seconds
	topic      []string
	title      string
	schemaType string // of its structured data, "" for none (Params.Structured)
	format     string // of its structured data: FormatJSONLD or FormatMicrodata
}

// initContent draws a site's content parameters from its own stream.
func (w *World) initContent(s *siteRec) {
	p := &w.p
	r := newRNG(w.seed, "site", uint64(s.id))
	s.seed = r.u64()
	sigma := 1.0
	mu := math.Log(float64(p.MeanPages)) - sigma*sigma/2
	s.pages = int(math.Round(math.Exp(mu + sigma*r.norm())))
	s.pages = min(max(s.pages, 1), p.MaxPages)
	s.branch = r.rangeInt(3, 8)
	s.style = r.intn(3)
	s.section = -1
	u := r.float()
	switch {
	case u < p.Disallow:
		s.robots = RobotsDisallow
		if r.chance(0.5) {
			s.robots = RobotsForAgent
		}
	case u < p.Disallow+p.CrawlDelay:
		s.robots = RobotsDelay
		s.crawlDelay = r.rangeInt(1, 10)
	case u < p.Disallow+p.CrawlDelay+p.NoRobots:
		s.robots = RobotsMissing
	case u < p.Disallow+p.CrawlDelay+p.NoRobots+p.RobotsError:
		s.robots = RobotsError
	}
	if (s.robots == RobotsDisallow || s.robots == RobotsForAgent) && s.pages > 1 {
		s.section = r.rangeInt(1, min(s.branch, s.pages-1))
	}
	s.sitemap = r.chance(p.Sitemaps)
	s.feeds = r.chance(p.Feeds)
	s.gzip = r.chance(p.Gzip)
	s.validators = !r.chance(p.NoValidators)
	s.flaky = r.chance(p.Flaky)
	s.created = time.Date(2010, 1, 1, 0, 0, 0, 0, time.UTC).Unix() + int64(r.intn(14*365))*86400
	for range 6 {
		s.topic = append(s.topic, vocabulary[r.intn(len(vocabulary))])
	}
	s.title = title(s.topic[0]) + " " + title(s.topic[1])
	w.initStructured(s)
}

// ---- page tree and paths ----

func (s *siteRec) parent(i int) int {
	if i == 0 {
		return -1
	}
	return (i - 1) / s.branch
}

// children returns the range [lo, hi) of i's children.
func (s *siteRec) children(i int) (int, int) {
	lo := i*s.branch + 1
	hi := min(lo+s.branch, s.pages)
	return min(lo, s.pages), hi
}

func (s *siteRec) depth(i int) int {
	d := 0
	for i > 0 {
		i = s.parent(i)
		d++
	}
	return d
}

func (s *siteRec) slug(i int) string {
	return vocabulary[mix(s.seed, "slug", uint64(i))%uint64(len(vocabulary))] + "-" + strconv.Itoa(i)
}

// path returns page i's canonical path and query.
func (s *siteRec) path(i int) string {
	if i == 0 {
		return "/"
	}
	if s.style == styleQuery {
		return "/index.php?cat=" + strconv.Itoa(s.parent(i)) + "&page=" + strconv.Itoa(i)
	}
	var chain []int
	for j := i; j > 0; j = s.parent(j) {
		chain = append(chain, j)
	}
	var b strings.Builder
	for k := len(chain) - 1; k >= 0; k-- {
		b.WriteByte('/')
		b.WriteString(s.slug(chain[k]))
	}
	if s.style == styleHTML {
		b.WriteString(".html")
	} else {
		b.WriteByte('/')
	}
	return b.String()
}

// page returns the page a request path and query name, if any. Query
// parameters other than those of the query style are ignored, as most
// servers do.
func (s *siteRec) page(path string, q url.Values) (int, bool) {
	if path == "/" || path == "" {
		if s.style != styleQuery || (q.Get("page") == "" && q.Get("cat") == "") {
			return 0, true
		}
	}
	if s.style == styleQuery {
		if path != "/index.php" {
			return 0, false
		}
		n, err := strconv.Atoi(q.Get("page"))
		if err != nil || n < 0 || n >= s.pages {
			return 0, false
		}
		if n == 0 {
			return 0, q.Get("cat") == ""
		}
		if q.Get("cat") != strconv.Itoa(s.parent(n)) {
			return 0, false
		}
		return n, true
	}
	last := path
	if s.style == styleHTML {
		var ok bool
		if last, ok = strings.CutSuffix(path, ".html"); !ok {
			return 0, false
		}
	} else {
		var ok bool
		if last, ok = strings.CutSuffix(path, "/"); !ok {
			return 0, false
		}
	}
	if k := strings.LastIndexByte(last, '-'); k >= 0 {
		last = last[k+1:]
	}
	n, err := strconv.Atoi(last)
	if err != nil || n <= 0 || n >= s.pages {
		return 0, false
	}
	if s.path(n) != path {
		return 0, false
	}
	return n, true
}

// ---- page properties ----

// pageInfo is what a page does over time.
type pageInfo struct {
	period  int64 // seconds between substantive changes; 0 for a static page
	phase   int64 // seconds
	trivial uint8 // 0 none, 1 a request counter, 2 a clock
	status  int   // 200, or 500 for a broken page
}

func (w *World) pageInfo(s *siteRec, i int) pageInfo {
	pi := pageInfo{status: 200}
	h := func(k string) float64 { return unit(mix(s.seed, k, uint64(i))) }
	if h("change") < w.p.ChangeFraction {
		med := w.p.ChangePeriod.Seconds()
		z := math.Sqrt(-2*math.Log(math.Max(h("cz1"), 1e-12))) * math.Cos(2*math.Pi*h("cz2"))
		pi.period = int64(math.Min(math.Max(med*math.Exp(z), 60), 365*86400))
		pi.phase = int64(h("phase") * float64(pi.period))
	}
	if h("trivial") < w.p.Trivial {
		pi.trivial = 1 + uint8(mix(s.seed, "trivkind", uint64(i))%2)
	}
	if i != 0 && h("error") < w.p.ErrorPages {
		pi.status = 500
	}
	return pi
}

// version returns the page's content version at world time now and when
// that version appeared (its Last-Modified).
func (pi pageInfo) version(s *siteRec, now int64) (v, modified int64) {
	if pi.period == 0 || now < s.created {
		return 0, s.created
	}
	v = (now - pi.phase) / pi.period
	modified = pi.phase + v*pi.period
	if modified < s.created {
		return 0, s.created
	}
	return v, modified
}

func (w *World) etag(s *siteRec, i int, v int64) string {
	var b [8]byte
	h := mix(s.seed, "etag", uint64(i), uint64(v))
	for k := range b {
		b[k] = byte(h >> (8 * k))
	}
	return `"` + hex.EncodeToString(b[:]) + `"`
}

// ---- robots.txt ----

// robotsRule is one Allow or Disallow line of the group that applies to
// RobotsAgent.
type robotsRule struct {
	allow   bool
	pattern string
}

// sectionRules returns the robots.txt patterns that disallow the site's
// section: the section page and everything below it (for the query style,
// the section page and its direct children, which name it as cat).
func (s *siteRec) sectionRules() []string {
	if s.section <= 0 {
		return nil
	}
	p := s.path(s.section)
	switch s.style {
	case styleHTML:
		return []string{strings.TrimSuffix(p, ".html")}
	case styleQuery:
		return []string{p + "$", "/index.php?cat=" + strconv.Itoa(s.section) + "&"}
	}
	return []string{p}
}

// robotsTxt returns the body of the site's robots.txt, or "" with the
// status to answer for the missing and error policies.
func (w *World) robotsTxt(s *siteRec, base string) (string, int) {
	var b strings.Builder
	switch s.robots {
	case RobotsMissing:
		return "", 404
	case RobotsError:
		return "", 503
	case RobotsAllow:
		b.WriteString("User-agent: *\nDisallow:\n")
	case RobotsDisallow:
		b.WriteString("# Keep crawlers out of work in progress.\nUser-agent: *\n")
		for _, rule := range s.sectionRules() {
			fmt.Fprintf(&b, "Disallow: %s\n", rule)
		}
		b.WriteString("Disallow: /cgi-bin/\nAllow: /cgi-bin/public/\n")
	case RobotsForAgent:
		fmt.Fprintf(&b, "User-agent: BadBot\nDisallow: /\n\nUser-agent: %s\n", RobotsAgent)
		for _, rule := range s.sectionRules() {
			fmt.Fprintf(&b, "Disallow: %s\n", rule)
		}
		b.WriteString("Disallow: /tmp/\n\nUser-agent: *\nDisallow:\n")
	case RobotsDelay:
		fmt.Fprintf(&b, "User-agent: *\nCrawl-delay: %d\nDisallow: /cgi-bin/\n", s.crawlDelay)
	}
	if s.sitemap {
		fmt.Fprintf(&b, "\nSitemap: %s/sitemap.xml\n", base)
	}
	return b.String(), 200
}

// robotsRules returns the rules that apply to RobotsAgent (nil allows
// everything); disallowAll is true when nothing may be fetched.
func (s *siteRec) robotsRules() (rules []robotsRule, disallowAll bool) {
	switch s.robots {
	case RobotsError:
		return nil, true
	case RobotsDisallow:
		for _, p := range s.sectionRules() {
			rules = append(rules, robotsRule{pattern: p})
		}
		return append(rules, robotsRule{pattern: "/cgi-bin/"}, robotsRule{allow: true, pattern: "/cgi-bin/public/"}), false
	case RobotsForAgent:
		for _, p := range s.sectionRules() {
			rules = append(rules, robotsRule{pattern: p})
		}
		return append(rules, robotsRule{pattern: "/tmp/"}), false
	case RobotsDelay:
		return []robotsRule{{pattern: "/cgi-bin/"}}, false
	}
	return nil, false
}

// disallowed reports whether RobotsAgent may not fetch pathQuery (path
// and query), by RFC 9309: the longest matching rule wins, Allow on ties.
func (s *siteRec) disallowed(pathQuery string) bool {
	rules, all := s.robotsRules()
	if all {
		return pathQuery != "/robots.txt"
	}
	best, allow := -1, true
	for _, r := range rules {
		if matchRobots(r.pattern, pathQuery) && (len(r.pattern) > best || (len(r.pattern) == best && r.allow)) {
			best, allow = len(r.pattern), r.allow
		}
	}
	return !allow
}

// matchRobots matches a robots.txt path pattern with '*' and a final '$'.
func matchRobots(pattern, p string) bool {
	anchored := strings.HasSuffix(pattern, "$")
	pattern = strings.TrimSuffix(pattern, "$")
	parts := strings.Split(pattern, "*")
	if !strings.HasPrefix(p, parts[0]) {
		return false
	}
	rest := p[len(parts[0]):]
	for _, part := range parts[1:] {
		k := strings.Index(rest, part)
		if k < 0 {
			return false
		}
		rest = rest[k+len(part):]
	}
	if anchored && rest != "" {
		if len(parts) == 1 {
			return false
		}
		return strings.HasSuffix(p, parts[len(parts)-1])
	}
	return true
}

// ---- rendering ----

// renderCtx is what rendering one response needs beyond the site.
type renderCtx struct {
	now     int64  // world time, unix seconds
	base    string // "http://name:port"
	port    int
	counter uint64 // requests served by the site so far
}

func (w *World) siteBase(s *siteRec, port int, alias bool) string {
	name := s.name
	if alias && len(s.aliases) > 0 {
		name = s.aliases[0]
	}
	return "http://" + name + ":" + strconv.Itoa(port)
}

// words writes n words of text drawn from the vocabulary with the site's
// topic words favoured, from the stream h.
func (s *siteRec) words(b *bytes.Buffer, h uint64, n int) {
	for k := 0; k < n; k++ {
		h = splitmix(h + uint64(k))
		var word string
		if h%5 == 0 {
			word = s.topic[(h>>8)%uint64(len(s.topic))]
		} else {
			u := unit(h)
			word = vocabulary[int(u*u*float64(len(vocabulary)))]
		}
		if k > 0 {
			b.WriteByte(' ')
		}
		if k == 0 {
			word = title(word)
		}
		b.WriteString(word)
	}
	b.WriteByte('.')
}

// pageTitle returns page i's title.
func (s *siteRec) pageTitle(i int) string {
	if i == 0 {
		return s.title
	}
	h := mix(s.seed, "title", uint64(i))
	a := vocabulary[h%uint64(len(vocabulary))]
	b := vocabulary[(h>>20)%uint64(len(vocabulary))]
	return title(strings.SplitN(s.slug(i), "-", 2)[0]) + " " + a + " " + b
}

// link is one outgoing link of a page.
type link struct {
	href, text string
}

// intraHref formats a link from page from to path target of the same
// site in one of the forms real pages use.
func (s *siteRec) intraHref(from int, target string, base string, h uint64) string {
	switch h % 20 {
	case 0, 1, 2, 3: // absolute
		return base + target
	case 4, 5, 6: // relative to the current directory
		return relPath(s.path(from), target)
	case 7, 8: // with a fragment
		return target + "#" + strconv.Itoa(int(h>>8)%5)
	}
	return target
}

// relPath returns target relative to the directory of from (both absolute
// paths, possibly with queries).
func relPath(from, target string) string {
	fq, _, _ := strings.Cut(from, "?")
	tp, tq, hasQ := strings.Cut(target, "?")
	fromDir := fq[:strings.LastIndexByte(fq, '/')+1]
	fs := strings.Split(strings.Trim(fromDir, "/"), "/")
	if fromDir == "/" {
		fs = nil
	}
	ts := strings.Split(strings.TrimPrefix(tp, "/"), "/")
	k := 0
	for k < len(fs) && k < len(ts)-1 && fs[k] == ts[k] {
		k++
	}
	var b strings.Builder
	for range len(fs) - k {
		b.WriteString("../")
	}
	b.WriteString(strings.Join(ts[k:], "/"))
	if b.Len() == 0 {
		b.WriteString("./")
	}
	if hasQ {
		b.WriteByte('?')
		b.WriteString(tq)
	}
	return b.String()
}

// links returns the outgoing links of page i: the site's sections, the
// page's children and parent, a few other pages of the site, old URLs
// that redirect, broken links, and links to other sites with a
// heavy-tailed count and popular targets favoured.
func (w *World) links(s *siteRec, i int, base string, port int) []link {
	var out []link
	h := mix(s.seed, "links", uint64(i))
	add := func(target int) {
		h = splitmix(h)
		out = append(out, link{href: s.intraHref(i, s.path(target), base, h), text: s.pageTitle(target)})
	}
	lo, hi := s.children(0)
	for c := lo; c < hi; c++ { // the site's sections
		if c != i {
			add(c)
		}
	}
	if p := s.parent(i); p > 0 {
		add(p)
	}
	if i > 0 {
		lo, hi = s.children(i)
		for c := lo; c < hi; c++ {
			add(c)
		}
	}
	if s.pages > 2 {
		for k := int(h % 4); k > 0; k-- {
			h = splitmix(h)
			add(int(h % uint64(s.pages)))
		}
	}
	// Old URLs that redirect to pages of this site.
	for k := range out {
		h = splitmix(h)
		if unit(h) < w.p.Redirects && strings.HasPrefix(out[k].href, "/") && !strings.HasPrefix(out[k].href, "//") {
			hrefPath, frag, _ := strings.Cut(out[k].href, "#")
			_ = frag
			prefix := "/old"
			if h%3 == 0 {
				prefix = "/old/old"
			}
			out[k].href = prefix + hrefPath
		}
	}
	// Links to other sites.
	if len(w.sites) > 1 && w.p.CrossLinks > 0 {
		const alpha = 1.5
		xm := w.p.CrossLinks * (alpha - 1) / alpha
		u := 1 - unit(mix(s.seed, "xdeg", uint64(i)))
		d := int(xm * math.Pow(u, -1/alpha))
		d = min(d, 100)
		for k := 0; k < d; k++ {
			h = splitmix(h)
			t := w.popular(unit(h))
			if t == s {
				continue
			}
			h = splitmix(h)
			tp := 0
			if h%2 == 1 {
				tp = int((h >> 1) % uint64(t.pages))
			}
			href := w.siteBase(t, port, h%10 < 3) + t.path(tp)
			if h%13 == 0 {
				href += sep(href) + "utm_source=" + s.name
			}
			out = append(out, link{href: href, text: t.title + ": " + t.pageTitle(tp)})
		}
	}
	// Broken links, added beside the others: a missing page here, or a
	// host that does not exist.
	for range len(out) {
		h = splitmix(h)
		if unit(h) >= w.p.BrokenLinks {
			continue
		}
		word := vocabulary[(h>>3)%uint64(len(vocabulary))]
		href := "/" + word + "-" + strconv.Itoa(s.pages+int(h>>40)%1000) + ".html"
		if h%2 == 1 {
			href = "http://gone-" + word + strconv.Itoa(int(h>>40)%1000) + ".invalid:" + strconv.Itoa(port) + "/"
		}
		out = append(out, link{href: href, text: title(word)})
	}
	return out
}

func sep(href string) string {
	if strings.Contains(href, "?") {
		return "&"
	}
	return "?"
}

// popular returns a site drawn by the Zipf popularity for u in [0, 1).
func (w *World) popular(u float64) *siteRec {
	k, _ := slices.BinarySearch(w.popCum, u*w.popCum[len(w.popCum)-1])
	k = min(k, len(w.popRank)-1)
	return w.sites[w.popRank[k]]
}

// renderPage writes page i as HTML.
func (w *World) renderPage(b *bytes.Buffer, s *siteRec, i int, rc renderCtx, v int64, pi pageInfo) {
	t := s.pageTitle(i)
	b.WriteString("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>")
	b.WriteString(t)
	if i != 0 {
		b.WriteString(" - ")
		b.WriteString(s.title)
	}
	b.WriteString("</title>\n<meta name=\"description\" content=\"")
	s.words(b, mix(s.seed, "descr", uint64(i)), 12)
	b.WriteString("\">\n")
	if mix(s.seed, "canon", uint64(i))%3 == 0 {
		b.WriteString("<link rel=\"canonical\" href=\"")
		b.WriteString(rc.base + s.path(i))
		b.WriteString("\">\n")
	}
	if i == 0 && s.feeds {
		b.WriteString("<link rel=\"alternate\" type=\"application/rss+xml\" title=\"RSS\" href=\"/feed.xml\">\n")
		b.WriteString("<link rel=\"alternate\" type=\"application/atom+xml\" title=\"Atom\" href=\"/atom.xml\">\n")
	}
	w.theme(b, s)
	var props []prop
	bad, how := false, uint64(0)
	if s.schemaType != "" {
		props = w.schemaProps(s, i, rc.base+s.path(i), rc.base+"/")
		bad, how = s.structuredMalformed(i)
		if s.format == FormatJSONLD {
			writeJSONLD(b, s.schemaType, props, bad, how)
		}
	}
	b.WriteString("</head>\n<body>\n<header><a href=\"/\">")
	b.WriteString(s.title)
	b.WriteString("</a></header>\n<main")
	if s.schemaType != "" && s.format == FormatMicrodata {
		b.WriteString(microdataAttrs(s.schemaType, bad))
		b.WriteString(">\n")
		writeMicrodata(b, props)
	} else {
		b.WriteString(">\n")
	}
	b.WriteString("<h1>")
	b.WriteString(t)
	b.WriteString("</h1>\n")
	np := 3 + int(mix(s.seed, "paras", uint64(i))%4)
	for k := 0; k < np; k++ {
		b.WriteString("<p>")
		// The first paragraphs are stable; the last one changes with
		// each version of a changing page.
		hv := mix(s.seed, "para", uint64(i), uint64(k))
		if k == np-1 && pi.period > 0 {
			hv = mix(s.seed, "para", uint64(i), uint64(k), uint64(v))
		}
		n := 30 + int(hv%60)
		s.words(b, hv, n)
		b.WriteString("</p>\n")
	}
	ls := w.links(s, i, rc.base, rc.port)
	b.WriteString("<ul>\n")
	for _, l := range ls {
		b.WriteString("<li><a href=\"")
		b.WriteString(html.EscapeString(l.href))
		b.WriteString("\">")
		b.WriteString(html.EscapeString(l.text))
		b.WriteString("</a></li>\n")
	}
	b.WriteString("</ul>\n")
	switch pi.trivial {
	case 1:
		fmt.Fprintf(b, "<p class=\"counter\">This site has served %d pages.</p>\n", rc.counter)
	case 2:
		fmt.Fprintf(b, "<p class=\"clock\">Page generated %s.</p>\n", time.Unix(rc.now, 0).UTC().Format(time.RFC1123))
	}
	b.WriteString("</main>\n<footer>&copy; ")
	b.WriteString(strconv.Itoa(time.Unix(s.created, 0).UTC().Year()))
	b.WriteByte(' ')
	if s.org != nil {
		b.WriteString(html.EscapeString(s.org.name))
	}
	b.WriteString(" &middot; <a href=\"mailto:info@")
	b.WriteString(s.name)
	b.WriteString("\">Contact</a> &middot; <a href=\"javascript:void(0)\">Top</a></footer>\n</body>\n</html>\n")
}

// ---- sitemaps and feeds ----

// sitemapPage is the number of URLs per sitemap file when a site's
// sitemap is an index.
const sitemapPage = 100

func (w *World) sitemap(b *bytes.Buffer, s *siteRec, rc renderCtx, part int) bool {
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	if part == 0 && s.pages > 2*sitemapPage {
		b.WriteString(`<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">` + "\n")
		for k := 1; (k-1)*sitemapPage < s.pages; k++ {
			fmt.Fprintf(b, "<sitemap><loc>%s/sitemap-%d.xml</loc></sitemap>\n", rc.base, k)
		}
		b.WriteString("</sitemapindex>\n")
		return true
	}
	lo, hi := 0, s.pages
	if part > 0 {
		lo, hi = (part-1)*sitemapPage, min(part*sitemapPage, s.pages)
		if lo >= s.pages || s.pages <= 2*sitemapPage {
			return false
		}
	}
	b.WriteString(`<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">` + "\n")
	for i := lo; i < hi; i++ {
		pi := w.pageInfo(s, i)
		_, mod := pi.version(s, rc.now)
		freq := "yearly"
		if pi.period > 0 {
			freq = changefreq(pi.period)
		}
		fmt.Fprintf(b, "<url><loc>%s</loc><lastmod>%s</lastmod><changefreq>%s</changefreq></url>\n",
			html.EscapeString(rc.base+s.path(i)), time.Unix(mod, 0).UTC().Format(time.RFC3339), freq)
	}
	b.WriteString("</urlset>\n")
	return true
}

func changefreq(period int64) string {
	switch {
	case period < 3600:
		return "always"
	case period < 86400:
		return "hourly"
	case period < 7*86400:
		return "daily"
	case period < 31*86400:
		return "weekly"
	}
	return "monthly"
}

// feedItems is the number of entries of a feed.
const feedItems = 15

// maxFeedScan bounds the pages a feed looks at.
const maxFeedScan = 2000

// recent returns up to feedItems pages of s, most recently modified first.
func (w *World) recent(s *siteRec, now int64) (pages []int, mods []int64) {
	type pm struct {
		i   int
		mod int64
	}
	var all []pm
	for i := 0; i < min(s.pages, maxFeedScan); i++ {
		_, mod := w.pageInfo(s, i).version(s, now)
		all = append(all, pm{i, mod})
	}
	slices.SortStableFunc(all, func(a, b pm) int {
		switch {
		case a.mod > b.mod:
			return -1
		case a.mod < b.mod:
			return 1
		}
		return a.i - b.i
	})
	for _, x := range all[:min(len(all), feedItems)] {
		pages = append(pages, x.i)
		mods = append(mods, x.mod)
	}
	return pages, mods
}

func (w *World) rss(b *bytes.Buffer, s *siteRec, rc renderCtx) {
	pages, mods := w.recent(s, rc.now)
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n<rss version=\"2.0\">\n<channel>\n")
	fmt.Fprintf(b, "<title>%s</title>\n<link>%s/</link>\n<description>Latest from %s</description>\n", s.title, rc.base, s.title)
	for k, i := range pages {
		fmt.Fprintf(b, "<item><title>%s</title><link>%s</link><guid>%s</guid><pubDate>%s</pubDate><description>",
			s.pageTitle(i), html.EscapeString(rc.base+s.path(i)), html.EscapeString(rc.base+s.path(i)), time.Unix(mods[k], 0).UTC().Format(time.RFC1123Z))
		s.words(b, mix(s.seed, "descr", uint64(i)), 12)
		b.WriteString("</description></item>\n")
	}
	b.WriteString("</channel>\n</rss>\n")
}

func (w *World) atom(b *bytes.Buffer, s *siteRec, rc renderCtx) {
	pages, mods := w.recent(s, rc.now)
	updated := s.created
	if len(mods) > 0 {
		updated = mods[0]
	}
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n<feed xmlns=\"http://www.w3.org/2005/Atom\">\n")
	fmt.Fprintf(b, "<title>%s</title>\n<link href=\"%s/\"/>\n<id>%s/</id>\n<updated>%s</updated>\n",
		s.title, rc.base, rc.base, time.Unix(updated, 0).UTC().Format(time.RFC3339))
	for k, i := range pages {
		u := html.EscapeString(rc.base + s.path(i))
		fmt.Fprintf(b, "<entry><title>%s</title><link href=\"%s\"/><id>%s</id><updated>%s</updated><summary>",
			s.pageTitle(i), u, u, time.Unix(mods[k], 0).UTC().Format(time.RFC3339))
		s.words(b, mix(s.seed, "descr", uint64(i)), 12)
		b.WriteString("</summary></entry>\n")
	}
	b.WriteString("</feed>\n")
}

// theme writes the site's theme into a page's head: what makes real pages
// weigh tens of kilobytes around a few of text (HTML pages weigh about
// 30 KB at the median): inline CSS rules, a script with its configuration,
// and an SVG icon sprite. It is the same on every page of a site, its size
// log-normal over sites around Params.PageWeight, and carries no words a
// crawler should index.
func (w *World) theme(b *bytes.Buffer, s *siteRec) {
	mean := float64(w.p.PageWeight)
	if mean <= 0 {
		return
	}
	h := mix(s.seed, "theme")
	// Log-normal with sigma 0.6 and the given mean.
	u1, u2 := max(unit(splitmix(h)), 1e-12), unit(splitmix(h+1)) // Box-Muller
	z := math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
	size := int(mean * math.Exp(0.6*z-0.18))
	size = min(max(size, 512), 8*int(mean))
	end := b.Len() + size
	b.WriteString("<style>\n")
	for k := uint64(0); b.Len() < end-size*2/5; k++ {
		r := splitmix(h + 0x100 + k)
		fmt.Fprintf(b, ".c%x{margin:%dpx %dpx;padding:%dpx;color:#%06x;background:#%06x;font-size:%d.%dem;border-radius:%dpx}\n",
			r&0xffff, r>>16&31, r>>21&31, r>>26&15, r>>30&0xffffff, r>>34&0xffffff, 1+r>>58&1, r>>59&9, r>>62&7)
	}
	b.WriteString("</style>\n<script>\n")
	fmt.Fprintf(b, "window.__cfg={site:%q,build:\"%x\"};\n", s.name, h)
	for k := uint64(0); b.Len() < end-size/5; k++ {
		r := splitmix(h + 0x10000 + k)
		fmt.Fprintf(b, "function f%x(a,b){var t=a*%d+b^%d;return t>>%d?f%x(t,a):t}\n", r&0xfffff, r>>20&255, r>>28&4095, r>>40&7, r>>44&0xfffff)
	}
	b.WriteString("</script>\n<svg style=\"display:none\">")
	for k := uint64(0); b.Len() < end; k++ {
		r := splitmix(h + 0x1000000 + k)
		fmt.Fprintf(b, "<symbol id=\"i%x\" viewBox=\"0 0 24 24\"><path d=\"M%d %dL%d %dZ\"/></symbol>", r&0xffff, r>>16&23, r>>21&23, r>>26&23, r>>31&23)
	}
	b.WriteString("</svg>\n")
}
