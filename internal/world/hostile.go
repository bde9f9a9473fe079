package world

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Sizes of the hostile bodies.
const (
	bombMember  = 1 << 20 // inflated bytes per gzip member
	bombMembers = 1024    // members: the bomb inflates to 1 GiB
	trapLinks   = 20      // links per link-trap page
	loopChain   = 50      // new URLs of a redirect chain before its cycle
)

// gzipBomb is a gzip stream of bombMembers members, each inflating to
// bombMember bytes of HTML whitespace: about 1 MiB that inflates to 1 GiB.
var gzipBomb = sync.OnceValue(func() []byte {
	var member bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&member, gzip.BestCompression)
	_, _ = zw.Write(bytes.Repeat([]byte(" "), bombMember))
	_ = zw.Close()
	var first bytes.Buffer
	zw, _ = gzip.NewWriterLevel(&first, gzip.BestCompression)
	head := "<!DOCTYPE html>\n<html><head><title>Welcome</title></head><body>\n"
	_, _ = zw.Write([]byte(head))
	_, _ = zw.Write(bytes.Repeat([]byte(" "), bombMember-len(head)))
	_ = zw.Close()
	out := bytes.Clone(first.Bytes())
	for range bombMembers - 1 {
		out = append(out, member.Bytes()...)
	}
	return out
})

// hostileReply answers a request to a hostile site while hostile mode is
// on. Every kind ends: by its size, by its duration limit, or by the
// client following it (a loop or a trap); and when the client goes away
// or the world closes.
func (r *Running) hostileReply(h http.Header, req *http.Request, s *siteRec, rc renderCtx) reply {
	switch s.hostile {
	case SlowDrip:
		h.Set("Content-Type", "text/html; charset=utf-8")
		return reply{status: 200, stream: r.drip}
	case HugeBody:
		h.Set("Content-Type", "text/html; charset=utf-8")
		return reply{status: 200, stream: r.huge}
	case GzipBomb:
		b := gzipBomb()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Content-Encoding", "gzip")
		h.Set("Content-Length", strconv.Itoa(len(b)))
		return reply{status: 200, body: b}
	case RedirectLoop:
		p := req.URL.Path
		next := "/r/1"
		code := http.StatusFound
		switch {
		case p == "/loop/a":
			next, code = "/loop/b", http.StatusMovedPermanently
		case p == "/loop/b":
			next, code = "/loop/a", http.StatusMovedPermanently
		case strings.HasPrefix(p, "/r/"):
			n, err := strconv.Atoi(strings.TrimPrefix(p, "/r/"))
			if err == nil && n >= 1 && n < loopChain {
				next = "/r/" + strconv.Itoa(n+1)
			} else if err == nil && n >= loopChain {
				next = "/loop/a"
			}
		}
		h.Set("Location", next)
		return r.text(h, code, "moved\n")
	case LinkTrap:
		var b bytes.Buffer
		trapPage(&b, s, req.URL.Path, rc)
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Content-Length", strconv.Itoa(b.Len()))
		return reply{status: 200, body: b.Bytes()}
	case HugeHeaders:
		rep := r.page(h, req, s, rc)
		hugeHeaders(h, s, req.URL.Path)
		return rep
	}
	// The encoding kinds change the site's own pages, rendered without
	// content coding.
	plain := req.Clone(req.Context())
	plain.Header.Del("Accept-Encoding")
	rep := r.page(h, plain, s, rc)
	if rep.status != http.StatusOK || rep.stream != nil || len(rep.body) == 0 {
		return rep
	}
	variant := hostileVariant(s, req.URL.Path)
	switch s.hostile {
	case BadCharset:
		rep.body = badCharset(rep.body, variant%3)
		switch variant % 3 {
		case 0: // the header says UTF-8; the bytes are not
			h.Set("Content-Type", "text/html; charset=utf-8")
		case 1: // no header charset; the meta element says UTF-8
			h.Set("Content-Type", "text/html")
		default: // a charset nobody knows in the header, UTF-16 in the meta
			h.Set("Content-Type", "text/html; charset=x-klingon")
		}
	case UnknownEncoding:
		h.Set("Content-Encoding", []string{"x-klingon", "compress", "gzip, x-klingon"}[variant%3])
	case FalseGzip:
		h.Set("Content-Encoding", "gzip")
		if variant%2 == 1 {
			// A valid gzip header, then the plain page: the header
			// parses, the deflate stream does not.
			rep.body = append([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}, rep.body...)
		}
	case HiddenGzip:
		var z bytes.Buffer
		zw := gzipPool.Get().(*gzip.Writer)
		zw.Reset(&z)
		_, _ = zw.Write(rep.body)
		_ = zw.Close()
		gzipPool.Put(zw)
		rep.body = z.Bytes()
		if variant%2 == 0 {
			h.Set("Content-Encoding", "identity")
		}
	}
	h.Set("Content-Length", strconv.Itoa(len(rep.body)))
	return rep
}

