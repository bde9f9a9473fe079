package crawl

import (
	"compress/flate"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"

	"github.com/micra-net/micra/internal/check"
)

// Fetcher is an HTTP/1.1 and HTTP/2 client for crawling and probing: every
// connection passes the egress guard on its resolved address, is bound to
// the configured source address, and every request is timed. Responses are
// decompressed (gzip, br, zstd) with caps on wire and decoded sizes.
//
// A Fetcher is safe for concurrent use. Close releases idle connections.
type Fetcher struct {
	cfg       *config
	tr        *http.Transport
	client    *http.Client
	probe     *http.Client // no keep-alive: every probe on a fresh connection
	dns       *dnsCache
	closeOnce sync.Once
}

// FetchRequest describes one fetch.
type FetchRequest struct {
	URL *url.URL
	// Head sends HEAD instead of GET (freshness checks, probes).
	Head bool
	// ETag and LastModified, if set, make the request conditional
	// (If-None-Match, If-Modified-Since) on the first hop.
	ETag, LastModified string
	// CheckRedirect, if set, is called before following each redirect; an
	// error stops the fetch and the 3xx response is returned with it.
	CheckRedirect func(ctx context.Context, next *url.URL) error
	// SkipBody, if set, is called with the final response's headers; true
	// means the body is not downloaded.
	SkipBody func(status int, h http.Header) bool
	// MaxBody overrides the decoded size cap when positive.
	MaxBody int64
	// Addr, if valid, pins the connection to this address of the host (the
	// one politeness reserved); it is still checked by the egress guard.
	Addr netip.Addr
	// RedirectDelay spaces the hops of a redirect chain: each is another
	// request to the server, which a polite crawler makes only after its
	// minimum delay.
	RedirectDelay time.Duration
}

// MaxHeaderBytes bounds the status line and headers of a response, in
// bytes; a response with more fails with ErrHeaderTooLarge. Set
// explicitly because net/http's client default (Transport
// MaxResponseHeaderBytes 0) is 10 MiB, and http.DefaultMaxHeaderBytes
// (1 MiB) is its server's limit for requests: with up to Workers fetches
// at once, a hostile server could make the crawler hold tens of MiB of
// headers. Real sites send a few KiB; browsers refuse far less than 10
// MiB too (Chromium: 256 KiB). 64 KiB leaves room for long cookies and
// CSP lines; over HTTP/2 it is announced as SETTINGS_MAX_HEADER_LIST_SIZE.
const MaxHeaderBytes = 64 << 10

// Timing records where the time of the last request of a fetch went, for
// calibration. DNS and Connect are zero on a reused connection.
type Timing struct {
	Start   time.Time
	DNS     time.Duration
	Connect time.Duration
	TLS     time.Duration
	TTFB    time.Duration // request sent to first response byte
	Total   time.Duration // whole fetch including redirects and body
	Remote  netip.AddrPort
	Reused  bool
	Proto   string

	connStart time.Time // when the TCP connect that succeeded began (Probe's window)
	mu        sync.Mutex
}

// Response is a fetched resource.
type Response struct {
	URL       *url.URL // final URL after redirects
	Status    int
	Header    http.Header
	Body      []byte // decoded body, at most the cap
	Truncated bool   // a cap cut the body
	WireBytes int64  // bytes read from the network for all hops (headers excluded)
	Redirects []*url.URL
	Timing    *Timing
}

// NotModified reports a 304 answer to a conditional request.
func (r *Response) NotModified() bool { return r.Status == http.StatusNotModified }

var _ io.Closer = (*Fetcher)(nil)

// NewFetcher builds a Fetcher from the fetch-related options (UserAgent,
// SourceAddr, DNS, AllowPrivateNetworks, RootCAs, Timeouts, MaxBodySize,
// MaxRedirects); other options are accepted and ignored.
func NewFetcher(opts ...Option) (*Fetcher, error) {
	c := defaults()
	if err := check.Apply(c, opts, c.validate); err != nil {
		return nil, err
	}
	return newFetcher(c), nil
}

