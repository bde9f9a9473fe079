package crawl

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/micra-net/micra/internal/poll"
)

// testSink collects what the crawler hands out.
type testSink struct {
	mu      sync.Mutex
	records []Record
	batches int
}

func (s *testSink) Results(_ context.Context, b Batch) error {
	recs, err := DecodeBatch(b.Data)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records = append(s.records, recs...)
	s.batches++
	return nil
}

func (s *testSink) snapshot() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Record(nil), s.records...)
}

func (s *testSink) byURL(path string) []Record {
	recs := s.snapshot()
	var out []Record
	for _, r := range recs {
		if u, err := url.Parse(r.URL); err == nil && u.RequestURI() == path {
			out = append(out, r)
		}
	}
	return out
}

type hostRouter struct{ local string }

func (r hostRouter) Route(u *url.URL, _ netip.Addr) bool { return u.Hostname() == r.local }

// waitFor polls cond for at most 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 20*time.Second, what, poll.True(cond))
}

// waitIdle waits until the frontier is empty and the pipeline drained.
func waitIdle(t *testing.T, c *Crawler) {
	t.Helper()
	stable := 0
	waitFor(t, "idle crawler", func() bool {
		n, _ := c.front.queued()
		if n == 0 && len(c.fetched) == 0 && len(c.records) == 0 && len(c.work) == 0 {
			stable++
		} else {
			stable = 0
		}
		return stable >= 10
	})
}

