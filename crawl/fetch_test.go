package crawl

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

func mustURL(t testing.TB, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func serverPort(t testing.TB, s *httptest.Server) uint16 {
	t.Helper()
	u := mustURL(t, s.URL)
	p, _ := strconv.Atoi(u.Port())
	return uint16(p)
}

func newTestFetcher(t testing.TB, opts ...Option) *Fetcher {
	t.Helper()
	f, err := NewFetcher(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func compress(t testing.TB, enc string, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	switch enc {
	case "gzip":
		w := gzip.NewWriter(&buf)
		w.Write(b)
		w.Close()
	case "br":
		w := brotli.NewWriter(&buf)
		w.Write(b)
		w.Close()
	case "zstd":
		w, _ := zstd.NewWriter(&buf)
		w.Write(b)
		w.Close()
	}
	return buf.Bytes()
}

func TestFetchEncodingsAndCaps(t *testing.T) {
	page := []byte(strings.Repeat("<p>hello crawler</p>", 1000)) // 20 kB
	bomb := make([]byte, 8<<20)                                  // 8 MiB of zeros, eight times the cap
	encoded := map[string][]byte{}
	for _, e := range []string{"gzip", "br", "zstd"} {
		encoded[e] = compress(t, e, page)
		encoded[e+"-bomb"] = compress(t, e, bomb)
	}
	var gotAE string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAE = r.Header.Get("Accept-Encoding")
		enc := strings.TrimPrefix(r.URL.Path, "/")
		body, ok := encoded[enc]
		if !ok {
			w.Write(page)
			return
		}
		w.Header().Set("Content-Encoding", strings.TrimSuffix(enc, "-bomb"))
		w.Write(body)
	}))
	defer srv.Close()
	f := newTestFetcher(t, AllowPrivateNetworks(serverPort(t, srv)), MaxBodySize(1<<20, 1<<20))
	for _, e := range []string{"plain", "gzip", "br", "zstd"} {
		t.Run(e, func(t *testing.T) {
			res, err := f.Fetch(t.Context(), FetchRequest{URL: mustURL(t, srv.URL+"/"+e)})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(res.Body, page) || res.Truncated {
				t.Fatalf("body %d bytes, truncated %v", len(res.Body), res.Truncated)
			}
			if e != "plain" && res.WireBytes >= int64(len(page)) {
				t.Fatalf("wire bytes %d not compressed", res.WireBytes)
			}
		})
		t.Run(e+" bomb", func(t *testing.T) {
			if e == "plain" {
				return
			}
			res, err := f.Fetch(t.Context(), FetchRequest{URL: mustURL(t, srv.URL+"/"+e+"-bomb")})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Body) != 1<<20 || !res.Truncated {
				t.Fatalf("bomb decoded to %d bytes, truncated %v", len(res.Body), res.Truncated)
			}
		})
	}
	if !strings.Contains(gotAE, "br") || !strings.Contains(gotAE, "zstd") || !strings.Contains(gotAE, "gzip") {
		t.Fatalf("Accept-Encoding = %q", gotAE)
	}
}

func TestFetchWireCap(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/declared" {
			w.Header().Set("Content-Length", strconv.Itoa(10<<20))
		}
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for range 160 { // 10 MiB, bounded
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	f := newTestFetcher(t, AllowPrivateNetworks(serverPort(t, srv)), MaxBodySize(256<<10, 1<<20))
	res, err := f.Fetch(t.Context(), FetchRequest{URL: mustURL(t, srv.URL+"/stream")})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || len(res.Body) > 256<<10+1 || res.WireBytes > 256<<10+1 {
		t.Fatalf("truncated %v body %d wire %d", res.Truncated, len(res.Body), res.WireBytes)
	}
	res, err = f.Fetch(t.Context(), FetchRequest{URL: mustURL(t, srv.URL+"/declared")})
	if !errors.Is(err, ErrBodyTooLarge) || res == nil || res.Status != 200 || len(res.Body) != 0 {
		t.Fatalf("declared large body: %v", err)
	}
}