// hostileVariant picks the variant of a hostile kind for a URL path: 0 for
// the home page, so that a crawler starting there meets the first variant.
func hostileVariant(s *siteRec, path string) uint64 {
	if path == "/" {
		return 0
	}
	return 1 + mix(s.seed, "variant:"+path)%63
}

// Header sizes of the huge-headers kind. headerLine is one "X-Trace:"
// line with its CRLF.
const (
	headerValue = 1000
	headerLine  = len("X-Trace: ") + headerValue + 2

	// HugeHeadersHome is about the size of the headers of a huge-headers
	// site's home page: large, yet under a cautious client's limit.
	HugeHeadersHome = 48 << 10
	// HugeHeadersUnder is the most header bytes a huge-headers response
	// just under 1 MiB (http.DefaultMaxHeaderBytes, net/http's server
	// limit, often taken for the client's) carries.
	HugeHeadersUnder = 1<<20 - 4<<10
	// HugeHeadersOver is the least a response beyond 1 MiB carries, in
	// one header line.
	HugeHeadersOver = 1<<20 + 64<<10
	// HugeHeadersHuge is the least a response beyond net/http's own
	// client default (Transport.MaxResponseHeaderBytes 0: 10 MiB) carries.
	HugeHeadersHuge = 10<<20 + 64<<10
)

// traceValue is the value of each filler header line; hugeHeaderLines
// holds enough of them for every size, shared by every response (the
// server only reads them).
var (
	traceValue      = strings.Repeat("0123456789abcdef", headerValue/16) + "01234567"[:headerValue%16]
	hugeHeaderLines = sync.OnceValue(func() []string {
		v := make([]string, HugeHeadersHuge/headerLine+1)
		for i := range v {
			v[i] = traceValue
		}
		return v
	})
	longHeader = sync.OnceValue(func() string { return strings.Repeat("a", HugeHeadersOver) })
)

// hugeHeaders adds the huge-headers kind's headers for path to h.
func hugeHeaders(h http.Header, s *siteRec, path string) {
	// Full slice expressions: an append to one response's header must
	// copy, not write into the lines every response shares.
	lines := hugeHeaderLines()
	switch hostileVariant(s, path) % 4 {
	case 0:
		n := HugeHeadersHome / headerLine
		h["X-Trace"] = lines[:n:n]
	case 1:
		// Many lines; the status line and the page's own headers take
		// well under the 4 KiB left.
		n := HugeHeadersUnder / headerLine
		h["X-Trace"] = lines[:n:n]
	case 2:
		// One line longer than 1 MiB.
		h.Set("X-Session", longHeader())
	default:
		n := HugeHeadersHuge/headerLine + 1
		h["X-Trace"] = lines[:n:n]
	}
}

