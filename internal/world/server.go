package world

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// Running is a world being served: one HTTP listener per site address on
// one port, a DNS server, the latency model applied per connection, and
// the counters. Its methods are safe for concurrent use. Close stops it.
type Running struct {
	w     *World
	cfg   config
	port  int
	log   *slog.Logger
	ctx   context.Context // cancelled by Close: wakes every sleeping handler
	stop  context.CancelFunc
	wg    sync.WaitGroup // serving goroutines
	srv   *http.Server
	dns   []*dns.Server
	stats []*siteStats // by site id
	cache pageCache
	start time.Time // wall time of Start

	hostile    atomic.Bool
	dnsQueries atomic.Int64
	extraMu    sync.RWMutex
	extra      map[netip.Addr]float64 // ms added to every RTT from a source address (SetExtraRTT)

	gate      sync.RWMutex // guards closed against handler entry
	closed    bool
	handlers  sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// maxBindTries bounds the attempts to find a free port for Port(0).
const maxBindTries = 16

// Start serves the world on loopback until Close: every site address
// listens on the world's port (or the Port option's), the DNS server on
// its address, TCP and UDP. It returns once everything is bound and
// serving, or an error wrapping ErrAddrInUse when an address and port are
// taken (with Port(0) it first retries other ports). ctx bounds the
// start-up only.
func (w *World) Start(ctx context.Context, opts ...Option) (*Running, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	port := w.p.Port
	if cfg.port >= 0 {
		port = cfg.port
	}
	addrs := make([]netip.Addr, 0, len(w.byAddr))
	for a := range w.byAddr {
		addrs = append(addrs, u32addr(a))
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	for _, a := range append(addrs, w.dns) {
		if err := checkLoopback(a); err != nil {
			return nil, err
		}
	}
	if err := ensureFiles(uint64(len(addrs)) + 1024); err != nil {
		return nil, err
	}
	rctx, stop := context.WithCancel(context.Background())
	r := &Running{w: w, cfg: cfg, log: cfg.logger, ctx: rctx, stop: stop, start: time.Now()}
	r.hostile.Store(cfg.hostile)
	r.stats = make([]*siteStats, len(w.sites))
	for i := range r.stats {
		r.stats[i] = newSiteStats()
	}
	var (
		lns  []net.Listener
		dnsT net.Listener
		dnsU net.PacketConn
		err  error
	)
	auto := port == 0
	tries := 1
	if auto {
		tries = maxBindTries
	}
	for try := 0; try < tries; try++ {
		lns, dnsT, dnsU, port, err = bindAll(ctx, addrs, w.dns, auto, port)
		if err == nil || !errors.Is(err, ErrAddrInUse) {
			break
		}
	}
	if err != nil {
		stop()
		return nil, err
	}
	r.port = port
	r.srv = &http.Server{
		Handler:           http.HandlerFunc(r.serveHTTP),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          log.New(io.Discard, "", 0),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if sc, ok := c.(*sconn); ok {
				return context.WithValue(ctx, connKey{}, sc)
			}
			return ctx
		},
		BaseContext: func(net.Listener) context.Context { return rctx },
	}
	for _, ln := range lns {
		r.wg.Go(func() { _ = r.srv.Serve(ln) })
	}
	if err := r.startDNS(dnsT, dnsU); err != nil {
		return nil, errors.Join(err, r.Close())
	}
	r.log.Info("world serving", "sites", len(w.sites), "addresses", len(addrs), "port", port, "dns", r.DNS().String(), "time_scale", cfg.scale)
	return r, nil
}

// bindAll binds every site address on port (0: the port the DNS TCP
// listener gets) and the DNS server, or nothing.
func bindAll(ctx context.Context, addrs []netip.Addr, dnsAddr netip.Addr, auto bool, port int) (lns []net.Listener, dnsT net.Listener, dnsU net.PacketConn, p int, err error) {
	var lc net.ListenConfig
	closeAll := func() {
		for _, l := range lns {
			l.Close()
		}
		if dnsT != nil {
			dnsT.Close()
		}
		if dnsU != nil {
			dnsU.Close()
		}
	}
	inUse := func(a netip.Addr, p int, e error) error {
		if errors.Is(e, syscall.EADDRINUSE) {
			return fmt.Errorf("%w: %s (another world or process holds it; choose another port)", ErrAddrInUse, netip.AddrPortFrom(a, uint16(p)))
		}
		return fmt.Errorf("binding %s: %w", netip.AddrPortFrom(a, uint16(p)), e)
	}
	if auto {
		port = 0
	}
	l, e := lc.Listen(ctx, "tcp4", netip.AddrPortFrom(dnsAddr, uint16(port)).String())
	if e != nil {
		return nil, nil, nil, 0, inUse(dnsAddr, port, e)
	}
	dnsT = l
	port = l.Addr().(*net.TCPAddr).Port
	pc, e := lc.ListenPacket(ctx, "udp4", netip.AddrPortFrom(dnsAddr, uint16(port)).String())
	if e != nil {
		closeAll()
		return nil, nil, nil, 0, inUse(dnsAddr, port, e)
	}
	dnsU = pc
	lns = make([]net.Listener, 0, len(addrs))
	for _, a := range addrs {
		l, e := lc.Listen(ctx, "tcp4", netip.AddrPortFrom(a, uint16(port)).String())
		if e != nil {
			closeAll()
			return nil, nil, nil, 0, inUse(a, port, e)
		}
		lns = append(lns, &listener{Listener: l, local: a})
	}
	return lns, dnsT, dnsU, port, nil
}

func checkLoopback(a netip.Addr) error {
	a = a.Unmap()
	if !a.Is4() || a.As4()[0] != 127 {
		return fmt.Errorf("%w: %s", ErrNotLoopback, a)
	}
	return nil
}

// Close stops the world: it closes every listener and connection, wakes
// and waits for every handler (slow drips included) and the serving
// goroutines. It is safe to call more than once; later calls return the
// first call's result.
func (r *Running) Close() error {
	r.closeOnce.Do(func() {
		r.gate.Lock()
		r.closed = true
		r.gate.Unlock()
		r.stop()
		var errs []error
		if r.srv != nil {
			errs = append(errs, r.srv.Close())
		}
		for _, s := range r.dns {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			errs = append(errs, s.ShutdownContext(ctx))
			cancel()
		}
		r.handlers.Wait()
		r.wg.Wait()
		r.closeErr = errors.Join(errs...)
		r.log.Info("world stopped")
	})
	return r.closeErr
}

// World returns the world being served.
func (r *Running) World() *World { return r.w }

// Port returns the port every site and the DNS server listen on.
func (r *Running) Port() int { return r.port }

// DNS returns the DNS server's address and port (TCP and UDP).
func (r *Running) DNS() netip.AddrPort { return netip.AddrPortFrom(r.w.dns, uint16(r.port)) }

// TimeScale returns the factor applied to every injected delay.
func (r *Running) TimeScale() float64 { return r.cfg.scale }

// Scaled returns d, an unscaled duration of the model, as it passes on
// the wall clock in this run.
func (r *Running) Scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) * r.cfg.scale)
}