func TestFetchConditionalAndHead(t *testing.T) {
	const etag = `"v1"`
	lm := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC).Format(http.TimeFormat)
	var methods []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		methods = append(methods, r.Method)
		if r.Header.Get("If-None-Match") == etag && r.Header.Get("If-Modified-Since") == lm {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", etag)
		w.Header().Set("Last-Modified", lm)
		io.WriteString(w, "body")
	}))
	defer srv.Close()
	f := newTestFetcher(t, AllowPrivateNetworks(serverPort(t, srv)))
	res, err := f.Fetch(t.Context(), FetchRequest{URL: mustURL(t, srv.URL)})
	if err != nil || string(res.Body) != "body" || res.Header.Get("ETag") != etag {
		t.Fatalf("first fetch: %v %q", err, res.Body)
	}
	res, err = f.Fetch(t.Context(), FetchRequest{URL: mustURL(t, srv.URL), ETag: etag, LastModified: lm})
	if err != nil || !res.NotModified() || len(res.Body) != 0 {
		t.Fatalf("conditional fetch: %v status %d", err, res.Status)
	}
	res, err = f.Fetch(t.Context(), FetchRequest{URL: mustURL(t, srv.URL), Head: true})
	if err != nil || res.Status != 200 || len(res.Body) != 0 {
		t.Fatalf("head: %v", err)
	}
	if methods[2] != http.MethodHead {
		t.Fatalf("methods = %v", methods)
	}
	tm := res.Timing
	if tm.Total <= 0 || tm.TTFB <= 0 || tm.TTFB > tm.Total || !tm.Remote.IsValid() || tm.Proto != "HTTP/1.1" {
		t.Fatalf("timing %+v", tm)
	}
}

func TestFetchRedirects(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case strings.HasPrefix(r.URL.Path, "/chain/"):
			n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/chain/"))
			if n == 0 {
				io.WriteString(w, "end")
				return
			}
			http.Redirect(w, r, fmt.Sprintf("/chain/%d", n-1), http.StatusMovedPermanently)
		case r.URL.Path == "/ftp":
			http.Redirect(w, r, "ftp://example.com/", http.StatusFound)
		}
	}))
	defer srv.Close()
	f := newTestFetcher(t, AllowPrivateNetworks(serverPort(t, srv)))
	tests := []struct {
		path string
		err  error
		hops int
	}{
		{"/chain/5", nil, 5},
		{"/chain/6", ErrTooManyRedirects, 5},
		{"/loop", ErrTooManyRedirects, 5},
		{"/ftp", ErrRedirectRefused, 0},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			res, err := f.Fetch(t.Context(), FetchRequest{URL: mustURL(t, srv.URL+tt.path)})
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if len(res.Redirects) != tt.hops {
				t.Fatalf("%d hops, want %d", len(res.Redirects), tt.hops)
			}
		})
	}
	refuse := errors.New("no")
	_, err := f.Fetch(t.Context(), FetchRequest{URL: mustURL(t, srv.URL+"/chain/2"), CheckRedirect: func(context.Context, *url.URL) error { return refuse }})
	if !errors.Is(err, ErrRedirectRefused) || !errors.Is(err, refuse) {
		t.Fatalf("hook: %v", err)
	}
}

func TestFetchHTTP2(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Proto)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	pool := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	f := newTestFetcher(t, AllowPrivateNetworks(serverPort(t, srv)), RootCAs(pool))
	res, err := f.Fetch(t.Context(), FetchRequest{URL: mustURL(t, srv.URL)})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Body) != "HTTP/2.0" || res.Timing.Proto != "HTTP/2.0" || res.Timing.TLS <= 0 {
		t.Fatalf("body %q timing %+v", res.Body, res.Timing)
	}
}

func TestFetchSourceAddress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		io.WriteString(w, host)
	}))
	defer srv.Close()
	src := netip.MustParseAddr("127.0.0.7")
	f := newTestFetcher(t, AllowPrivateNetworks(serverPort(t, srv)), SourceAddr(src))
	res, err := f.Fetch(t.Context(), FetchRequest{URL: mustURL(t, srv.URL)})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Body) != "127.0.0.7" {
		t.Fatalf("server saw %q", res.Body)
	}
}

func TestFetchTotalTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range 100 { // a slow drip, bounded
			if _, err := w.Write([]byte("x")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}))
	defer srv.Close()
	f := newTestFetcher(t, AllowPrivateNetworks(serverPort(t, srv)), Timeouts(time.Second, time.Second, 300*time.Millisecond))
	res, err := f.Fetch(t.Context(), FetchRequest{URL: mustURL(t, srv.URL)})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if res == nil || !res.Truncated || len(res.Body) >= 100 {
		t.Fatalf("drip not cut: %+v", res)
	}
}

// stubResolver answers every name with fixed addresses, as a hostile DNS
// server doing rebinding would.
type stubResolver map[string][]netip.Addr

func (s stubResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := s[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func TestSSRFGuard(t *testing.T) {
	var hits int
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		io.WriteString(w, "secret")
	}))
	defer target.Close()
	port := serverPort(t, target)
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/latest/meta-data", http.StatusFound)
	}))
	defer redirector.Close()
	dns := stubResolver{
		"rebind.test":   {netip.MustParseAddr("127.0.0.1")},
		"mixed.test":    {netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("127.0.0.1")},
		"metadata.test": {netip.MustParseAddr("169.254.169.254")},
	}
	guarded := newTestFetcher(t, DNS(dns), Timeouts(time.Second, time.Second, 2*time.Second))
	tests := []struct{ name, url string }{
		{"loopback literal", target.URL},
		{"loopback literal port 80", "http://127.0.0.1/"},
		{"ipv6 loopback", "http://[::1]:80/"},
		{"mapped loopback", "http://[::ffff:127.0.0.1]:80/"},
		{"dns rebinding", fmt.Sprintf("http://rebind.test:%d/", port)},
		{"dns rebinding port 80", "http://rebind.test/"},
		{"private and loopback", "http://mixed.test/"},
		{"metadata", "http://metadata.test/latest/meta-data"},
		{"metadata literal", "http://169.254.169.254/"},
		{"redirect to loopback", redirector.URL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := guarded.Fetch(t.Context(), FetchRequest{URL: mustURL(t, tt.url)})
			if !errors.Is(err, ErrForbiddenDestination) {
				t.Fatalf("err = %v, want ErrForbiddenDestination", err)
			}
		})
	}
	if hits != 0 {
		t.Fatalf("guarded fetcher reached the target %d times", hits)
	}
	// The same redirect is followed once private networks are allowed on
	// both ports, and rebinding names resolve to loopback then.
	open := newTestFetcher(t, DNS(dns), AllowPrivateNetworks(port, serverPort(t, redirector)))
	res, err := open.Fetch(t.Context(), FetchRequest{URL: mustURL(t, redirector.URL)})
	if err != nil || string(res.Body) != "secret" {
		t.Fatalf("allowed fetch: %v", err)
	}
	// Allowing private networks on one port does not open others.
	narrow := newTestFetcher(t, AllowPrivateNetworks(port))
	if _, err := narrow.Fetch(t.Context(), FetchRequest{URL: mustURL(t, redirector.URL)}); !errors.Is(err, ErrForbiddenDestination) {
		t.Fatalf("other port: %v", err)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"120", 2 * time.Minute, true},
		{now.Add(time.Hour).Format(http.TimeFormat), time.Hour, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"", 0, false},
		{"-5", 0, false},
		{"soon", 0, false},
	}
	for _, tt := range tests {
		d, ok := RetryAfter(tt.in, now)
		if d != tt.want || ok != tt.ok {
			t.Errorf("RetryAfter(%q) = %v, %v", tt.in, d, ok)
		}
	}
}