func newFetcher(c *config) *Fetcher {
	f := &Fetcher{cfg: c, dns: newDNSCache(c.resolver)}
	f.tr = &http.Transport{
		Proxy:                  nil, // a proxy would defeat the egress guard
		DialContext:            f.dial,
		ForceAttemptHTTP2:      true,
		TLSClientConfig:        &tls.Config{RootCAs: c.rootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    c.connectTO,
		ResponseHeaderTimeout:  c.headerTO,
		ExpectContinueTimeout:  time.Second,
		DisableCompression:     true, // we decode ourselves, with caps
		MaxIdleConns:           256,
		MaxIdleConnsPerHost:    c.perHost,
		MaxConnsPerHost:        c.perHost + 1, // the +1 lets robots.txt and probes pass a busy host
		IdleConnTimeout:        30 * time.Second,
		MaxResponseHeaderBytes: MaxHeaderBytes,
	}
	f.client = &http.Client{
		Transport:     f.tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	f.probe = &http.Client{
		Transport: &http.Transport{
			Proxy:                  nil,
			DialContext:            f.dial,
			TLSClientConfig:        f.tr.TLSClientConfig,
			TLSHandshakeTimeout:    c.connectTO,
			ResponseHeaderTimeout:  c.headerTO,
			DisableKeepAlives:      true,
			DisableCompression:     true,
			MaxResponseHeaderBytes: MaxHeaderBytes,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return f
}

// Close closes idle connections. It is safe to call more than once.
func (f *Fetcher) Close() error {
	f.closeOnce.Do(f.tr.CloseIdleConnections)
	return nil
}

// UserAgent is the User-Agent header sent.
func (f *Fetcher) UserAgent() string { return f.cfg.userAgent() }

// Resolve returns the addresses of host that the egress guard allows, using
// a small cache. It fails with ErrForbiddenDestination if there are none.
func (f *Fetcher) Resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	ips, err := f.lookup(ctx, host)
	if err != nil {
		return nil, err
	}
	var ok []netip.Addr
	var first error
	for _, ip := range ips {
		if err := f.cfg.policy.CheckAddr(ip); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		if f.cfg.source.IsValid() && f.cfg.source.Unmap().Is4() != ip.Unmap().Is4() {
			continue // cannot reach this family from our source address
		}
		ok = append(ok, ip.Unmap())
	}
	if len(ok) == 0 {
		if first == nil {
			first = fmt.Errorf("%w: no usable address for %s", ErrForbiddenDestination, host)
		}
		return nil, first
	}
	return ok, nil
}

func (f *Fetcher) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	return LookupAddrs(ctx, f.dns, host)
}

type ctxKey int

const (
	timingKey ctxKey = iota
	pinKey
)

func (f *Fetcher) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("bad port %q", port)
	}
	if !f.cfg.policy.PortAllowed(uint16(pn)) {
		return nil, fmt.Errorf("%w: port %d", ErrForbiddenDestination, pn)
	}
	tm, _ := ctx.Value(timingKey).(*Timing)
	t0 := time.Now()
	ips, err := f.Resolve(ctx, host)
	if tm != nil {
		tm.mu.Lock()
		tm.DNS = time.Since(t0)
		tm.mu.Unlock()
	}
	if err != nil {
		return nil, err
	}
	if pin, ok := ctx.Value(pinKey).(netip.Addr); ok && pin.IsValid() {
		for _, ip := range ips {
			if ip == pin {
				ips = []netip.Addr{pin}
				break
			}
		}
	}
	d := net.Dialer{
		Timeout:   f.cfg.connectTO,
		KeepAlive: 30 * time.Second,
		Control:   f.cfg.policy.Control, // re-checked on the exact address dialled
	}
	if f.cfg.source.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: f.cfg.source.AsSlice()}
	}
	var errs []error
	for i, ip := range ips {
		if i == 2 {
			break // two addresses are enough; do not hammer a dead host
		}
		t1 := time.Now()
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(ip, uint16(pn)).String())
		if err == nil {
			if tm != nil {
				tm.mu.Lock()
				tm.Connect, tm.connStart = time.Since(t1), t1
				tm.mu.Unlock()
			}
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// Fetch performs req, following up to MaxRedirects redirects. It returns an
// error for transport failures, refused destinations and redirect problems;
// HTTP error statuses are not errors. With ErrBodyTooLarge,
// ErrRedirectRefused and ErrTooManyRedirects the response is returned too.
func (f *Fetcher) Fetch(ctx context.Context, req FetchRequest) (*Response, error) {
	if req.URL == nil {
		return nil, fmt.Errorf("%w: no url", ErrBadRequest)
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.fetchTO)
	defer cancel()
	tm := &Timing{Start: time.Now()}
	ctx = context.WithValue(ctx, timingKey, tm)
	if req.Addr.IsValid() {
		ctx = context.WithValue(ctx, pinKey, req.Addr.Unmap())
	}
	res := &Response{Timing: tm}
	defer func() {
		tm.mu.Lock()
		tm.Total = time.Since(tm.Start)
		tm.mu.Unlock()
	}()
	cur := req.URL
	method := http.MethodGet
	if req.Head {
		method = http.MethodHead
	}
	for hop := 0; ; hop++ {
		if cur.Scheme != "http" && cur.Scheme != "https" {
			return res, fmt.Errorf("%w: %q", ErrScheme, cur.Scheme)
		}
		hr, err := http.NewRequestWithContext(f.traced(ctx, tm), method, cur.String(), nil)
		if err != nil {
			return res, fmt.Errorf("building request: %w", err)
		}
		hr.Header.Set("User-Agent", f.cfg.userAgent())
		hr.Header.Set("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,application/rss+xml,application/atom+xml,text/plain;q=0.8,*/*;q=0.5")
		hr.Header.Set("Accept-Encoding", "gzip, br, zstd")
		if hop == 0 {
			if req.ETag != "" {
				hr.Header.Set("If-None-Match", req.ETag)
			}
			if req.LastModified != "" {
				hr.Header.Set("If-Modified-Since", req.LastModified)
			}
		}
		sent := time.Now()
		hresp, err := f.client.Do(hr)
		if err != nil {
			err = unwrapURLError(err)
			if headerTooLarge(err) {
				err = fmt.Errorf("%w: %w", ErrHeaderTooLarge, err)
			}
			return res, fmt.Errorf("fetching %s: %w", cur.Redacted(), err)
		}
		res.URL, res.Status, res.Header = cur, hresp.StatusCode, hresp.Header
		tm.mu.Lock()
		tm.TTFB = time.Since(sent)
		tm.Proto = hresp.Proto
		tm.mu.Unlock()
		loc := hresp.Header.Get("Location")
		if isRedirect(hresp.StatusCode) && loc != "" {
			res.WireBytes += drain(hresp.Body)
			next, err := cur.Parse(loc)
			if err != nil {
				return res, fmt.Errorf("%w: bad location %q", ErrRedirectRefused, loc)
			}
			next.Fragment, next.RawFragment = "", ""
			if hop >= f.cfg.maxRedirects {
				return res, ErrTooManyRedirects
			}
			if next.Scheme != "http" && next.Scheme != "https" {
				return res, fmt.Errorf("%w: redirect to scheme %q", ErrRedirectRefused, next.Scheme)
			}
			if req.CheckRedirect != nil {
				if err := req.CheckRedirect(ctx, next); err != nil {
					return res, fmt.Errorf("%w: %w", ErrRedirectRefused, err)
				}
			}
			if d := req.RedirectDelay; d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return res, ctx.Err()
				}
			}
			res.Redirects = append(res.Redirects, next)
			if hresp.StatusCode == http.StatusSeeOther && method != http.MethodHead {
				method = http.MethodGet
			}
			cur = next
			continue
		}
		err = f.readBody(res, hresp, req)
		return res, err
	}
}

