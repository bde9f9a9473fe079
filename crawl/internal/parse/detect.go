// Package parse detects the type of a fetched document and turns HTML,
// XHTML, RSS, Atom, RDF/XML, sitemaps and plain text into a Doc: title,
// meta robots, canonical link and out-links with anchor text, while feeding
// the document's words with their field weights to a textproc.Builder.
//
// Every input is untrusted: sizes of titles, anchors, link lists and XML
// nesting are bounded, and malformed documents yield what could be read.
// Functions are safe for concurrent use; a Builder passed in is not.
package parse

import (
	"bytes"
	"encoding/xml"
	"mime"
	"net/http"
	"path"
	"strings"
)

// Type is a detected document type. Values are stored in records: append
// only.
type Type uint8

// Document types.
const (
	Other Type = iota
	HTML
	XHTML
	RSS
	Atom
	RDF
	Sitemap
	SitemapIndex
	Text
)

var typeNames = [...]string{"other", "html", "xhtml", "rss", "atom", "rdf", "sitemap", "sitemapindex", "text"}

func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return "unknown"
}

// Parsed reports whether documents of type t are parsed.
func (t Type) Parsed() bool { return t != Other && int(t) < len(typeNames) }

// sniffLen is how much of a body is examined when sniffing.
const sniffLen = 4096

// Namespaces that identify XML vocabularies.
const (
	nsAtom  = "http://www.w3.org/2005/Atom"
	nsRDF   = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
	nsRSS1  = "http://purl.org/rss/1.0/"
	nsXHTML = "http://www.w3.org/1999/xhtml"
)

// Detect determines the type of a document from its Content-Type header,
// the extension of its URL path and its first bytes, in the manner of
// MultiCrawler's detect phase: a header or extension that names a specific
// format is believed; generic XML, a missing or generic type and plain text
// that looks like XML are sniffed.
func Detect(contentType, urlPath string, body []byte) Type {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		mt = ""
	}
	switch mt {
	case "text/html":
		if t := sniffXML(body); t == RSS || t == Atom || t == Sitemap || t == SitemapIndex {
			return t // a feed served as text/html
		}
		return HTML
	case "application/xhtml+xml":
		return XHTML
	case "application/rss+xml":
		return RSS
	case "application/atom+xml":
		return Atom
	case "application/rdf+xml":
		if t := sniffXML(body); t == RSS {
			return RSS
		}
		return RDF
	case "text/xml", "application/xml":
		if t := sniffXML(body); t != Other {
			return t
		}
		return Other
	case "text/plain":
		if t := sniffXML(body); t != Other {
			return t
		}
		return Text
	case "", "application/octet-stream", "binary/octet-stream", "application/unknown":
		// fall through to extension and sniffing
	default:
		if strings.HasSuffix(mt, "+xml") {
			return sniffXML(body)
		}
		return Other
	}
	switch strings.ToLower(path.Ext(urlPath)) {
	case ".html", ".htm", ".shtml", ".php", ".asp", ".aspx", ".jsp":
		return HTML
	case ".xhtml", ".xht":
		return XHTML
	case ".rss":
		return RSS
	case ".atom":
		return Atom
	case ".rdf", ".owl":
		if t := sniffXML(body); t == RSS {
			return RSS
		}
		return RDF
	case ".txt", ".text":
		return Text
	}
	if t := sniffXML(body); t != Other {
		return t
	}
	switch ct := http.DetectContentType(body); {
	case strings.HasPrefix(ct, "text/html"):
		return HTML
	case strings.HasPrefix(ct, "text/plain"):
		return Text
	}
	return Other
}

// sniffXML finds the root element of an XML document in its first bytes.
func sniffXML(body []byte) Type {
	if len(body) > sniffLen {
		body = body[:sniffLen]
	}
	b := bytes.TrimLeft(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")), " \t\r\n")
	if len(b) == 0 || b[0] != '<' {
		return Other
	}
	d := xml.NewDecoder(bytes.NewReader(b))
	d.Strict = false
	d.CharsetReader = charsetReader
	hasRSS1 := bytes.Contains(b, []byte(nsRSS1))
	for range 64 {
		tok, err := d.RawToken()
		if err != nil {
			return Other
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		// RawToken does not resolve prefixes; find the namespace by hand.
		ns := se.Name.Space
		for _, a := range se.Attr {
			if (ns == "" && a.Name.Space == "" && a.Name.Local == "xmlns") || (ns != "" && a.Name.Space == "xmlns" && a.Name.Local == ns) {
				ns = a.Value
			}
		}
		switch strings.ToLower(se.Name.Local) {
		case "rss":
			return RSS
		case "feed":
			if ns == nsAtom || ns == "" {
				return Atom
			}
		case "urlset":
			return Sitemap
		case "sitemapindex":
			return SitemapIndex
		case "rdf":
			if hasRSS1 {
				return RSS
			}
			return RDF
		case "html":
			if ns == nsXHTML {
				return XHTML
			}
			return HTML
		}
		return Other
	}
	return Other
}