// Now returns the world clock.
func (r *Running) Now() time.Time {
	if r.cfg.clock != nil {
		return r.cfg.clock()
	}
	wall := time.Now()
	if r.cfg.scale == 0 {
		return wall
	}
	return r.start.Add(time.Duration(float64(wall.Sub(r.start)) / r.cfg.scale))
}

// URL returns the home page URL of s in this run.
func (r *Running) URL(s Site) string { return s.URL(r.port) }

// SetHostile switches the hostile sites' misbehaviour on or off; it
// applies to requests that arrive afterwards.
func (r *Running) SetHostile(on bool) { r.hostile.Store(on) }

// Hostile reports whether the hostile sites misbehave.
func (r *Running) Hostile() bool { return r.hostile.Load() }

// SetExtraRTT adds d to the round-trip time of every request from source
// address src that arrives afterwards, as if src's access link had become
// slower (0 removes it). It is a test hook for changing the world while it
// runs — calibration must notice a node whose latency changed — and it
// applies to this Running only: the World's oracle (RTT, RTTAddr, Optimal)
// does not see it; add ExtraRTT(src) to its answers.
func (r *Running) SetExtraRTT(src netip.Addr, d time.Duration) {
	r.extraMu.Lock()
	defer r.extraMu.Unlock()
	if r.extra == nil {
		r.extra = map[netip.Addr]float64{}
	}
	if d <= 0 {
		delete(r.extra, src.Unmap())
		return
	}
	r.extra[src.Unmap()] = float64(d) / float64(time.Millisecond)
}

// ExtraRTT returns the round-trip time SetExtraRTT added to src, unscaled.
func (r *Running) ExtraRTT(src netip.Addr) time.Duration {
	return msDur(r.extraMs(src))
}

