package parse

import (
	"bytes"
	"encoding/xml"
	"maps"
	"strings"
	"time"

	"golang.org/x/net/html"

	"github.com/micra-net/micra/crawl/internal/structured"
	"github.com/micra-net/micra/crawl/internal/textproc"
)

// maxXMLTokens bounds the tokens read from one XML document.
const maxXMLTokens = 4 << 20

// item collects one feed item or sitemap entry.
type item struct {
	link, title, text string
	lastmod           time.Time
}

// xml reads RSS (0.9x, 1.0 and 2.0), Atom, generic RDF/XML and sitemaps
// with one streaming decoder, dispatching on the element path.
func (p *parser) xml(body []byte) {
	d := xml.NewDecoder(bytes.NewReader(body))
	d.Strict = false
	d.Entity = xml.HTMLEntity
	d.CharsetReader = charsetReader
	var stack []string
	var cur *item
	var text strings.Builder
	itemName := map[Type]string{RSS: "item", RDF: "item", Atom: "entry", Sitemap: "url", SitemapIndex: "sitemap"}[p.doc.Type]
	var sx *structured.Extractor
	var rx *structured.RDFXMLReader
	if p.opts.Structured && (p.doc.Type == RSS || p.doc.Type == Atom || p.doc.Type == RDF) {
		sx = structured.New(p.baseURL, structured.Limits{})
		defer func() {
			if rx != nil {
				rx.Close()
			}
			if p.feed != nil {
				p.feed.Close(p.doc.Title, p.feedLink)
			}
			p.structured(sx)
		}()
	}
	for range maxXMLTokens {
		tok, err := d.Token()
		if err != nil {
			break
		}
		if sx != nil && rx == nil && p.feed == nil {
			// The root decides: RDF/XML (RSS 1.0 included) is read as
			// RDF; RSS 2.0 and Atom items are written as RSS 1.0's.
			if se, ok := tok.(xml.StartElement); ok {
				if p.doc.Type == RDF || (se.Name.Space == nsRDF && se.Name.Local == "RDF") {
					rx = sx.RDFXML()
				} else {
					p.feed = sx.Feed()
				}
			}
		}
		if rx != nil {
			rx.Token(tok)
		}
		switch t := tok.(type) {
		case xml.Directive:
			// <!DOCTYPE rdf:RDF [<!ENTITY rdf "…#">]>: the entities that
			// RDF Schemas and OWL ontologies write their IRIs with.
			if ents := structured.Entities(t); ents != nil {
				m := maps.Clone(xml.HTMLEntity)
				maps.Copy(m, ents)
				d.Entity = m
			}
		case xml.StartElement:
			if len(stack) >= maxDepth {
				return
			}
			name := strings.ToLower(t.Name.Local)
			stack = append(stack, name)
			text.Reset()
			if name == itemName && cur == nil {
				cur = &item{}
			} else if name == "link" {
				p.atomLink(t, cur)
			}
			if p.doc.Type == RDF || p.doc.Type == RSS {
				p.rdfLinks(t, cur)
			}
		case xml.CharData:
			if text.Len() < 64<<10 {
				text.Write(t)
			}
		case xml.EndElement:
			if len(stack) == 0 {
				continue
			}
			name := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			v := strings.TrimSpace(text.String())
			text.Reset()
			p.xmlEnd(name, v, cur, len(stack))
			if name == itemName && cur != nil {
				p.flushItem(cur)
				cur = nil
			}
		}
	}
	if cur != nil {
		p.flushItem(cur)
	}
}

// atomLink takes Atom's <link rel="alternate" href="..."/>: an item's
// first is its link; outside items, the feed's.
func (p *parser) atomLink(t xml.StartElement, cur *item) {
	href, rel := "", "alternate"
	for _, a := range t.Attr {
		switch strings.ToLower(a.Name.Local) {
		case "href":
			href = a.Value
		case "rel":
			rel = strings.ToLower(a.Value)
		}
	}
	if href == "" || rel != "alternate" {
		return
	}
	if cur != nil {
		if cur.link == "" {
			cur.link = href
		}
	} else if p.doc.Type == Atom {
		p.link(href, "", FromFeed, zeroTime)
		if p.feedLink == "" {
			p.feedLink = href
		}
	}
}

// rdfLinks takes the rdf:about and rdf:resource attributes of an RSS 1.0
// or RDF element: an item's about is its link; in RDF, the others are links.
func (p *parser) rdfLinks(t xml.StartElement, cur *item) {
	for _, a := range t.Attr {
		if a.Name.Space != nsRDF || (a.Name.Local != "about" && a.Name.Local != "resource") {
			continue
		}
		if cur != nil && a.Name.Local == "about" && cur.link == "" {
			cur.link = a.Value
		} else if p.doc.Type == RDF {
			p.link(a.Value, "", FromRDF, zeroTime)
		}
	}
}

func (p *parser) xmlEnd(name, v string, cur *item, depth int) {
	if v == "" {
		return
	}
	if cur == nil {
		switch name {
		case "title":
			if p.doc.Title == "" && depth <= 2 {
				p.doc.Title = clip(collapse(v), MaxTitle)
				p.add(p.doc.Title, textproc.Title)
			}
		case "description", "subtitle", "tagline":
			p.add(stripTags(v), textproc.Meta)
		case "link":
			if p.doc.Type == RSS {
				p.link(v, "", FromFeed, zeroTime)
				if p.feedLink == "" {
					p.feedLink = v
				}
			}
		}
		return
	}
	switch name {
	case "loc", "link":
		cur.link = v
	case "guid", "id":
		if cur.link == "" && strings.HasPrefix(v, "http") {
			cur.link = v
		}
	case "title":
		cur.title = v
	case "description", "summary", "content", "encoded":
		if cur.text == "" {
			cur.text = v
		}
	case "lastmod", "updated", "pubdate", "published", "date", "modified":
		if t, ok := parseDate(v); ok && (cur.lastmod.IsZero() || t.After(cur.lastmod)) {
			cur.lastmod = t
		}
	}
}

func (p *parser) flushItem(it *item) {
	src := FromFeed
	if p.doc.Type == Sitemap || p.doc.Type == SitemapIndex {
		src = FromSitemap
	}
	title := clip(collapse(it.title), MaxAnchor)
	p.link(it.link, title, src, it.lastmod)
	p.add(title, textproc.Heading2)
	text := ""
	if it.text != "" {
		text = stripTags(it.text)
		p.add(text, textproc.Body)
	}
	if p.feed != nil && src == FromFeed {
		p.feed.Item(structured.FeedItem{Link: it.link, Title: collapse(it.title), Description: collapse(text), Date: it.lastmod})
	}
}

// stripTags returns the text of an HTML fragment, as found in feed
// descriptions.
func stripTags(s string) string {
	if !strings.ContainsAny(s, "<&") {
		return s
	}
	z := html.NewTokenizer(strings.NewReader(s))
	var b strings.Builder
	for {
		switch z.Next() {
		case html.ErrorToken:
			return b.String()
		case html.TextToken:
			b.Write(z.Text())
			b.WriteByte(' ')
		}
	}
}

var dateLayouts = []string{
	time.RFC3339Nano, time.RFC3339, "2006-01-02T15:04Z07:00", "2006-01-02",
	time.RFC1123Z, time.RFC1123, time.RFC822Z, time.RFC822,
	"Mon, 2 Jan 2006 15:04:05 -0700", "Mon, 2 Jan 2006 15:04:05 MST", "2 Jan 2006 15:04:05 -0700",
}

func parseDate(s string) (time.Time, bool) {
	for _, l := range dateLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}