// TestHeaderLimit: the fetcher refuses responses whose headers pass
// MaxHeaderBytes, over HTTP/1.1 and HTTP/2, with ErrHeaderTooLarge (a
// change of net/http's messages, which headerTooLarge matches, fails it),
// and takes those just under it.
func TestHeaderLimit(t *testing.T) {
	if MaxHeaderBytes >= 1<<20 {
		t.Fatalf("MaxHeaderBytes %d: not below net/http's defaults", MaxHeaderBytes)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		line := strings.Repeat("v", 1000)
		for range n / (len(line) + len("X-Pad: \r\n")) {
			w.Header().Add("X-Pad", line)
		}
		io.WriteString(w, "<html><title>ok</title></html>")
	})
	for _, h2 := range []bool{false, true} {
		srv := httptest.NewUnstartedServer(handler)
		opts := []Option{}
		if h2 {
			srv.EnableHTTP2 = true
			srv.StartTLS()
			opts = append(opts, RootCAs(srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs))
		} else {
			srv.Start()
		}
		defer srv.Close()
		f := newTestFetcher(t, append(opts, AllowPrivateNetworks(serverPort(t, srv)))...)
		for _, tc := range []struct {
			size int
			ok   bool
		}{{MaxHeaderBytes - 4<<10, true}, {MaxHeaderBytes + 4<<10, false}, {1<<20 - 4<<10, false}} {
			res, err := f.Fetch(t.Context(), FetchRequest{URL: mustURL(t, fmt.Sprintf("%s/%d", srv.URL, tc.size))})
			if tc.ok && (err != nil || string(res.Body) != "<html><title>ok</title></html>") {
				t.Errorf("h2 %v, %d header bytes: %v", h2, tc.size, err)
			}
			if !tc.ok && !errors.Is(err, ErrHeaderTooLarge) {
				t.Errorf("h2 %v, %d header bytes: %v, want ErrHeaderTooLarge", h2, tc.size, err)
			}
		}
	}
}

// TestFetchLyingEncoding: a body that is not what its Content-Encoding
// says fails with ErrContentEncoding, whether the stream's header or its
// data is wrong, so that the crawler drops it instead of retrying.
func TestFetchLyingEncoding(t *testing.T) {
	page := []byte(strings.Repeat("<p>hello crawler</p>", 100))
	gz := compress(t, "gzip", page)
	corrupt := append(bytes.Clone(gz[:10]), page...)                      // a gzip header, then plain bytes
	badSum := append(bytes.Clone(gz[:len(gz)-8]), 1, 2, 3, 4, 0, 0, 0, 0) // wrong CRC and size
	bodies := map[string][]byte{"plain": page, "corrupt": corrupt, "checksum": badSum, "br": page, "zstd": page, "unknown": page}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := strings.TrimPrefix(r.URL.Path, "/")
		switch k {
		case "br", "zstd":
			w.Header().Set("Content-Encoding", k)
		case "unknown":
			w.Header().Set("Content-Encoding", "x-klingon")
		default:
			w.Header().Set("Content-Encoding", "gzip")
		}
		w.Write(bodies[k])
	}))
	defer srv.Close()
	f := newTestFetcher(t, AllowPrivateNetworks(serverPort(t, srv)))
	for k := range bodies {
		_, err := f.Fetch(t.Context(), FetchRequest{URL: mustURL(t, srv.URL+"/"+k)})
		if !errors.Is(err, ErrContentEncoding) {
			t.Errorf("%s: %v, want ErrContentEncoding", k, err)
		}
	}
}

// TestReadCapped: a body read up to the cap keeps a buffer of at most the
// cap plus one byte (a doubling buffer kept up to twice the cap alive while
// the page waited for a processor), and shorter bodies come out whole.
func TestReadCapped(t *testing.T) {
	const limit = 1<<20 + 7
	for _, tc := range []struct {
		n, size int
	}{{0, 0}, {10, 0}, {100 << 10, 32 << 10}, {limit, 32 << 10}, {limit + 1, 32 << 10}, {8 << 20, 32 << 10}, {5000, 5001}, {8 << 20, limit + 1}} {
		src := bytes.Repeat([]byte("x"), tc.n)
		b, err := readCapped(iotest.OneByteReader(bytes.NewReader(src[:min(len(src), 1000)])), limit, tc.size)
		if err != nil || len(b) != min(tc.n, 1000) {
			t.Fatalf("%d bytes one at a time: %d, %v", tc.n, len(b), err)
		}
		b, err = readCapped(bytes.NewReader(src), limit, tc.size)
		if err != nil || len(b) != min(tc.n, limit+1) || cap(b) > limit+1 {
			t.Fatalf("%d bytes (size %d): len %d cap %d, %v", tc.n, tc.size, len(b), cap(b), err)
		}
	}
}