func (r *Running) extraMs(src netip.Addr) float64 {
	r.extraMu.RLock()
	defer r.extraMu.RUnlock()
	return r.extra[src.Unmap()]
}

// Counters returns a snapshot of what s served.
func (r *Running) Counters(s Site) Counters {
	if s.ID < 0 || s.ID >= len(r.stats) {
		return Counters{}
	}
	return r.stats[s.ID].snapshot()
}

// Totals returns the counters of all sites added up; MaxConns is the
// largest of any one site, per source likewise.
func (r *Running) Totals() Counters {
	t := Counters{Status: map[int]int64{}, Sources: map[netip.Addr]SourceCounters{}}
	for _, st := range r.stats {
		c := st.snapshot()
		t.Requests += c.Requests
		t.Bytes += c.Bytes
		t.Disallowed += c.Disallowed
		t.MaxConns = max(t.MaxConns, c.MaxConns)
		for k, v := range c.Status {
			t.Status[k] += v
		}
		for a, s := range c.Sources {
			x := t.Sources[a]
			x.Requests += s.Requests
			x.Bytes += s.Bytes
			x.Disallowed += s.Disallowed
			x.MaxConns = max(x.MaxConns, s.MaxConns)
			if s.MinGap > 0 && (x.MinGap == 0 || s.MinGap < x.MinGap) {
				x.MinGap = s.MinGap
			}
			t.Sources[a] = x
		}
	}
	return t
}

// ResetCounters clears every site's counters.
func (r *Running) ResetCounters() {
	for _, st := range r.stats {
		st.reset()
	}
}

// DNSQueries returns the number of DNS queries answered.
func (r *Running) DNSQueries() int64 { return r.dnsQueries.Load() }

// ---- connections ----

type connKey struct{}

// listener wraps a site address's listener to record, per connection,
// when it was accepted and from where.
type listener struct {
	net.Listener
	local netip.Addr
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	src := netip.Addr{}
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		src = ta.AddrPort().Addr().Unmap()
	}
	return &sconn{Conn: c, accepted: time.Now(), src: src, local: l.local}, nil
}

// sconn is one accepted connection.
type sconn struct {
	net.Conn
	accepted time.Time
	src      netip.Addr
	local    netip.Addr
	nreq     atomic.Int64 // requests read; an HTTP/1.1 connection serves them one by one

	mu     sync.Mutex
	site   *siteStats // the site the connection is counted against
	closed bool       // no longer counted as open
}

// attach counts the connection as open against st, once.
func (c *sconn) attach(st *siteStats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.site != nil || c.closed {
		return
	}
	c.site = st
	st.connOpen(c.src)
}

// detach counts the connection as closed, once.
func (c *sconn) detach() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	if c.site != nil {
		c.site.connClose(c.src)
	}
}

func (c *sconn) Close() error {
	c.detach()
	return c.Conn.Close()
}

// ---- HTTP ----

// reply is a response prepared before the latency wait.
type reply struct {
	status int
	body   []byte
	stream func(ctx context.Context, w io.Writer, pace func(n int) error) error // hostile bodies
}