func newTestCrawler(t *testing.T, sink Sink, opts ...Option) *Crawler {
	t.Helper()
	base := []Option{
		AllowPrivateNetworks(), Politeness(0, 0), Workers(4, 2, 8),
		Batching(4096, 50*time.Millisecond), Logger(quietLogger()),
	}
	c, err := New(openMemDB(t), sink, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestCrawlSite(t *testing.T) {
	var robotsHits atomic.Int32
	var ua atomic.Value
	mux := http.NewServeMux()
	mux.HandleFunc("/robots.txt", func(w http.ResponseWriter, r *http.Request) {
		robotsHits.Add(1)
		io.WriteString(w, "User-agent: *\nDisallow: /private\n")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		ua.Store(r.UserAgent())
		switch r.URL.Path {
		case "/":
			io.WriteString(w, `<html><head><title>Harbour home</title></head><body><h1>Ferries</h1>
<a href="/a">Ferry timetable</a> <a href="/b">Boats</a> <a href="/private/x">secret</a>
<a href="http://other.test/page">elsewhere</a> <link rel="alternate" type="application/rss+xml" href="/feed.xml">
<a href="/a?jsessionid=XYZ">again</a></body></html>`)
		case "/a":
			io.WriteString(w, `<html><title>Timetable</title><body>Ferries leave at dawn. <a href="/b">boats</a></body></html>`)
		case "/b":
			io.WriteString(w, `<html><title>Boats</title><body>Sailing boats and yachts.</body></html>`)
		case "/feed.xml":
			w.Header().Set("Content-Type", "application/rss+xml")
			io.WriteString(w, `<rss><channel><title>Harbour feed</title><item><title>Storm</title><link>/c</link></item></channel></rss>`)
		case "/c":
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "Storm warning for sailors")
		case "/private/x":
			t.Errorf("robots.txt ignored: %s fetched", r.URL.Path)
		default:
			http.NotFound(w, r)
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	sink := &testSink{}
	dns := stubResolver{"other.test": {netip.MustParseAddr("127.0.0.2")}}
	c := newTestCrawler(t, sink, DNS(dns), Routing(hostRouter{local: "127.0.0.1"}))
	if err := c.Submit(t.Context(), Request{Link: srv.URL + "/", Depth: DefaultDepth, Owners: []string{"alice"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "5 records", func() bool { r := sink.snapshot(); return len(r) >= 5 })
	waitIdle(t, c)
	recs := sink.snapshot()
	fwd, err := c.Outgoing(Outlink{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 5 {
		for _, r := range recs {
			t.Logf("record %s %v", r.URL, r.Change)
		}
		t.Fatalf("%d records, want 5", len(recs))
	}
	home := sink.byURL("/")[0]
	if home.Title != "Harbour home" || home.Type != TypeHTML || home.Change != ChangeNew || home.Status != 200 ||
		home.Fingerprint == 0 || home.Timing.Total <= 0 || len(home.Owners) != 1 || home.Owners[0] != "alice" {
		t.Fatalf("home record %+v", home)
	}
	terms := map[string]bool{}
	for _, k := range home.Keywords {
		terms[k.Term] = true
	}
	if !terms["harbour"] || !terms["ferri"] {
		t.Fatalf("keywords %v", home.Keywords)
	}
	if len(home.Links) != 5 { // the jsessionid duplicate merges into /a
		t.Fatalf("links %v", home.Links)
	}
	if f := sink.byURL("/feed.xml"); len(f) != 1 || f[0].Type != TypeRSS {
		t.Fatalf("feed record %+v", f)
	}
	if c := sink.byURL("/c"); len(c) != 1 || c[0].Type != TypeText {
		t.Fatalf("feed item not crawled: %+v", c)
	}
	if len(fwd) != 1 || fwd[0].Link != "http://other.test/page" || fwd[0].ParentLink != srv.URL+"/" || fwd[0].Depth != c.cfg.maxDepth-1 ||
		fwd[0].Addr != netip.MustParseAddr("127.0.0.2") || len(fwd[0].Owners) != 1 || fwd[0].Owners[0] != "alice" {
		t.Fatalf("outgoing %+v", fwd)
	}
	if st := c.Stats(); st.Outgoing != 1 || st.Forwarded != 0 {
		t.Fatalf("stats before the hand-on %+v", st)
	}
	// Handed on: deleted once, counted once.
	if err := c.Handed(fwd...); err != nil {
		t.Fatal(err)
	}
	if err := c.Handed(fwd...); err != nil {
		t.Fatal(err)
	}
	if left, err := c.Outgoing(Outlink{}, 10); err != nil || len(left) != 0 {
		t.Fatalf("outgoing after Handed: %+v %v", left, err)
	}
	if robotsHits.Load() != 1 {
		t.Fatalf("robots.txt fetched %d times", robotsHits.Load())
	}
	if s, _ := ua.Load().(string); !strings.HasPrefix(s, "micra/") || !strings.Contains(s, "+https://") {
		t.Fatalf("User-Agent %q", s)
	}
	if st := c.Stats(); st.RobotsDenied != 1 || st.Records != 5 || st.Forwarded != 1 || st.Outgoing != 0 || st.RecordBytes == 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestChangeDetection(t *testing.T) {
	var version atomic.Int32
	var conditional atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/robots.txt":
			http.NotFound(w, r) // 4xx: allow all
		case "/static":
			if r.Header.Get("If-None-Match") == `"s1"` {
				conditional.Add(1)
				w.WriteHeader(http.StatusNotModified)
				return
			}
			w.Header().Set("ETag", `"s1"`)
			io.WriteString(w, "<title>Static</title><p>Unchanging words here.</p>")
		case "/news":
			v := version.Load()
			topic := "harbour regatta"
			if v >= 2 {
				topic = "airport strike"
			}
			fmt.Fprintf(w, "<title>News</title><p>Visitors: %d. Updated Monday %d November. Today: %s.</p>", 1000+v, v+1, topic)
		case "/gone":
			if version.Load() >= 2 {
				http.NotFound(w, r)
				return
			}
			io.WriteString(w, "<title>Soon gone</title>")
		}
	}))
	defer srv.Close()
	sink := &testSink{}
	c := newTestCrawler(t, sink)
	submit := func() {
		t.Helper()
		for _, p := range []string{"/static", "/news", "/gone"} {
			if err := c.Submit(t.Context(), Request{Link: srv.URL + p}); err != nil {
				t.Fatal(err)
			}
		}
		waitIdle(t, c)
	}
	submit()
	waitFor(t, "3 records", func() bool { r := sink.snapshot(); return len(r) == 3 })
	// Version 1: counter and date changed only. Static answers 304.
	version.Store(1)
	submit()
	time.Sleep(200 * time.Millisecond) // let a wrong record reach the sink
	if r := sink.snapshot(); len(r) != 3 {
		t.Fatalf("trivial change or 304 produced records: %d", len(r))
	}
	if conditional.Load() != 1 {
		t.Fatalf("conditional GETs: %d", conditional.Load())
	}
	// Version 2: a real change and a removal.
	version.Store(2)
	submit()
	waitFor(t, "change records", func() bool { r := sink.snapshot(); return len(r) == 5 })
	if n := sink.byURL("/news"); len(n) != 2 || n[1].Change != ChangeModified {
		t.Fatalf("news records %+v", n)
	}
	if g := sink.byURL("/gone"); len(g) != 2 || g[1].Change != ChangeGone || g[1].Status != 404 {
		t.Fatalf("gone records %+v", g)
	}
}

func TestRetryAfterBackoff(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		if hits.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, "<title>ok</title>")
	}))
	defer srv.Close()
	sink := &testSink{}
	c := newTestCrawler(t, sink)
	c.Submit(t.Context(), Request{Link: srv.URL + "/x"})
	waitFor(t, "record after retry", func() bool { r := sink.snapshot(); return len(r) == 1 })
	if hits.Load() != 2 {
		t.Fatalf("%d hits", hits.Load())
	}
}

func TestRobotsUnreachableDisallows(t *testing.T) {
	var pages atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		pages.Add(1)
	}))
	defer srv.Close()
	c := newTestCrawler(t, &testSink{})
	c.Submit(t.Context(), Request{Link: srv.URL + "/x"})
	waitFor(t, "robots denial", func() bool { return c.Stats().RobotsDenied == 1 })
	if pages.Load() != 0 {
		t.Fatal("page fetched although robots.txt answered 5xx")
	}
}