// badCharset puts invalid UTF-8 into a rendered page (title, description,
// language, paragraphs, anchor texts and one extra link) and changes its
// meta charset: variant 0 keeps "utf-8" (the header says it too), 1 says
// "utf-8" with no charset in the header, 2 says "utf-16" (which HTML
// reads as UTF-8).
func badCharset(page []byte, variant uint64) []byte {
	// A lone Latin-1 byte, bytes never in UTF-8, an overlong '/', a
	// surrogate, a code point past U+10FFFF, a cut sequence and a NUL.
	const bad = "caf\xe9 \xff\xfe \xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80 \xe2\x82 \x00"
	b := bytes.Replace(page, []byte("<title>"), []byte("<title>"+bad+" "), 1)
	b = bytes.Replace(b, []byte(`<html lang="en">`), []byte("<html lang=\"e\xffn\">"), 1)
	b = bytes.Replace(b, []byte(`<meta name="description" content="`), []byte(`<meta name="description" content="`+bad+" "), 1)
	b = bytes.ReplaceAll(b, []byte("<p>"), []byte("<p>"+bad+" "))
	b = bytes.ReplaceAll(b, []byte("</a></li>"), []byte(" \xe9t\xe9\xff</a></li>"))
	b = bytes.Replace(b, []byte("</ul>"), []byte("<li><a href=\"/caf\xe9-\xff/\">menu \xe9\xff</a></li>\n</ul>"), 1)
	if variant == 2 {
		b = bytes.Replace(b, []byte(`<meta charset="utf-8">`), []byte(`<meta charset="utf-16">`), 1)
	}
	return b
}

// drip writes the body one byte per unscaled second until the drip limit.
func (r *Running) drip(ctx context.Context, w io.Writer, _ func(int) error) error {
	interval := max(r.Scaled(time.Second), time.Millisecond)
	deadline := time.Now().Add(r.Scaled(r.cfg.maxDrip))
	msg := "<!DOCTYPE html>\n<html><head><title>Loading</title></head><body><p>Please wait"
	for k := 0; ; k++ {
		c := byte('.')
		if k < len(msg) {
			c = msg[k]
		}
		if _, err := w.Write([]byte{c}); err != nil {
			return err
		}
		if !time.Now().Add(interval).Before(deadline) {
			return nil
		}
		if !r.sleepUntil(ctx, time.Now().Add(interval)) {
			return context.Canceled
		}
	}
}

// huge streams the huge body in 64 KiB pieces at the path's bandwidth.
func (r *Running) huge(ctx context.Context, w io.Writer, pace func(int) error) error {
	var piece bytes.Buffer
	piece.WriteString("<!DOCTYPE html>\n<html><head><title>Archive</title></head><body>\n")
	for piece.Len() < 64<<10 {
		fmt.Fprintf(&piece, "<p>Record %d of the archive, kept for reference.</p>\n", piece.Len())
	}
	chunk := piece.Bytes()
	for sent := int64(0); sent < r.cfg.hugeSize; {
		k := int(min(int64(len(chunk)), r.cfg.hugeSize-sent))
		if err := pace(k); err != nil {
			return err
		}
		if _, err := w.Write(chunk[:k]); err != nil {
			return err
		}
		sent += int64(k)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// trapPage writes a page linking to trapLinks URLs that exist only
// because they are linked: ever deeper directories and new session ids.
func trapPage(b *bytes.Buffer, s *siteRec, path string, rc renderCtx) {
	h := mix(s.seed, "trap:"+path)
	dir := strings.TrimSuffix(path, "/")
	b.WriteString("<!DOCTYPE html>\n<html><head><title>Calendar</title></head><body>\n<h1>Events</h1>\n<ul>\n")
	for k := 0; k < trapLinks; k++ {
		h = splitmix(h)
		word := vocabulary[h%uint64(len(vocabulary))]
		switch k % 3 {
		case 0:
			fmt.Fprintf(b, "<li><a href=\"%s/%s-%d/\">%s</a></li>\n", dir, word, h>>48, word)
		case 1:
			fmt.Fprintf(b, "<li><a href=\"%s/?sid=%016x\">%s</a></li>\n", dir, h, word)
		default:
			d := time.Unix(rc.now, 0).UTC().AddDate(0, 0, int(h>>56))
			fmt.Fprintf(b, "<li><a href=\"/calendar/%s/\">%s</a></li>\n", d.Format("2006/01/02"), d.Format("2 January 2006"))
		}
	}
	b.WriteString("</ul>\n</body></html>\n")
}