// serveHTTP serves one request: it finds the site from the local address
// and Host, prepares the reply, waits for the modelled time to first byte
// (two RTTs from accept for a connection's first request, the handshake
// and the request; one RTT for the next), then writes the body paced at
// the path's bandwidth.
func (r *Running) serveHTTP(rw http.ResponseWriter, req *http.Request) {
	r.gate.RLock()
	if r.closed {
		r.gate.RUnlock()
		http.Error(rw, "world closed", http.StatusServiceUnavailable)
		return
	}
	r.handlers.Add(1)
	r.gate.RUnlock()
	defer r.handlers.Done()

	arrived := time.Now()
	c, _ := req.Context().Value(connKey{}).(*sconn)
	if c == nil {
		http.Error(rw, "no connection", http.StatusInternalServerError)
		return
	}
	first := c.nreq.Add(1) == 1
	s := r.siteFor(c.local, req.Host)
	if s == nil {
		http.Error(rw, "no site here", http.StatusMisdirectedRequest)
		return
	}
	st := r.stats[s.id]
	c.attach(st)
	pq := req.URL.RequestURI()
	st.request(c.src, arrived, r.cfg.scale, s.disallowed(pq) && req.URL.Path != "/robots.txt")

	x, y := r.w.endpoint(c.src), r.w.endpointU(mustU32(c.local))
	rtt := r.w.sampleRTT(x, y, rand.NormFloat64()) + r.extraMs(c.src)
	bw := r.w.bandwidth(x, y, rtt)
	ready := arrived.Add(r.scaledMs(rtt))
	if first {
		hs := c.accepted.Add(r.scaledMs(rtt))
		if hs.After(arrived) {
			ready = hs.Add(r.scaledMs(rtt))
		}
	}

	rep := r.respond(rw.Header(), req, s)
	ctx := req.Context()
	if !r.sleepUntil(ctx, ready) {
		st.done(c.src, 499, 0)
		return
	}
	// A client that asked to close may open its next connection as soon
	// as it has the last byte, before this handler returns: stop counting
	// the connection as open just before the last byte goes.
	last := func() {
		if req.Close {
			c.detach()
		}
	}
	n := int64(0)
	if req.Method == http.MethodHead || (rep.stream == nil && len(rep.body) == 0) {
		last()
		rw.WriteHeader(rep.status)
	} else {
		rw.WriteHeader(rep.status)
		rc := http.NewResponseController(rw)
		if rep.stream != nil || len(rep.body) > r.chunkSize(bw) {
			// The headers arrive at the time to first byte; a body that
			// fits in one chunk goes with them once it has arrived.
			_ = rc.Flush()
		}
		t0 := time.Now()
		sent := 0
		pace := func(k int) error {
			sent += k
			if r.cfg.scale == 0 || bw <= 0 {
				return nil
			}
			due := t0.Add(time.Duration(float64(sent) / bw * r.cfg.scale * float64(time.Second)))
			if !r.sleepUntil(ctx, due) {
				return context.Canceled
			}
			return nil
		}
		cw := &countWriter{w: rw, rc: rc, bw: bw}
		if rep.stream != nil {
			_ = rep.stream(ctx, cw, pace)
		} else {
			r.writePaced(cw, rep.body, pace, last)
		}
		n = cw.n
	}
	st.done(c.src, rep.status, n)
	last()
	if r.log.Enabled(ctx, slog.LevelDebug) {
		r.log.Debug("request", "host", s.name, "source", c.src, "url", pq, "status", rep.status, "rtt_ms", rtt, "bytes", n)
	}
}

func mustU32(a netip.Addr) uint32 {
	u, _ := addrU32(a)
	return u
}

func (r *Running) scaledMs(ms float64) time.Duration {
	return time.Duration(ms * r.cfg.scale * float64(time.Millisecond))
}

// sleepUntil waits until t, or returns false when ctx or the world is
// done first.
func (r *Running) sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil && r.ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	case <-r.ctx.Done():
		return false
	}
}

// writePaced writes body in chunks of about 10 ms of transfer each, each
// once the path would have carried it; last runs before the last chunk.
func (r *Running) writePaced(w *countWriter, body []byte, pace func(int) error, last func()) {
	chunk := r.chunkSize(w.bw)
	if chunk <= 0 {
		chunk = len(body)
	}
	for off := 0; off < len(body); {
		k := min(chunk, len(body)-off)
		if pace(k) != nil {
			return
		}
		if off+k == len(body) {
			last()
		}
		if _, err := w.Write(body[off : off+k]); err != nil {
			return
		}
		off += k
	}
}

// chunkSize returns the bytes of about 10 ms (wall) of transfer at bw,
// 4 KiB to 256 KiB, or 0 when bodies are not paced.
func (r *Running) chunkSize(bw float64) int {
	if r.cfg.scale == 0 || bw <= 0 {
		return 0
	}
	return min(max(int(bw*0.010/r.cfg.scale), 4<<10), 256<<10)
}

// countWriter counts and flushes what it writes.
type countWriter struct {
	w  io.Writer
	rc *http.ResponseController
	bw float64 // the path's bandwidth, bytes/s
	n  int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if err == nil {
		err = c.rc.Flush()
	}
	return n, err
}

// siteFor returns the site served at local for the Host header: the one
// named, else the address's first site (the default virtual host).
func (r *Running) siteFor(local netip.Addr, hostHeader string) *siteRec {
	ss := r.w.byAddr[mustU32(local)]
	if len(ss) == 0 {
		return nil
	}
	if len(ss) > 1 {
		h := hostOnly(hostHeader)
		for _, s := range ss {
			if s.name == h || slices.Contains(s.aliases, h) {
				return s
			}
		}
	}
	return ss[0]
}