func (f *Fetcher) traced(ctx context.Context, tm *Timing) context.Context {
	var tlsStart time.Time
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(ci httptrace.GotConnInfo) {
			tm.mu.Lock()
			defer tm.mu.Unlock()
			tm.Reused = ci.Reused
			if ci.Reused {
				tm.DNS, tm.Connect, tm.TLS = 0, 0, 0
			}
			if ap, err := netip.ParseAddrPort(ci.Conn.RemoteAddr().String()); err == nil {
				tm.Remote = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
			}
		},
		TLSHandshakeStart: func() { tlsStart = time.Now() },
		TLSHandshakeDone: func(tls.ConnectionState, error) {
			tm.mu.Lock()
			tm.TLS = time.Since(tlsStart)
			tm.mu.Unlock()
		},
	})
}

func isRedirect(code int) bool {
	switch code {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// drain reads a little of a body so the connection can be reused, then
// closes it.
func drain(b io.ReadCloser) int64 {
	n, _ := io.Copy(io.Discard, io.LimitReader(b, 4<<10))
	b.Close()
	return n
}

// headerTooLarge reports whether err is net/http's refusal of a response
// whose headers exceed MaxHeaderBytes. net/http has no sentinel for it;
// the messages are those of go1.26's transport.go and h2_bundle.go, and
// TestHeaderLimit fails if they change.
func headerTooLarge(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "server response headers exceeded") ||
		strings.Contains(msg, "response header list larger than advertised limit")
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (f *Fetcher) readBody(res *Response, hresp *http.Response, req FetchRequest) error {
	defer hresp.Body.Close()
	if req.Head || hresp.StatusCode == http.StatusNotModified || hresp.StatusCode == http.StatusNoContent {
		return nil
	}
	if req.SkipBody != nil && req.SkipBody(hresp.StatusCode, hresp.Header) {
		return nil
	}
	if hresp.ContentLength > f.cfg.maxWire {
		res.Truncated = true
		return fmt.Errorf("%w: content-length %d", ErrBodyTooLarge, hresp.ContentLength)
	}
	limit := f.cfg.maxDecoded
	if req.MaxBody > 0 {
		limit = req.MaxBody
	}
	wire := &countingReader{r: io.LimitReader(hresp.Body, f.cfg.maxWire+1)}
	defer func() { res.WireBytes += wire.n }()
	r, closeDec, err := contentDecoder(wire, hresp.Header.Values("Content-Encoding"))
	if err != nil {
		return err
	}
	defer closeDec()
	size := 32 << 10
	if cl := hresp.ContentLength; cl > 0 && r == io.Reader(wire) {
		// Uncompressed with a known length: one allocation instead of a
		// doubling series (one spare byte to see EOF or an overlong body).
		size = int(min(cl, limit)) + 1
	}
	body, err := readCapped(r, limit, size)
	if int64(len(body)) > limit {
		body, res.Truncated = body[:limit], true
	}
	if wire.n > f.cfg.maxWire {
		res.Truncated = true
	}
	res.Body = body
	if err != nil {
		if res.Truncated || errors.Is(err, io.ErrUnexpectedEOF) && wire.n > f.cfg.maxWire {
			return nil // a cut compressed stream ends badly; keep what decoded
		}
		if corruptCoding(err) {
			// The bytes are not what the Content-Encoding says: the
			// same bytes would come again.
			return fmt.Errorf("%w: %w", ErrContentEncoding, err)
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			res.Truncated = true
			return fmt.Errorf("reading body: %w", err)
		}
		return fmt.Errorf("reading body: %w", err)
	}
	return nil
}

// readCapped reads r until EOF or limit+1 bytes, into a buffer that
// starts at size bytes and doubles but never grows past limit+1: a body at
// the cap (a gzip bomb, a huge page) holds limit+1 bytes while it waits for
// a processor, not the up to twice that a doubling buffer would.
func readCapped(r io.Reader, limit int64, size int) ([]byte, error) {
	size = int(min(int64(max(size, 512)), limit+1))
	b := make([]byte, 0, size)
	for empty := 0; int64(len(b)) <= limit; {
		if len(b) == cap(b) {
			nb := make([]byte, len(b), int(min(int64(2*cap(b)), limit+1)))
			copy(nb, b)
			b = nb
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		switch {
		case err == io.EOF:
			return b, nil
		case err != nil:
			return b, err
		case n > 0:
			empty = 0
		case empty > 100: // as bufio: a reader that never moves
			return b, io.ErrNoProgress
		default:
			empty++
		}
	}
	return b, nil
}

// corruptCoding reports whether err is a decoder's verdict on the bytes
// (a corrupt gzip, deflate, brotli or zstd stream), not a transport error.
func corruptCoding(err error) bool {
	var flateErr flate.CorruptInputError
	if errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) || errors.As(err, &flateErr) ||
		errors.Is(err, zstd.ErrMagicMismatch) || errors.Is(err, zstd.ErrBlockTooSmall) ||
		errors.Is(err, zstd.ErrReservedBlockType) || errors.Is(err, zstd.ErrCompressedSizeTooBig) ||
		errors.Is(err, zstd.ErrUnexpectedBlockSize) || errors.Is(err, zstd.ErrWindowSizeTooSmall) ||
		errors.Is(err, zstd.ErrCRCMismatch) || errors.Is(err, zstd.ErrWindowSizeExceeded) ||
		errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrUnknownDictionary) ||
		errors.Is(err, zstd.ErrFrameSizeExceeded) || errors.Is(err, zstd.ErrFrameSizeMismatch) {
		return true
	}
	// brotli's errors are plain strings prefixed with the package name.
	return strings.HasPrefix(err.Error(), "brotli: ")
}

// contentDecoder stacks decompressors for the Content-Encoding values, outermost
// last, at most two layers.
func contentDecoder(r io.Reader, values []string) (io.Reader, func(), error) {
	var encs []string
	for _, v := range values {
		for _, e := range strings.Split(v, ",") {
			if e = strings.ToLower(strings.TrimSpace(e)); e != "" && e != "identity" {
				encs = append(encs, e)
			}
		}
	}
	if len(encs) > 2 {
		return nil, nil, fmt.Errorf("%w: %d layers", ErrContentEncoding, len(encs))
	}
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	for i := len(encs) - 1; i >= 0; i-- {
		switch encs[i] {
		case "gzip", "x-gzip":
			z, err := gzip.NewReader(r)
			if err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("%w: gzip: %v", ErrContentEncoding, err)
			}
			closers = append(closers, func() { z.Close() })
			r = z
		case "br":
			r = brotli.NewReader(r)
		case "zstd":
			// Bounded window and memory: a hostile frame cannot make us
			// allocate more than 32 MiB.
			z, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(8<<20), zstd.WithDecoderMaxMemory(32<<20), zstd.WithDecoderLowmem(true))
			if err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("%w: zstd: %v", ErrContentEncoding, err)
			}
			closers = append(closers, z.Close)
			r = z
		default:
			closeAll()
			return nil, nil, fmt.Errorf("%w: %q", ErrContentEncoding, encs[i])
		}
	}
	return r, closeAll, nil
}