// TestHostileServer crawls a server that serves a gzip bomb, a slow drip, a
// huge body, a redirect loop and an infinite link trap, and checks that the
// caps hold and the crawl ends.
func TestHostileServer(t *testing.T) {
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	zw.Write(append([]byte("<html><title>bomb</title>"), make([]byte, 16<<20)...))
	zw.Close()
	var trapPages atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		switch {
		case p == "/robots.txt":
			http.NotFound(w, r)
		case p == "/":
			io.WriteString(w, `<a href="/bomb">b</a><a href="/drip">d</a><a href="/huge">h</a><a href="/loop">l</a><a href="/trap/">t</a>`)
		case p == "/bomb":
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Set("Content-Type", "text/html")
			w.Write(bomb.Bytes())
		case p == "/drip":
			for range 200 {
				if _, err := io.WriteString(w, "<p>drip</p>"); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		case p == "/huge":
			chunk := bytes.Repeat([]byte("<p>huge page words</p>"), 3000)
			for range 200 { // ~13 MB, bounded
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case p == "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case strings.HasPrefix(p, "/trap/"):
			trapPages.Add(1)
			fmt.Fprintf(w, `<a href="%sa/">a</a><a href="%sb/">b</a>`, p, p)
		}
	}))
	defer srv.Close()
	sink := &testSink{}
	c := newTestCrawler(t, sink, MaxBodySize(256<<10, 1<<20), Timeouts(time.Second, time.Second, 500*time.Millisecond), MaxDepth(6))
	c.Submit(t.Context(), Request{Link: srv.URL + "/", Depth: DefaultDepth})
	waitIdle(t, c)
	// Trap: depth 6 from "/" allows /trap/ plus 5 more levels of a binary tree.
	if n := trapPages.Load(); n > 63 {
		t.Fatalf("link trap fetched %d pages", n)
	}
	if b := sink.byURL("/bomb"); len(b) != 1 || b[0].Size > 1<<20 || !b[0].Truncated {
		t.Fatalf("bomb record %+v", b)
	}
	if h := sink.byURL("/huge"); len(h) != 1 || h[0].Size > 1<<20 || !h[0].Truncated {
		t.Fatalf("huge record %+v", h)
	}
	if d := sink.byURL("/drip"); len(d) != 1 || !d[0].Truncated {
		t.Fatalf("drip record %+v", d)
	}
	if l := sink.byURL("/loop"); len(l) != 0 {
		t.Fatalf("redirect loop produced a record")
	}
	if c.Stats().WireBytes > 20<<20 {
		t.Fatalf("downloaded %d bytes", c.Stats().WireBytes)
	}
}

