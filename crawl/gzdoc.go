package crawl

import (
	"bytes"
	"compress/gzip"
	"io"
	"mime"
	"strings"

	"github.com/micra-net/micra/crawl/internal/parse"
)

// gzDoc is a document unpacked from a gzip body.
type gzDoc struct {
	body      []byte
	path      string // the URL path, without ".gz" for a gzip file
	ctype     string // the Content-Type to parse body with: "" for a gzip file
	truncated bool   // the decompressed-size cap cut it
}

// gzSniff is how much is decompressed to decide whether a gzip file holds a
// document worth parsing.
const gzSniff = 4096

// unpackGzip unpacks a document that arrived gzip-compressed with no
// Content-Encoding saying so (the fetcher decodes the content codings
// announced). Two cases:
//
//   - a gzip file, such as sitemap.xml.gz (sitemaps.org: a sitemap "may be
//     compressed using gzip"): a body whose Content-Type says gzip or whose
//     path ends in ".gz", unpacked when it holds a sitemap, sitemap index
//     or feed; archives are recorded but not unpacked;
//   - a hidden one: a body whose Content-Type names a document type the
//     crawler parses (HTML, XHTML, XML, feeds, plain text) but which is
//     gzip: a server that compressed a page and sent Content-Encoding:
//     identity or none, or compressed it twice. Parsing the compressed
//     bytes as the type would index binary noise; the page inside is
//     what a reader of the site is meant to see, so it is unpacked and
//     parsed with the declared type.
//
// It decompresses at most limit bytes, so that a gzip bomb costs no more
// than an uncompressed page. ok is false for anything else.
func unpackGzip(contentType, urlPath string, body []byte, limit int64) (gzDoc, bool) {
	if len(body) < 2 || body[0] != 0x1f || body[1] != 0x8b {
		return gzDoc{}, false
	}
	mt, _, _ := mime.ParseMediaType(contentType)
	gzType, docType := false, false
	switch mt {
	case "application/gzip", "application/x-gzip", "application/x-gunzip", "application/gzip-compressed":
		gzType = true
	case "text/html", "application/xhtml+xml", "text/plain", "text/xml", "application/xml",
		"application/rss+xml", "application/atom+xml", "application/rdf+xml":
		docType = true
	}
	inner, gzPath := strings.CutSuffix(urlPath, ".gz")
	if !gzPath {
		inner, gzPath = strings.CutSuffix(urlPath, ".GZ")
	}
	if !gzType && !gzPath && !docType {
		return gzDoc{}, false
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return gzDoc{}, false
	}
	head := make([]byte, min(int64(gzSniff), limit))
	n, _ := io.ReadFull(zr, head)
	d := gzDoc{path: inner}
	if docType && !gzPath {
		d.path, d.ctype = urlPath, contentType
	} else {
		switch parse.Detect("", inner, head[:n]) {
		case parse.Sitemap, parse.SitemapIndex, parse.RSS, parse.Atom, parse.RDF:
		default:
			return gzDoc{}, false
		}
	}
	var buf bytes.Buffer
	buf.Write(head[:n])
	// Errors past the head (a cut or corrupt stream) keep what decoded.
	m, _ := io.Copy(&buf, io.LimitReader(zr, limit-int64(n)+1))
	out := buf.Bytes()
	d.body = out
	if int64(n)+m > limit {
		d.body, d.truncated = out[:limit], true
	}
	return d, true
}