func hostOnly(hostHeader string) string {
	h := hostHeader
	if hh, _, err := net.SplitHostPort(hostHeader); err == nil {
		h = hh
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// respond prepares the reply to req on site s: headers in h, status and
// body (or a stream for a hostile site).
func (r *Running) respond(h http.Header, req *http.Request, s *siteRec) reply {
	now := r.Now()
	h.Set("Date", now.UTC().Format(http.TimeFormat))
	h.Set("Server", "micra-world")
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		return r.text(h, http.StatusMethodNotAllowed, "method not allowed\n")
	}
	host := hostOnly(req.Host)
	if slices.Contains(s.aliases, host) {
		h.Set("Location", r.w.siteBase(s, r.port, false)+req.URL.RequestURI())
		return r.text(h, http.StatusMovedPermanently, "moved\n")
	}
	st := r.stats[s.id]
	st.mu.Lock()
	counter := uint64(st.req)
	st.mu.Unlock()
	rc := renderCtx{now: now.Unix(), base: r.w.siteBase(s, r.port, false), port: r.port, counter: counter}
	path := req.URL.Path
	if path == "/robots.txt" {
		body, status := r.w.robotsTxt(s, rc.base)
		if status != 200 {
			return r.text(h, status, http.StatusText(status)+"\n")
		}
		h.Set("Content-Type", "text/plain; charset=utf-8")
		return r.finish(h, req, s, status, []byte(body))
	}
	if s.flaky && mix(s.seed, "flaky", counter)%5 == 0 {
		// Two minutes of the world's clock: scaled like every delay, or a
		// crawler honouring it would wait real minutes in a world that
		// runs 1/scale times faster.
		h.Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(120*r.cfg.scale)))))
		return r.text(h, http.StatusServiceUnavailable, "service temporarily unavailable\n")
	}
	if s.hostile != NotHostile && r.hostile.Load() {
		return r.hostileReply(h, req, s, rc)
	}
	return r.page(h, req, s, rc)
}

// page prepares the reply to req for a page, sitemap, feed or old URL of
// s: what every site serves but robots.txt.
func (r *Running) page(h http.Header, req *http.Request, s *siteRec, rc renderCtx) reply {
	path := req.URL.Path
	var b bytes.Buffer
	switch {
	case s.sitemap && (path == "/sitemap.xml" || strings.HasPrefix(path, "/sitemap-") && strings.HasSuffix(path, ".xml")):
		part := 0
		if path != "/sitemap.xml" {
			k, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(path, "/sitemap-"), ".xml"))
			if err != nil || k < 1 {
				return r.notFound(h)
			}
			part = k
		}
		if !r.w.sitemap(&b, s, rc, part) {
			return r.notFound(h)
		}
		h.Set("Content-Type", "application/xml")
		return r.finish(h, req, s, 200, b.Bytes())
	case s.feeds && path == "/feed.xml":
		r.w.rss(&b, s, rc)
		h.Set("Content-Type", "application/rss+xml")
		return r.finish(h, req, s, 200, b.Bytes())
	case s.feeds && path == "/atom.xml":
		r.w.atom(&b, s, rc)
		h.Set("Content-Type", "application/atom+xml")
		return r.finish(h, req, s, 200, b.Bytes())
	case strings.HasPrefix(path, "/old/"):
		rest := strings.TrimPrefix(req.URL.RequestURI(), "/old")
		u, err := url.ParseRequestURI(rest)
		if err != nil {
			return r.notFound(h)
		}
		if _, ok := s.page(u.Path, u.Query()); !ok && !strings.HasPrefix(u.Path, "/old/") {
			return r.notFound(h)
		}
		codes := []int{301, 302, 307, 308}
		h.Set("Location", rest)
		return r.text(h, codes[mix(s.seed, "redir", uint64(len(rest)))%4], "moved\n")
	}
	i, ok := s.page(path, req.URL.Query())
	if !ok {
		return r.notFound(h)
	}
	pi := r.w.pageInfo(s, i)
	if pi.status != 200 {
		return r.text(h, pi.status, "internal server error\n")
	}
	v, mod := pi.version(s, rc.now)
	if s.validators {
		etag := r.w.etag(s, i, v)
		if pi.trivial != 0 {
			etag = "W/" + etag
		}
		h.Set("ETag", etag)
		h.Set("Last-Modified", time.Unix(mod, 0).UTC().Format(http.TimeFormat))
		if notModified(req, etag, mod) {
			return reply{status: http.StatusNotModified}
		}
	}
	h.Set("Content-Type", "text/html; charset=utf-8")
	if pi.trivial != 0 {
		r.w.renderPage(&b, s, i, rc, v, pi)
		return r.finish(h, req, s, 200, b.Bytes())
	}
	// A page without a counter or clock is the same for every request
	// of its version: render and compress it once.
	key := pageKey{site: int32(s.id), page: int32(i), version: v, gzip: s.gzip && acceptsGzip(req.Header.Get("Accept-Encoding"))}
	if body, ok := r.cache.get(key); ok {
		if key.gzip && body.gzip {
			h.Set("Content-Encoding", "gzip")
			h.Add("Vary", "Accept-Encoding")
		}
		h.Set("Content-Length", strconv.Itoa(len(body.b)))
		return reply{status: 200, body: body.b}
	}
	r.w.renderPage(&b, s, i, rc, v, pi)
	rep := r.finish(h, req, s, 200, b.Bytes())
	r.cache.put(key, cached{b: rep.body, gzip: h.Get("Content-Encoding") == "gzip"})
	return rep
}