// RetryAfter parses a Retry-After header (seconds or an HTTP date) relative
// to now. ok is false if the header is absent or malformed.
func RetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		if n > 1<<31 {
			n = 1 << 31
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if d = t.Sub(now); d < 0 {
		d = 0
	}
	return d, true
}

// dnsCache is a small bounded cache of host lookups.
type dnsCache struct {
	r  Resolver
	mu sync.Mutex
	m  map[string]dnsEntry
}

type dnsEntry struct {
	addrs   []netip.Addr
	err     error
	expires time.Time
}

const (
	dnsCacheSize = 4096
	dnsTTL       = 5 * time.Minute
	dnsNegTTL    = time.Minute
)

func newDNSCache(r Resolver) *dnsCache {
	if r == nil {
		r = net.DefaultResolver
	}
	return &dnsCache{r: r, m: make(map[string]dnsEntry)}
}

// LookupNetIP resolves host (network is always "ip"), from the cache while
// its answer is fresh. The slice returned is shared: read it only.
func (c *dnsCache) LookupNetIP(ctx context.Context, _, host string) ([]netip.Addr, error) {
	host = strings.ToLower(host)
	now := time.Now()
	c.mu.Lock()
	e, ok := c.m[host]
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.addrs, e.err
	}
	addrs, err := c.r.LookupNetIP(ctx, "ip", host)
	if err != nil && ctx.Err() != nil {
		return nil, err // our deadline, not the name's fault: do not cache
	}
	if err == nil && len(addrs) == 0 {
		err = fmt.Errorf("no addresses for %s", host)
	}
	ttl := dnsTTL
	if err != nil {
		ttl = dnsNegTTL
	}
	c.mu.Lock()
	if len(c.m) >= dnsCacheSize {
		for k, v := range c.m {
			if now.After(v.expires) || len(c.m) >= dnsCacheSize {
				delete(c.m, k)
			}
			if len(c.m) < dnsCacheSize*3/4 {
				break
			}
		}
	}
	c.m[host] = dnsEntry{addrs: addrs, err: err, expires: now.Add(ttl)}
	c.mu.Unlock()
	return addrs, err
}
