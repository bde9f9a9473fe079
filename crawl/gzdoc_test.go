package crawl

import (
	"bytes"
	"compress/gzip"
	"strings"
	"testing"
)

func gzipped(t testing.TB, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestUnpackGzip(t *testing.T) {
	sitemap := `<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>http://e.org/a</loc></url></urlset>`
	// A sitemap padded far past the cap: a bomb must stop at the cap.
	bomb := sitemap[:len(sitemap)-len("</urlset>")] + strings.Repeat("<!-- padding -->", 1<<16) + "</urlset>"
	tests := []struct {
		name, ct, path string
		body           []byte
		ok, truncated  bool
		inner          string
	}{
		{"sitemap by path", "application/octet-stream", "/sitemap.xml.gz", gzipped(t, sitemap), true, false, "/sitemap.xml"},
		{"sitemap by type", "application/x-gzip", "/sitemap", gzipped(t, sitemap), true, false, "/sitemap"},
		{"gzip type", "application/gzip", "/s.xml.GZ", gzipped(t, sitemap), true, false, "/s.xml"},
		{"bomb capped", "application/gzip", "/big.xml.gz", gzipped(t, bomb), true, true, "/big.xml"},
		{"archive not unpacked", "application/gzip", "/src.tar.gz", gzipped(t, "ustar\x00 binary stuff"), false, false, ""},
		// A page compressed with no Content-Encoding to say so (the
		// world's hidden-gzip sites): unpacked, parsed with its type.
		{"hidden gzip page", "text/html; charset=utf-8", "/page", gzipped(t, sitemap), true, false, "/page"},
		{"hidden gzip bomb capped", "text/html", "/page", gzipped(t, bomb), true, true, "/page"},
		{"archive with an html type", "text/html", "/src.tar.gz", gzipped(t, "ustar\x00 binary stuff"), false, false, ""},
		{"binary type not unpacked", "application/octet-stream", "/page", gzipped(t, sitemap), false, false, ""},
		{"not gzip data", "application/gzip", "/sitemap.xml.gz", []byte(sitemap), false, false, ""},
		{"corrupt gzip", "application/gzip", "/sitemap.xml.gz", []byte{0x1f, 0x8b, 8, 0, 0}, false, false, ""},
	}
	const limit = 64 << 10
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := unpackGzip(tt.ct, tt.path, tt.body, limit)
			if ok != tt.ok {
				t.Fatalf("ok = %v", ok)
			}
			if !ok {
				return
			}
			if d.path != tt.inner || d.truncated != tt.truncated || len(d.body) > limit {
				t.Fatalf("path %q truncated %v size %d", d.path, d.truncated, len(d.body))
			}
			if hidden := !strings.Contains(tt.path, ".gz") && !strings.Contains(tt.ct, "gzip"); hidden != (d.ctype == tt.ct) || !hidden && d.ctype != "" {
				t.Fatalf("parse type %q for %q", d.ctype, tt.ct)
			}
			if !tt.truncated && string(d.body) != sitemap {
				t.Fatalf("body %q", d.body)
			}
		})
	}
}

// FuzzUnpackGzip: whatever the type, path and bytes, unpacking never keeps
// more than the cap and never panics.
func FuzzUnpackGzip(f *testing.F) {
	f.Add("text/html", "/", gzipped(f, "<html><title>x</title></html>"))
	f.Add("application/gzip", "/sitemap.xml.gz", gzipped(f, `<?xml version="1.0"?><urlset></urlset>`))
	f.Add("text/plain", "/a.gz", []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, 1, 2, 3})
	f.Fuzz(func(t *testing.T, ct, path string, body []byte) {
		const limit = 4096
		if d, ok := unpackGzip(ct, path, body, limit); ok && len(d.body) > limit {
			t.Fatalf("%d bytes kept past the %d cap", len(d.body), limit)
		}
	})
}
