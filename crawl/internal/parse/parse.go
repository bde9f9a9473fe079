package parse

import (
	"bytes"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/html/charset"

	"github.com/micra-net/micra/crawl/internal/structured"
	"github.com/micra-net/micra/crawl/internal/textproc"
	"github.com/micra-net/micra/crawl/internal/urlnorm"
)

// Limits on what one document may produce.
const (
	MaxTitle  = 512     // bytes of title kept
	MaxAnchor = 256     // bytes of anchor text kept per link
	maxDepth  = 512     // element nesting followed
	maxText   = 8 << 20 // bytes of text fed to the keyword builder
)

// Source says where a link was found. Values are stored in records: append
// only.
type Source uint8

// Link sources.
const (
	FromAnchor Source = iota
	FromFrame
	FromAlternate
	FromCanonical
	FromFeed
	FromSitemap
	FromRDF
	FromRedirect
	FromRobots     // a Sitemap line of robots.txt
	FromStructured // an IRI of the page's structured data (schema:url, sameAs, feed items, RDF resources)
)

// Link is an out-link, resolved and normalised.
type Link struct {
	URL     string
	Anchor  string
	Source  Source
	LastMod time.Time // sitemaps and feeds only; zero if unknown
}

// Doc is what parsing extracts from one document.
type Doc struct {
	Type      Type
	Title     string
	Lang      string
	Canonical string // normalised rel=canonical, "" if absent or invalid
	NoIndex   bool   // meta robots or X-Robots-Tag noindex/none
	NoFollow  bool   // meta robots or X-Robots-Tag nofollow/none
	Links     []Link
	Truncated bool // MaxLinks reached
	// Structured is the page's structured data (Options.Structured).
	Structured structured.Result
}

// Options configure a parse.
type Options struct {
	// Agent is the robots product token (lower case), for
	// <meta name="micra"> and agent-specific X-Robots-Tag values.
	Agent string
	// MaxLinks bounds Links; 0 means 10000.
	MaxLinks int
	// XRobotsTag holds the X-Robots-Tag header values.
	XRobotsTag []string
	// Structured turns the page's JSON-LD, microdata, RDFa, feed items
	// and RDF/XML into statements (Doc.Structured), within
	// structured.DefaultLimits, and adds the IRIs they link to as links
	// FromStructured.
	Structured bool
}

// Parse parses body of type t fetched from pageURL (the final URL) with the
// given Content-Type header. Words go to kw, which may be nil. It never
// fails: a broken document yields what could be read.
func Parse(t Type, pageURL, contentType string, body []byte, kw *textproc.Builder, o Options) *Doc {
	if o.MaxLinks <= 0 {
		o.MaxLinks = 10000
	}
	d := &Doc{Type: t}
	base, err := urlnorm.NewBase(pageURL)
	if err != nil {
		return d
	}
	p := &parser{doc: d, base: base, pageURL: pageURL, baseURL: pageURL, kw: kw, opts: o, seen: make(map[string]int)}
	for _, v := range o.XRobotsTag {
		p.robots(v, true)
	}
	switch t {
	case HTML, XHTML:
		p.html(body, contentType)
	case RSS, Atom, RDF, Sitemap, SitemapIndex:
		p.xml(body)
	case Text:
		if kw != nil {
			kw.Add(validUTF8(body, maxText), textproc.Body)
		}
	}
	if d.NoFollow {
		d.Links = d.Links[:0]
	}
	return d
}

type parser struct {
	doc     *Doc
	base    *urlnorm.Base
	pageURL string
	baseURL string // base's URL, for structured data
	kw      *textproc.Builder
	// feed writes an RSS 2.0 or Atom feed's items as statements, and
	// feedLink is its channel's link (Options.Structured).
	feed     *structured.FeedWriter
	feedLink string
	opts     Options
	seen     map[string]int // URL -> index in doc.Links
	text     int            // bytes of text fed to kw
	// resolved caches resolve; "" marks an unusable reference. It is
	// emptied when <base href> replaces base.
	resolved map[string]string
}

