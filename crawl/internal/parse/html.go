package parse

import (
	"bytes"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/PuerkitoBio/goquery"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
	"golang.org/x/net/html/charset"
	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/unicode"
	"golang.org/x/text/transform"

	"github.com/micra-net/micra/crawl/internal/structured"
	"github.com/micra-net/micra/crawl/internal/textproc"
)

// htmlReader returns body decoded to UTF-8 as the charset given by
// contentType or found in the document says (WHATWG's order: BOM, header,
// meta prescan, then a guess). The result is always valid UTF-8: where the
// encoding is UTF-8, invalid sequences become U+FFFD, as a browser shows
// them. x/net/html/charset passes such bytes through untouched whenever it
// settles on UTF-8 without a validating decoder (a meta charset of
// "utf-16", which HTML reads as UTF-8; a first KiB of valid UTF-8 before
// invalid bytes), and they went on into titles, anchors and keywords (the
// emulated Internet's bad-charset sites found it). Valid UTF-8 is returned
// as it is: decoding it would copy it through a transformer that changes
// nothing.
func htmlReader(body []byte, contentType string) io.Reader {
	e, name, _ := charset.DetermineEncoding(body[:min(len(body), 1024)], contentType)
	if name == "utf-8" || e == encoding.Nop {
		if utf8.Valid(body) {
			return bytes.NewReader(body)
		}
		return transform.NewReader(bytes.NewReader(body), unicode.UTF8.NewDecoder())
	}
	return transform.NewReader(bytes.NewReader(body), e.NewDecoder())
}

func (p *parser) html(body []byte, contentType string) {
	doc, err := goquery.NewDocumentFromReader(htmlReader(body, contentType))
	if err != nil {
		// x/net/html refuses documents nested deeper than 512 elements;
		// such pages (often hostile) still get a streaming pass.
		p.htmlTokens(body, contentType)
		return
	}
	d := p.doc
	if lang, ok := doc.Find("html").First().Attr("lang"); ok {
		d.Lang = clip(strings.ToLower(strings.TrimSpace(lang)), 35)
	}
	// <base href> changes how every relative link resolves.
	if href, ok := doc.Find("base[href]").First().Attr("href"); ok {
		if u, err := p.base.Resolve(href); err == nil {
			if b, err := urlnormBase(u); err == nil {
				p.base, p.baseURL, p.resolved = b, u, nil
			}
		}
	}
	d.Title = clip(collapse(doc.Find("title").First().Text()), MaxTitle)
	p.add(d.Title, textproc.Title)
	doc.Find("meta[name]").Each(func(_ int, s *goquery.Selection) {
		name := strings.ToLower(strings.TrimSpace(s.AttrOr("name", "")))
		content := s.AttrOr("content", "")
		switch name {
		case "robots", p.opts.Agent:
			p.robots(content, false)
		case "description", "keywords":
			p.add(clip(content, 4096), textproc.Meta)
		}
	})
	doc.Find("link[href]").Each(func(_ int, s *goquery.Selection) {
		rels := strings.Fields(strings.ToLower(s.AttrOr("rel", "")))
		href := s.AttrOr("href", "")
		for _, rel := range rels {
			switch rel {
			case "canonical":
				if d.Canonical == "" {
					if u, ok := p.resolve(href); ok {
						d.Canonical = u
						p.link(href, "", FromCanonical, zeroTime)
					}
				}
			case "alternate":
				switch strings.ToLower(s.AttrOr("type", "")) {
				case "application/rss+xml", "application/atom+xml", "application/rdf+xml":
					p.link(href, s.AttrOr("title", ""), FromAlternate, zeroTime)
				}
			}
		}
	})
	for _, n := range doc.Nodes {
		p.walk(n, textproc.Body, 0)
	}
	if p.opts.Structured {
		x := structured.New(p.baseURL, structured.Limits{})
		for _, n := range doc.Nodes {
			x.HTML(n)
		}
		p.structured(x)
	}
}