func TestCrawlerRestart(t *testing.T) {
	// Until the restart, the server answers only the front page: requests
	// for the others wait until the first crawler's Close aborts them and
	// are not counted, since they were never served. Which pages the first
	// crawler has in flight when it closes is then fixed, not a race.
	var hits sync.Map
	var restarted atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		if r.URL.Path != "/" && !restarted.Load() {
			<-r.Context().Done()
			return
		}
		n, _ := hits.LoadOrStore(r.URL.Path, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		io.WriteString(w, `<title>p</title><a href="/1">1</a><a href="/2">2</a><a href="/3">3</a>`)
	}))
	defer srv.Close()
	dir := t.TempDir()
	opts := []Option{AllowPrivateNetworks(), Politeness(0, 0), Workers(1, 1, 1), Batching(1024, 10*time.Millisecond), Logger(quietLogger())}
	db := openDiskDB(t, dir)
	sink := &testSink{}
	c, err := New(db, sink, opts...)
	if err != nil {
		t.Fatal(err)
	}
	c.Submit(t.Context(), Request{Link: srv.URL + "/", Depth: 1})
	waitFor(t, "first record", func() bool { r := sink.snapshot(); return len(r) >= 1 })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	db.Close()

	restarted.Store(true)
	db = openDiskDB(t, dir)
	defer db.Close()
	c, err = New(db, sink, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, "all four pages", func() bool { r := sink.snapshot(); return len(r) == 4 })
	waitIdle(t, c)
	hits.Range(func(k, v any) bool {
		if n := v.(*atomic.Int32).Load(); n != 1 {
			t.Errorf("%s fetched %d times", k, n)
		}
		return true
	})
}

func TestSchedule(t *testing.T) {
	loc := time.UTC
	s := schedule{loc: loc, windows: []Window{
		{Day: time.Monday, Start: 22 * time.Hour, End: 24 * time.Hour},
		{Day: time.Wednesday, Start: 2 * time.Hour, End: 4 * time.Hour},
	}}
	mon := time.Date(2024, 11, 18, 0, 0, 0, 0, loc) // a Monday
	tests := []struct {
		at   time.Time
		open bool
		next time.Time
	}{
		{mon.Add(23 * time.Hour), true, mon.Add(23 * time.Hour)},
		{mon.Add(21 * time.Hour), false, mon.Add(22 * time.Hour)},
		{mon.Add(24 * time.Hour), false, mon.Add(50 * time.Hour)},
		{mon.Add(52 * time.Hour), false, mon.Add(7*24*time.Hour + 22*time.Hour)},
	}
	for _, tt := range tests {
		if got := s.open(tt.at); got != tt.open {
			t.Errorf("open(%v) = %v", tt.at, got)
		}
		if got := s.nextOpen(tt.at); !got.Equal(tt.next) {
			t.Errorf("nextOpen(%v) = %v, want %v", tt.at, got, tt.next)
		}
	}
	if !(schedule{loc: loc}).open(mon) {
		t.Error("no windows must mean always open")
	}
	if err := (Window{Day: time.Monday, Start: 5 * time.Hour, End: 4 * time.Hour}).validate(); err == nil {
		t.Error("inverted window accepted")
	}
}

func TestMeter(t *testing.T) {
	now := time.Date(2024, 11, 18, 12, 0, 0, 0, time.UTC)
	m := &meter{rate: 1000, daily: 10000, loc: time.UTC}
	m.charge(500, now)
	if at := m.wait(now); !at.IsZero() {
		t.Fatalf("within burst, wait until %v", at)
	}
	m.charge(3000, now)
	if at := m.wait(now); !at.Equal(now.Add(2500 * time.Millisecond)) {
		t.Fatalf("rate cap wait until %v", at)
	}
	m.charge(7000, now.Add(10*time.Second))
	tomorrow := time.Date(2024, 11, 19, 0, 0, 0, 0, time.UTC)
	if at := m.wait(now.Add(20 * time.Second)); !at.Equal(tomorrow) {
		t.Fatalf("daily cap wait until %v", at)
	}
	if at := m.wait(tomorrow); !at.IsZero() {
		t.Fatalf("new day still capped: %v", at)
	}
	n := &meter{loc: time.UTC}
	if err := n.restore(m.state()); err != nil || n.dayBytes != m.dayBytes || n.day != m.day {
		t.Fatalf("restore: %v %+v", err, n)
	}
}

func TestOptionsValidate(t *testing.T) {
	bad := [][]Option{
		{RobotsTTL(25 * time.Hour)},
		{MaxRedirects(6)},
		{Timeouts(0, time.Second, time.Second)},
		{UserAgent("bad agent", "1", "x")},
		{Workers(0, 1, 1)},
		{Windows(nil, Window{Day: 9, Start: 0, End: time.Hour})},
		{HostConnections(0)},
		{HostConnections(maxHostConnections + 1)},
	}
	for i, opts := range bad {
		if _, err := NewFetcher(opts...); err == nil {
			t.Errorf("case %d accepted", i)
		}
	}
	if _, err := New(openMemDB(t), nil); err == nil {
		t.Error("nil sink accepted")
	}
}