// structured keeps what x extracted and links to its IRIs. They come
// after the page's other links, so an IRI that is also an anchor keeps its
// anchor text and source, and MaxLinks bounds them alike.
func (p *parser) structured(x *structured.Extractor) {
	p.doc.Structured = x.Result()
	if len(p.doc.Structured.Statements) == 0 {
		return
	}
	self, _ := p.resolve(p.pageURL) // a feed's channel, a page's own #id
	for _, ref := range structured.Links(p.doc.Structured.Statements) {
		if u, ok := p.resolve(ref); ok && u != self {
			p.link(u, "", FromStructured, zeroTime)
		}
	}
}

func (p *parser) add(s string, f textproc.Field) {
	if p.kw == nil || p.text >= maxText {
		return
	}
	p.text += len(s)
	p.kw.Add(s, f)
}

// link resolves ref and appends it, merging duplicates (anchor texts are
// joined up to MaxAnchor).
func (p *parser) link(ref, anchor string, src Source, lastmod time.Time) {
	if ref == "" {
		return
	}
	u, ok := p.resolve(ref)
	if !ok {
		return
	}
	anchor = clip(collapse(anchor), MaxAnchor)
	if i, ok := p.seen[u]; ok {
		l := &p.doc.Links[i]
		if anchor != "" && !strings.Contains(l.Anchor, anchor) && len(l.Anchor)+len(anchor)+1 <= MaxAnchor {
			if l.Anchor != "" {
				l.Anchor += " "
			}
			l.Anchor += anchor
		}
		return
	}
	if len(p.doc.Links) >= p.opts.MaxLinks {
		p.doc.Truncated = true
		return
	}
	p.seen[u] = len(p.doc.Links)
	p.doc.Links = append(p.doc.Links, Link{URL: u, Anchor: anchor, Source: src, LastMod: lastmod})
}

// maxResolved bounds the per-document cache of resolved references.
const maxResolved = 4096

// resolve resolves and normalises ref against the document's base,
// remembering the answer: pages repeat their navigation links, and WHATWG
// parsing is the dearest step of link extraction. ok is false for unusable
// references.
func (p *parser) resolve(ref string) (string, bool) {
	if u, ok := p.resolved[ref]; ok {
		return u, u != ""
	}
	u, err := p.base.Resolve(ref)
	if err != nil {
		u = ""
	}
	if p.resolved == nil {
		p.resolved = make(map[string]string)
	}
	if len(p.resolved) < maxResolved {
		p.resolved[ref] = u
	}
	return u, u != ""
}

// robots applies a meta robots or X-Robots-Tag value.
func (p *parser) robots(v string, header bool) {
	v = strings.ToLower(v)
	if header {
		// "agent: directives" applies to that agent only.
		if i := strings.IndexByte(v, ':'); i > 0 {
			agent := strings.TrimSpace(v[:i])
			if !strings.ContainsAny(agent, ", ") {
				if agent != p.opts.Agent {
					return
				}
				v = v[i+1:]
			}
		}
	}
	for _, d := range strings.Split(v, ",") {
		switch strings.TrimSpace(d) {
		case "noindex":
			p.doc.NoIndex = true
		case "nofollow":
			p.doc.NoFollow = true
		case "none":
			p.doc.NoIndex, p.doc.NoFollow = true, true
		}
	}
}

func charsetReader(label string, r io.Reader) (io.Reader, error) {
	return charset.NewReaderLabel(label, r)
}

// collapse trims and collapses white space.
func collapse(s string) string {
	if s == "" {
		return s
	}
	return strings.Join(strings.Fields(s), " ")
}

// clip cuts s to at most n bytes on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func validUTF8(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return string(bytes.ToValidUTF8(b, []byte("\uFFFD")))
}

var zeroTime time.Time

func urlnormBase(u string) (*urlnorm.Base, error) { return urlnorm.NewBase(u) }