// pageCacheSize bounds the rendered pages a running world keeps.
const pageCacheSize = 8192

type pageKey struct {
	site, page int32
	version    int64
	gzip       bool // the client accepts gzip and the site uses it
}

type cached struct {
	b    []byte
	gzip bool // b is gzip-coded
}

// pageCache keeps recently rendered pages; the oldest entry goes first.
type pageCache struct {
	mu   sync.Mutex
	m    map[pageKey]cached
	ring []pageKey
	next int
}

func (c *pageCache) get(k pageKey) (cached, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *pageCache) put(k pageKey, v cached) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[pageKey]cached, pageCacheSize)
		c.ring = make([]pageKey, 0, pageCacheSize)
	}
	if _, ok := c.m[k]; ok {
		return
	}
	if len(c.ring) < pageCacheSize {
		c.ring = append(c.ring, k)
	} else {
		delete(c.m, c.ring[c.next])
		c.ring[c.next] = k
		c.next = (c.next + 1) % pageCacheSize
	}
	c.m[k] = v
}

// notModified applies If-None-Match (weak comparison) and, without it,
// If-Modified-Since (RFC 9110 13.1).
func notModified(req *http.Request, etag string, mod int64) bool {
	if inm := req.Header.Get("If-None-Match"); inm != "" {
		if strings.TrimSpace(inm) == "*" {
			return true
		}
		want := strings.TrimPrefix(etag, "W/")
		for _, t := range strings.Split(inm, ",") {
			if strings.TrimPrefix(strings.TrimSpace(t), "W/") == want {
				return true
			}
		}
		return false
	}
	if ims := req.Header.Get("If-Modified-Since"); ims != "" {
		t, err := http.ParseTime(ims)
		return err == nil && mod <= t.Unix()
	}
	return false
}

var gzipPool = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	return zw
}}

// finish sets the length and, when the site and the request agree, gzip
// content coding.
func (r *Running) finish(h http.Header, req *http.Request, s *siteRec, status int, body []byte) reply {
	if s.gzip && len(body) >= 256 && acceptsGzip(req.Header.Get("Accept-Encoding")) {
		var z bytes.Buffer
		zw := gzipPool.Get().(*gzip.Writer)
		zw.Reset(&z)
		_, _ = zw.Write(body)
		_ = zw.Close()
		gzipPool.Put(zw)
		body = z.Bytes()
		h.Set("Content-Encoding", "gzip")
		h.Add("Vary", "Accept-Encoding")
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	return reply{status: status, body: body}
}

// acceptsGzip reports whether an Accept-Encoding value accepts gzip with
// a non-zero quality.
func acceptsGzip(ae string) bool {
	for _, part := range strings.Split(ae, ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		coding = strings.TrimSpace(coding)
		if !strings.EqualFold(coding, "gzip") && !strings.EqualFold(coding, "x-gzip") {
			continue
		}
		for _, p := range strings.Split(params, ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
			if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
				q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				return err == nil && q > 0
			}
		}
		return true
	}
	return false
}

func (r *Running) text(h http.Header, status int, body string) reply {
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	return reply{status: status, body: []byte(body)}
}

func (r *Running) notFound(h http.Header) reply {
	body := "<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head><body><h1>Not Found</h1></body></html>\n"
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	return reply{status: http.StatusNotFound, body: []byte(body)}
}