// TestRobotsSitemaps checks that the Sitemap lines of robots.txt become link
// sources and that a sitemap served as a gzip file is unpacked.
func TestRobotsSitemaps(t *testing.T) {
	sitemap := `<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
<url><loc>http://HOST/a</loc><lastmod>2024-11-01</lastmod></url><url><loc>http://HOST/b</loc></url></urlset>`
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/robots.txt":
			io.WriteString(w, "User-agent: *\nDisallow: /private\n\nSitemap: "+srv.URL+"/sitemap.xml.gz\n")
		case "/sitemap.xml.gz":
			w.Header().Set("Content-Type", "application/x-gzip")
			w.Write(gzipped(t, strings.ReplaceAll(sitemap, "http://HOST", srv.URL)))
		case "/":
			io.WriteString(w, `<title>Home</title><p>No links here.</p>`)
		case "/a", "/b":
			io.WriteString(w, `<title>Listed</title><p>Only the sitemap links here.</p>`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	sink := &testSink{}
	c := newTestCrawler(t, sink)
	if err := c.Submit(t.Context(), Request{Link: srv.URL + "/", Depth: 0}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "4 records", func() bool { r := sink.snapshot(); return len(r) >= 4 })
	waitIdle(t, c)
	for _, p := range []string{"/", "/a", "/b"} {
		if r := sink.byURL(p); len(r) != 1 || r[0].Type != TypeHTML {
			t.Errorf("%s: records %+v", p, r)
		}
	}
	sm := sink.byURL("/sitemap.xml.gz")
	want := len(strings.ReplaceAll(sitemap, "http://HOST", srv.URL))
	if len(sm) != 1 || sm[0].Type != TypeSitemap || sm[0].Size != int64(want) || len(sm[0].Links) != 2 {
		t.Fatalf("sitemap record %+v, want type sitemap, size %d, 2 links", sm, want)
	}
}

// TestQueueStats checks the queue figures in Stats while the crawler holds
// outside its windows, and once it has crawled everything.
func TestQueueStats(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `<title>x</title>`)
	}))
	defer srv.Close()
	closed := Window{Day: (time.Now().Weekday() + 3) % 7, Start: time.Hour, End: 2 * time.Hour}
	sink := &testSink{}
	c := newTestCrawler(t, sink, Windows(time.Local, closed))
	other := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	reqs := []Request{{Link: srv.URL + "/1"}, {Link: srv.URL + "/2"}, {Link: other + "/3"}}
	if err := c.Submit(t.Context(), reqs...); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Queued != 3 || st.Hosts != 2 || st.HostsReady != 2 || st.InFlight != 0 || st.Fetched != 0 {
		t.Fatalf("held: %+v", st)
	}
	c.Close()

	// The same state, reopened with windows open, is crawled to the end.
	c2, err := New(c.db, sink, AllowPrivateNetworks(), Politeness(0, 0), Logger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c2.Close() })
	// c2 starts crawling at once, so its queue figures are only checked at
	// the end: all three URLs came back from the disk (c2 counts from 0).
	waitFor(t, "idle", func() bool { st := c2.Stats(); return st.Fetched == 3 && st.Queued == 0 && st.InFlight == 0 })
	if st := c2.Stats(); st.HostsReady > st.Hosts || st.Hosts > 2 {
		t.Fatalf("after crawling: %+v", st)
	}
}

// TestHostConnections checks that requests to one host overlap only when
// HostConnections allows it, and never beyond it.
func TestHostConnections(t *testing.T) {
	for _, limit := range []int{1, 3} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			var cur, peak atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/robots.txt" {
					http.NotFound(w, r)
					return
				}
				n := cur.Add(1)
				defer cur.Add(-1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(30 * time.Millisecond)
				if r.URL.Path == "/" {
					for i := range 12 {
						fmt.Fprintf(w, `<a href="/p%d">p</a>`, i)
					}
				}
			}))
			defer srv.Close()
			c := newTestCrawler(t, &testSink{}, HostConnections(limit), Workers(6, 2, 8))
			c.Submit(t.Context(), Request{Link: srv.URL + "/", Depth: 1})
			waitFor(t, "13 pages", func() bool { st := c.Stats(); return st.Fetched == 13 && st.InFlight == 0 })
			if p := peak.Load(); p > int32(limit) || (limit > 1 && p < 2) {
				t.Fatalf("peak of %d concurrent requests with HostConnections(%d)", p, limit)
			}
		})
	}
}