// walk feeds visible text to the keyword builder with the weight of its
// context and collects links with their anchor text.
func (p *parser) walk(n *html.Node, f textproc.Field, depth int) {
	if depth > maxDepth {
		return
	}
	switch n.Type {
	case html.TextNode:
		p.add(n.Data, f)
		return
	case html.ElementNode:
		switch n.DataAtom {
		case atom.Head, atom.Script, atom.Style, atom.Noscript, atom.Template, atom.Svg, atom.Math, atom.Select, atom.Object:
			return
		case atom.H1:
			f = textproc.Heading1
		case atom.H2:
			f = textproc.Heading2
		case atom.H3, atom.H4, atom.H5, atom.H6, atom.Dt:
			// A definition's term (a glossary entry, an API's signature
			// in Sphinx, Texinfo and DocBook manuals) names what the
			// text after it describes, as a minor heading does.
			if f == textproc.Body {
				f = textproc.Heading3
			}
		case atom.A, atom.Area:
			href, rel := attr(n, "href"), strings.ToLower(attr(n, "rel"))
			text := ""
			if n.DataAtom == atom.A {
				text = textOf(n, MaxAnchor)
			} else {
				text = attr(n, "alt")
			}
			if !hasToken(rel, "nofollow") && !hasToken(rel, "ugc") && !hasToken(rel, "sponsored") {
				p.link(href, text, FromAnchor, zeroTime)
			}
			if f == textproc.Body {
				f = textproc.Anchor
			}
		case atom.Iframe, atom.Frame:
			p.link(attr(n, "src"), "", FromFrame, zeroTime)
		case atom.Img:
			if alt := attr(n, "alt"); alt != "" {
				p.add(alt, f)
			}
		}
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		p.walk(c, f, depth+1)
	}
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Namespace == "" && a.Key == key {
			return a.Val
		}
	}
	return ""
}

func hasToken(list, tok string) bool {
	for _, t := range strings.Fields(list) {
		if t == tok {
			return true
		}
	}
	return false
}

// textOf returns up to max bytes of the text inside n.
func textOf(n *html.Node, max int) string {
	var b strings.Builder
	var rec func(*html.Node, int)
	rec = func(n *html.Node, depth int) {
		if b.Len() >= max || depth > 64 {
			return
		}
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
			b.WriteByte(' ')
			return
		}
		if n.Type == html.ElementNode {
			switch n.DataAtom {
			case atom.Script, atom.Style:
				return
			case atom.Img:
				b.WriteString(attr(n, "alt"))
				b.WriteByte(' ')
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			rec(c, depth+1)
		}
	}
	rec(n, 0)
	return clip(collapse(b.String()), max)
}

// htmlTokens is the fallback extraction over the token stream, for
// documents the tree builder refuses.
func (p *parser) htmlTokens(body []byte, contentType string) {
	z := html.NewTokenizer(htmlReader(body, contentType))
	z.SetMaxBuf(1 << 20)
	skip, inTitle := 0, false
	f := textproc.Body
	var anchorHref string
	var anchor strings.Builder
	inAnchor := false
	for range 4 << 20 {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			if inAnchor {
				p.link(anchorHref, anchor.String(), FromAnchor, zeroTime)
			}
			return
		case html.TextToken:
			if skip > 0 {
				continue
			}
			text := string(z.Text())
			switch {
			case inTitle:
				if p.doc.Title == "" {
					p.doc.Title = clip(collapse(text), MaxTitle)
					p.add(p.doc.Title, textproc.Title)
				}
			default:
				p.add(text, f)
				if inAnchor && anchor.Len() < MaxAnchor {
					anchor.WriteString(text)
					anchor.WriteByte(' ')
				}
			}
		case html.StartTagToken, html.SelfClosingTagToken:
			name, hasAttr := z.TagName()
			a := atom.Lookup(name)
			attrs := map[string]string{}
			for hasAttr && len(attrs) < 32 {
				var k, v []byte
				k, v, hasAttr = z.TagAttr()
				attrs[string(k)] = string(v)
			}
			switch a {
			case atom.Script, atom.Style, atom.Noscript, atom.Template, atom.Svg:
				if tt == html.StartTagToken {
					skip++
				}
			case atom.Title:
				inTitle = tt == html.StartTagToken
			case atom.H1:
				f = textproc.Heading1
			case atom.H2:
				f = textproc.Heading2
			case atom.H3, atom.H4, atom.H5, atom.H6, atom.Dt:
				f = textproc.Heading3
			case atom.Meta:
				switch strings.ToLower(attrs["name"]) {
				case "robots", p.opts.Agent:
					p.robots(attrs["content"], false)
				}
			case atom.A:
				if inAnchor {
					p.link(anchorHref, anchor.String(), FromAnchor, zeroTime)
				}
				rel := strings.ToLower(attrs["rel"])
				inAnchor = !hasToken(rel, "nofollow") && !hasToken(rel, "ugc") && !hasToken(rel, "sponsored")
				anchorHref = attrs["href"]
				anchor.Reset()
			case atom.Iframe, atom.Frame:
				p.link(attrs["src"], "", FromFrame, zeroTime)
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			switch atom.Lookup(name) {
			case atom.Script, atom.Style, atom.Noscript, atom.Template, atom.Svg:
				if skip > 0 {
					skip--
				}
			case atom.Title:
				inTitle = false
			case atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6, atom.Dt:
				f = textproc.Body
			case atom.A:
				if inAnchor {
					p.link(anchorHref, anchor.String(), FromAnchor, zeroTime)
					inAnchor = false
				}
			}
		}
	}
}
