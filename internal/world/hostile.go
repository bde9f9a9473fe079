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
	}
	return r.notFound(h)
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