// TestRedirectChainFollowedOnce: many URLs that redirect into one endless
// chain (the world's redirect loop) cost one request each once the chain
// was followed: its hops are in the seen set and a redirect to a known URL
// is not followed. Before, each URL cost 1 + MaxRedirects requests (a
// world loop site linked by 18 URLs saw 109). A redirect to a page that is
// crawled anyway is not followed either, and the page is still fetched
// under its own URL.
func TestRedirectChainFollowedOnce(t *testing.T) {
	var chain, entries, page atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		switch {
		case p == "/robots.txt":
			http.NotFound(w, r)
		case p == "/":
			var b strings.Builder
			for i := range 10 {
				fmt.Fprintf(&b, `<a href="/e%d">e</a>`, i)
			}
			b.WriteString(`<a href="/page">p</a><a href="/old">o</a>`)
			io.WriteString(w, b.String())
		case strings.HasPrefix(p, "/e"):
			entries.Add(1)
			http.Redirect(w, r, "/r/1", http.StatusFound)
		case strings.HasPrefix(p, "/r/"):
			chain.Add(1)
			n, _ := strconv.Atoi(strings.TrimPrefix(p, "/r/"))
			http.Redirect(w, r, fmt.Sprintf("/r/%d", n+1), http.StatusFound)
		case p == "/old":
			http.Redirect(w, r, "/page", http.StatusMovedPermanently)
		case p == "/page":
			page.Add(1)
			io.WriteString(w, `<html><title>Page</title><body>words</body></html>`)
		}
	}))
	defer srv.Close()
	sink := &testSink{}
	// One worker: the entries come one after another, as politeness
	// makes them come from one host.
	c := newTestCrawler(t, sink, Workers(1, 1, 4))
	if err := c.Submit(t.Context(), Request{Link: srv.URL + "/", Depth: DefaultDepth}); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, c)
	if n := entries.Load(); n != 10 {
		t.Fatalf("%d entry requests, want 10", n)
	}
	// The first entry follows the chain MaxRedirects (5) hops; the others
	// stop at /r/1.
	if n := chain.Load(); n > 5 {
		t.Fatalf("the chain was requested %d times, want at most 5", n)
	}
	// /page is fetched once under its own URL, whether /old came first
	// (followed into it, then /page itself is known and queued) or second.
	if n := page.Load(); n < 1 || n > 2 {
		t.Fatalf("/page fetched %d times", n)
	}
	if len(sink.byURL("/page")) != 1 {
		t.Fatalf("no record of /page under its own URL: %+v", sink.byURL("/page"))
	}
}

// TestMarkRedirects: only hops that answered with a redirect enter the
// seen set; a hop that answered with content, or never answered (the
// fetch failed on the way), stays out, or it would never be crawled.
func TestMarkRedirects(t *testing.T) {
	f, err := openFrontier(openMemDB(t), 1000, time.Minute, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &Crawler{front: f, log: quietLogger()}
	u := func(s string) *url.URL { return mustURL(t, "http://a.test"+s) }
	entry, a, b, d := u("/e"), u("/a"), u("/b"), u("/d")
	// Failed on the way to /a: /e answered 301, /a never answered.
	c.markRedirects(&Response{URL: entry, Status: 301, Redirects: []*url.URL{a}})
	// /b answered 302 towards /d and the chain stopped there.
	c.markRedirects(&Response{URL: b, Status: 302, Redirects: []*url.URL{b}})
	// /e → /a (redirect) → /d (content).
	c.markRedirects(&Response{URL: d, Status: 200, Redirects: []*url.URL{a, d}})
	for _, tc := range []struct {
		u     *url.URL
		known bool
	}{{a, true}, {b, true}, {d, false}} {
		if got := f.known(redirectKey(tc.u)); got != tc.known {
			t.Errorf("%s known %v, want %v", tc.u, got, tc.known)
		}
	}
	// Before the third fetch /a was not known: the first must not mark it.
	g, _ := openFrontier(openMemDB(t), 1000, time.Minute, 1, nil)
	c.front = g
	c.markRedirects(&Response{URL: entry, Status: 301, Redirects: []*url.URL{a}})
	if g.known(redirectKey(a)) {
		t.Error("a hop that never answered was marked known")
	}
}
