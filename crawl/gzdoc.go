package crawl

import (
	"bytes"
	"compress/gzip"
	"io"
	"mime"
	"strings"

	"github.com/micra-net/micra/crawl/internal/parse"
)

// gzDoc is a document unpacked from a gzip file.
type gzDoc struct {
	body      []byte
	path      string // the URL path without ".gz"
	truncated bool   // the decompressed-size cap cut it
}

// gzSniff is how much is decompressed to decide whether a gzip file holds a
// document worth parsing.
const gzSniff = 4096

// unpackGzip unpacks a document served as a gzip file, such as
// sitemap.xml.gz (sitemaps.org: a sitemap "may be compressed using gzip"): a
// body in gzip format whose Content-Type says gzip or whose path ends in
// ".gz", and that holds a sitemap, sitemap index or feed. It decompresses
// at most limit bytes, so that a gzip bomb costs no more than an
// uncompressed page. Bodies sent with Content-Encoding: gzip never get here:
// the fetcher decodes them. ok is false for anything else, including
// archives, which are recorded but not unpacked.
func unpackGzip(contentType, urlPath string, body []byte, limit int64) (gzDoc, bool) {
	if len(body) < 2 || body[0] != 0x1f || body[1] != 0x8b {
		return gzDoc{}, false
	}
	mt, _, _ := mime.ParseMediaType(contentType)
	gzType := false
	switch mt {
	case "application/gzip", "application/x-gzip", "application/x-gunzip", "application/gzip-compressed":
		gzType = true
	}
	inner, gzPath := strings.CutSuffix(urlPath, ".gz")
	if !gzPath {
		inner, gzPath = strings.CutSuffix(urlPath, ".GZ")
	}
	if !gzType && !gzPath {
		return gzDoc{}, false
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return gzDoc{}, false
	}
	head := make([]byte, min(int64(gzSniff), limit))
	n, _ := io.ReadFull(zr, head)
	switch parse.Detect("", inner, head[:n]) {
	case parse.Sitemap, parse.SitemapIndex, parse.RSS, parse.Atom, parse.RDF:
	default:
		return gzDoc{}, false
	}
	var buf bytes.Buffer
	buf.Write(head[:n])
	// Errors past the head (a cut or corrupt stream) keep what decoded.
	m, _ := io.Copy(&buf, io.LimitReader(zr, limit-int64(n)+1))
	out := buf.Bytes()
	d := gzDoc{body: out, path: inner}
	if int64(n)+m > limit {
		d.body, d.truncated = out[:limit], true
	}
	return d, true
}
