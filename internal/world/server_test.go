package world_test

import (
	"bytes"
	"compress/gzip"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/miekg/dns"

	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/internal/world/worldtest"
)

// get fetches url with client and returns the response with its body read
// (at most 4 MiB).
func get(t *testing.T, c *http.Client, method, url string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	return resp, body
}

func noRedirect(c *http.Client) *http.Client {
	cc := *c
	cc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cc
}

// find returns the first site satisfying ok, failing the test if none.
func find(t *testing.T, w *world.World, what string, ok func(world.Site) bool) world.Site {
	t.Helper()
	for _, s := range w.Sites() {
		if s.Hostile == world.NotHostile && !s.Flaky && ok(s) {
			return s
		}
	}
	t.Fatalf("no site %s", what)
	return world.Site{}
}

func TestServe(t *testing.T) {
	p := worldtest.Params(11, 120, 4)
	run := worldtest.Start(t, p, world.TimeScale(0.01))
	w := run.World()
	node := w.Nodes()[0].Addr
	c, err := run.Client(node)
	if err != nil {
		t.Fatal(err)
	}
	nr := noRedirect(c)

	t.Run("dns", func(t *testing.T) {
		res, err := run.Resolver(node)
		if err != nil {
			t.Fatal(err)
		}
		s := find(t, w, "plain", func(s world.Site) bool { return s.Kind != world.CDNSite })
		addrs, err := res.LookupNetIP(t.Context(), "ip4", s.Name)
		if err != nil || len(addrs) != 1 || addrs[0] != s.Addrs[0] {
			t.Fatalf("lookup %s = %v, %v; want %v", s.Name, addrs, err, s.Addrs)
		}
		_, err = res.LookupNetIP(t.Context(), "ip4", "no-such-site.example")
		var de *net.DNSError
		if !errors.As(err, &de) || !de.IsNotFound {
			t.Fatalf("unknown name: %v, want not found", err)
		}
		cdn := find(t, w, "cdn", func(s world.Site) bool { return s.Kind == world.CDNSite })
		addrs, err = res.LookupNetIP(t.Context(), "ip4", cdn.Name)
		if err != nil || len(addrs) != len(cdn.Addrs) {
			t.Fatalf("lookup %s = %v, %v; want %d addresses", cdn.Name, addrs, err, len(cdn.Addrs))
		}
		// Geo-aware: the first answer is the point of presence nearest
		// the asking node, for every node.
		for _, n := range w.NodeAddrs() {
			m := new(dns.Msg)
			m.SetQuestion(dns.Fqdn(cdn.Name), dns.TypeA)
			cl := dns.Client{Dialer: &net.Dialer{LocalAddr: net.UDPAddrFromAddrPort(netip.AddrPortFrom(n, 0))}}
			in, _, err := cl.Exchange(m, run.DNS().String())
			if err != nil || len(in.Answer) != len(cdn.Addrs) {
				t.Fatalf("query from %s: %v %v", n, in, err)
			}
			first, _ := netip.AddrFromSlice(in.Answer[0].(*dns.A).A)
			if got, want := w.RTTAddr(n, first.Unmap()), w.RTT(n, cdn); got != want {
				t.Fatalf("node %s gets %s first at %v, nearest is at %v", n, first, got, want)
			}
		}
		// An alias is a CNAME to the canonical name; AAAA is NODATA.
		al := find(t, w, "with alias", func(s world.Site) bool { return len(s.Aliases) > 0 })
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(al.Aliases[0]), dns.TypeA)
		in, err := dns.Exchange(m, run.DNS().String())
		if err != nil || len(in.Answer) != 2 || in.Answer[0].Header().Rrtype != dns.TypeCNAME || !in.Authoritative {
			t.Fatalf("alias query: %v %v", in, err)
		}
		m.SetQuestion(dns.Fqdn(al.Name), dns.TypeAAAA)
		in, err = dns.Exchange(m, run.DNS().String())
		if err != nil || in.Rcode != dns.RcodeSuccess || len(in.Answer) != 0 || len(in.Ns) != 1 {
			t.Fatalf("AAAA query: %v %v", in, err)
		}
		tc := dns.Client{Net: "tcp"}
		in, _, err = tc.Exchange(m, run.DNS().String())
		if err != nil || in.Rcode != dns.RcodeSuccess {
			t.Fatalf("DNS over TCP: %v %v", in, err)
		}
	})

	t.Run("pages", func(t *testing.T) {
		s := find(t, w, "with pages", func(s world.Site) bool {
			return s.Robots == world.RobotsAllow && s.Pages > 10 && s.Validators && !s.Gzip
		})
		pages := w.Pages(s)
		for _, pg := range pages[:5] {
			url := "http://" + s.Name + fmt.Sprintf(":%d", run.Port()) + pg.Path
			resp, body := get(t, c, "GET", url, nil)
			want := 200
			if pg.Status != 0 {
				want = pg.Status
			}
			if resp.StatusCode != want {
				t.Fatalf("GET %s: %d, want %d", url, resp.StatusCode, want)
			}
			if want == 200 && (!bytes.Contains(body, []byte("<html")) || resp.Header.Get("Content-Type") != "text/html; charset=utf-8") {
				t.Fatalf("GET %s: not an HTML page: %q", url, body[:min(100, len(body))])
			}
		}
		resp, _ := get(t, c, "GET", run.URL(s)+"no-such-page-123456.html", nil)
		if resp.StatusCode != 404 {
			t.Fatalf("missing page: %d", resp.StatusCode)
		}
		resp, body := get(t, c, "HEAD", run.URL(s), nil)
		if resp.StatusCode != 200 || len(body) != 0 || resp.ContentLength <= 0 {
			t.Fatalf("HEAD: %d, body %d bytes, length %d", resp.StatusCode, len(body), resp.ContentLength)
		}
		resp, _ = get(t, c, "POST", run.URL(s), nil)
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET, HEAD" {
			t.Fatalf("POST: %d %v", resp.StatusCode, resp.Header)
		}
	})

	t.Run("conditional", func(t *testing.T) {
		s := find(t, w, "with validators", func(s world.Site) bool { return s.Validators && s.Robots == world.RobotsAllow })
		resp, _ := get(t, c, "GET", run.URL(s), nil)
		etag, lm := resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
		if etag == "" || lm == "" {
			t.Fatalf("no validators: %v", resp.Header)
		}
		resp, body := get(t, c, "GET", run.URL(s), map[string]string{"If-None-Match": etag})
		if resp.StatusCode != 304 || len(body) != 0 {
			t.Fatalf("If-None-Match: %d with %d bytes", resp.StatusCode, len(body))
		}
		resp, _ = get(t, c, "GET", run.URL(s), map[string]string{"If-Modified-Since": lm})
		if resp.StatusCode != 304 {
			t.Fatalf("If-Modified-Since: %d", resp.StatusCode)
		}
		resp, _ = get(t, c, "GET", run.URL(s), map[string]string{"If-None-Match": `"other"`, "If-Modified-Since": lm})
		if resp.StatusCode != 200 {
			t.Fatalf("a mismatched If-None-Match must win over If-Modified-Since: %d", resp.StatusCode)
		}
		nv := find(t, w, "without validators", func(s world.Site) bool { return !s.Validators })
		resp, _ = get(t, c, "GET", run.URL(nv), nil)
		if resp.Header.Get("ETag") != "" || resp.Header.Get("Last-Modified") != "" {
			t.Fatalf("site without validators sent %v", resp.Header)
		}
	})

	t.Run("gzip", func(t *testing.T) {
		s := find(t, w, "gzip", func(s world.Site) bool { return s.Gzip })
		resp, body := get(t, c, "GET", run.URL(s), map[string]string{"Accept-Encoding": "gzip"})
		if resp.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("no gzip: %v", resp.Header)
		}
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		html, err := io.ReadAll(zr)
		if err != nil || !bytes.Contains(html, []byte("</html>")) {
			t.Fatalf("gzip body: %v", err)
		}
		resp, _ = get(t, c, "GET", run.URL(s), map[string]string{"Accept-Encoding": "gzip;q=0"})
		if resp.Header.Get("Content-Encoding") != "" {
			t.Fatal("gzip sent although q=0")
		}
	})

	t.Run("robots", func(t *testing.T) {
		for _, tc := range []struct {
			policy world.RobotsPolicy
			status int
			has    string
		}{
			{world.RobotsAllow, 200, "Disallow:\n"},
			{world.RobotsDisallow, 200, "Disallow: /"},
			{world.RobotsForAgent, 200, "User-agent: " + world.RobotsAgent},
			{world.RobotsDelay, 200, "Crawl-delay:"},
			{world.RobotsMissing, 404, ""},
			{world.RobotsError, 503, ""},
		} {
			s := find(t, w, "robots "+tc.policy.String(), func(s world.Site) bool { return s.Robots == tc.policy })
			resp, body := get(t, c, "GET", run.URL(s)+"robots.txt", nil)
			if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.has) {
				t.Fatalf("%v: %d %q", tc.policy, resp.StatusCode, body)
			}
		}
	})

	t.Run("sitemap and feeds", func(t *testing.T) {
		s := find(t, w, "sitemap", func(s world.Site) bool { return s.Sitemap })
		resp, body := get(t, c, "GET", run.URL(s)+"sitemap.xml", nil)
		var us struct {
			URLs []struct {
				Loc string `xml:"loc"`
			} `xml:"url"`
			Maps []struct {
				Loc string `xml:"loc"`
			} `xml:"sitemap"`
		}
		if resp.StatusCode != 200 || xml.Unmarshal(body, &us) != nil || len(us.URLs)+len(us.Maps) == 0 {
			t.Fatalf("sitemap: %d %q", resp.StatusCode, body[:min(200, len(body))])
		}
		if len(us.Maps) == 0 && len(us.URLs) != s.Pages {
			t.Fatalf("sitemap lists %d URLs, site has %d pages", len(us.URLs), s.Pages)
		}
		f := find(t, w, "feeds", func(s world.Site) bool { return s.Feeds })
		for _, path := range []string{"feed.xml", "atom.xml"} {
			resp, body := get(t, c, "GET", run.URL(f)+path, nil)
			var v struct {
				XMLName xml.Name
			}
			if resp.StatusCode != 200 || xml.Unmarshal(body, &v) != nil || (v.XMLName.Local != "rss" && v.XMLName.Local != "feed") {
				t.Fatalf("%s: %d %q", path, resp.StatusCode, body[:min(200, len(body))])
			}
		}
	})

	t.Run("redirects", func(t *testing.T) {
		s := find(t, w, "with alias", func(s world.Site) bool { return len(s.Aliases) > 0 })
		resp, _ := get(t, nr, "GET", fmt.Sprintf("http://%s:%d/x?y=1", s.Aliases[0], run.Port()), nil)
		if resp.StatusCode != 301 || resp.Header.Get("Location") != fmt.Sprintf("http://%s:%d/x?y=1", s.Name, run.Port()) {
			t.Fatalf("alias: %d %q", resp.StatusCode, resp.Header.Get("Location"))
		}
		s = find(t, w, "with pages", func(s world.Site) bool { return s.Pages > 3 && s.Robots == world.RobotsAllow })
		page := w.Pages(s)[2].Path
		resp, _ = get(t, nr, "GET", run.URL(s)+"old/old"+page, nil)
		if !slices.Contains([]int{301, 302, 307, 308}, resp.StatusCode) || resp.Header.Get("Location") != "/old"+page {
			t.Fatalf("old URL: %d %q", resp.StatusCode, resp.Header.Get("Location"))
		}
		resp, _ = get(t, c, "GET", run.URL(s)+"old/old"+page, nil)
		if resp.StatusCode != 200 || resp.Request.URL.RequestURI() != page {
			t.Fatalf("following the old URL: %d at %s", resp.StatusCode, resp.Request.URL)
		}
		resp, _ = get(t, nr, "GET", run.URL(s)+"old/no-such-page.html", nil)
		if resp.StatusCode != 404 {
			t.Fatalf("old URL of no page: %d", resp.StatusCode)
		}
	})

	t.Run("flaky", func(t *testing.T) {
		var s world.Site
		for _, x := range w.Sites() {
			if x.Flaky && x.Hostile == world.NotHostile {
				s = x
			}
		}
		if s.Name == "" {
			t.Skip("no flaky site in this world")
		}
		n503 := 0
		for range 40 {
			resp, _ := get(t, c, "GET", run.URL(s), nil)
			if resp.StatusCode == 503 {
				n503++
				// Two minutes of world time, scaled like every delay.
				if want := fmt.Sprint(max(1, int(math.Ceil(120*run.TimeScale())))); resp.Header.Get("Retry-After") != want {
					t.Fatalf("503 with Retry-After %q, want %s", resp.Header.Get("Retry-After"), want)
				}
			}
		}
		if n503 == 0 || n503 > 30 {
			t.Fatalf("%d of 40 requests to a flaky site failed", n503)
		}
	})
}

// TestCounters checks requests, bytes, disallowed requests and the most
// concurrent connections, by source.
func TestCounters(t *testing.T) {
	p := worldtest.Params(12, 60, 4)
	run := worldtest.Start(t, p, world.TimeScale(0.2))
	w := run.World()
	s := find(t, w, "with a disallowed section", func(s world.Site) bool { return s.Robots == world.RobotsDisallow && s.Pages > 3 })
	nodes := w.NodeAddrs()
	a, b := nodes[0], nodes[1]
	// Four concurrent connections from a, one from b: each client opens a
	// new connection per request.
	var wg sync.WaitGroup
	errc := make(chan error, 5)
	for i, from := range []netip.Addr{a, a, a, a, b} {
		c, err := run.Client(from)
		if err != nil {
			t.Fatal(err)
		}
		c.Transport.(*http.Transport).DisableKeepAlives = true
		wg.Go(func() {
			resp, err := c.Get(run.URL(s) + fmt.Sprintf("?n=%d", i))
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			errc <- err
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatal(err)
		}
	}
	var dis string
	for _, pg := range w.Pages(s) {
		if pg.Disallowed {
			dis = pg.Path
			break
		}
	}
	cb, _ := run.Client(b)
	get(t, cb, "GET", strings.TrimSuffix(run.URL(s), "/")+dis, nil)
	get(t, cb, "GET", run.URL(s)+"robots.txt", nil)

	got := run.Counters(s)
	ca, cbn := got.Sources[a], got.Sources[b]
	if ca.Requests != 4 || cbn.Requests != 3 || got.Requests != 7 {
		t.Fatalf("requests: a %d, b %d, all %d; want 4, 3, 7", ca.Requests, cbn.Requests, got.Requests)
	}
	// The four connections from a overlap: each is held for two RTTs (at
	// least tens of ms) while the others are opened at once.
	if ca.MaxConns < 2 || ca.MaxConns > 4 || cbn.MaxConns != 1 {
		t.Fatalf("max connections: a %d (want 2-4), b %d (want 1)", ca.MaxConns, cbn.MaxConns)
	}
	if ca.Disallowed != 0 || cbn.Disallowed != 1 || got.Disallowed != 1 {
		t.Fatalf("disallowed: a %d, b %d; want 0, 1", ca.Disallowed, cbn.Disallowed)
	}
	if ca.Bytes <= 0 || got.Bytes != ca.Bytes+cbn.Bytes {
		t.Fatalf("bytes: a %d, b %d, all %d", ca.Bytes, cbn.Bytes, got.Bytes)
	}
	if cbn.MinGap <= 0 {
		t.Fatalf("no gap between b's requests: %v", cbn.MinGap)
	}
	if tot := run.Totals(); tot.Requests != 7 || tot.Sources[a].Requests != 4 {
		t.Fatalf("totals %+v", tot)
	}
	run.ResetCounters()
	c := run.Counters(s)
	if c.Requests != 0 || c.Bytes != 0 {
		t.Fatalf("after reset: %+v", c)
	}
	for a, sc := range c.Sources {
		// Only connections still open (b's keep-alive) stay counted.
		if sc.Requests != 0 || a != b || sc.MaxConns != 1 {
			t.Fatalf("after reset, source %s: %+v", a, sc)
		}
	}
}

// TestPageChanges drives the world clock: a changing page changes at its
// period, a static one never, and a trivial one on every request while
// its validators stay.
func TestPageChanges(t *testing.T) {
	p := worldtest.Params(13, 80, 2)
	p.ChangeFraction, p.Trivial = 0.5, 0.5
	var mu sync.Mutex
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	run := worldtest.Start(t, p, world.TimeScale(0), world.Clock(clock))
	w := run.World()
	c, _ := run.Client(w.NodeAddrs()[0])
	var changing, static, trivial string
	var period time.Duration
	for _, s := range w.Sites() {
		if s.Hostile != world.NotHostile || s.Flaky || s.Robots == world.RobotsError || !s.Validators {
			continue
		}
		for _, pg := range w.Pages(s) {
			u := strings.TrimSuffix(run.URL(s), "/") + pg.Path
			switch {
			case pg.Status != 200:
			case pg.ChangePeriod > 0 && !pg.Trivial && changing == "":
				changing, period = u, pg.ChangePeriod
			case pg.ChangePeriod == 0 && !pg.Trivial && static == "":
				static = u
			case pg.ChangePeriod == 0 && pg.Trivial && trivial == "":
				trivial = u
			}
		}
	}
	if changing == "" || static == "" || trivial == "" {
		t.Fatal("world lacks a changing, a static or a trivial page")
	}
	body := func(u string) (string, string) {
		resp, b := get(t, c, "GET", u, nil)
		return string(b), resp.Header.Get("ETag")
	}
	c1, e1 := body(changing)
	s1, _ := body(static)
	t1, te1 := body(trivial)
	if c2, e2 := body(changing); c2 != c1 || e2 != e1 {
		t.Fatal("changing page changed without time passing")
	}
	if t2, te2 := body(trivial); t2 == t1 || te2 != te1 {
		t.Fatal("trivial page did not change per request, or its ETag did")
	}
	advance(period + time.Second)
	if c3, e3 := body(changing); c3 == c1 || e3 == e1 {
		t.Fatal("changing page did not change after its period")
	}
	if s3, _ := body(static); s3 != s1 {
		t.Fatal("static page changed")
	}
}

// TestHostile switches the hostile set on and checks each kind, bounded.
func TestHostile(t *testing.T) {
	p := worldtest.Params(14, 60, 2)
	p.Hostile = 10 // one of each kind
	run := worldtest.Start(t, p, world.TimeScale(0.01), world.HostileLimits(30*time.Second, 8<<20))
	w := run.World()
	c, _ := run.Client(w.NodeAddrs()[0])
	site := func(k world.HostileKind) world.Site {
		for _, s := range w.Sites() {
			if s.Hostile == k {
				return s
			}
		}
		t.Fatalf("no %v site", k)
		return world.Site{}
	}
	// Off: a hostile site is a normal site.
	resp, body := get(t, c, "GET", run.URL(site(world.GzipBomb)), nil)
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte("</html>")) {
		t.Fatalf("hostile site with hostile mode off: %d", resp.StatusCode)
	}
	run.SetHostile(true)
	defer run.SetHostile(false)

	t.Run("slow drip", func(t *testing.T) {
		// One byte per unscaled second until the 30 s limit: at most 31
		// bytes, however fast or slow the machine (an unpaced drip would
		// write thousands before its deadline).
		resp, body := get(t, c, "GET", run.URL(site(world.SlowDrip)), nil)
		if resp.StatusCode != 200 || len(body) < 10 || len(body) > 31 || resp.ContentLength != -1 {
			t.Fatalf("drip: %d, %d bytes, length %d", resp.StatusCode, len(body), resp.ContentLength)
		}
	})
	t.Run("huge body", func(t *testing.T) {
		resp, err := c.Get(run.URL(site(world.HugeBody)))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, io.LimitReader(resp.Body, 16<<20))
		resp.Body.Close()
		if resp.ContentLength != -1 || n != 8<<20 {
			t.Fatalf("huge body: length %d, read %d", resp.ContentLength, n)
		}
	})
	t.Run("gzip bomb", func(t *testing.T) {
		tr := &http.Transport{DisableCompression: true, DialContext: mustDialer(t, run, w.NodeAddrs()[0]).DialContext}
		defer tr.CloseIdleConnections()
		resp, body := get(t, &http.Client{Transport: tr}, "GET", run.URL(site(world.GzipBomb)), nil)
		if resp.Header.Get("Content-Encoding") != "gzip" || len(body) > 2<<20 {
			t.Fatalf("bomb: %v, %d bytes", resp.Header, len(body))
		}
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, io.LimitReader(zr, 64<<20))
		if err != nil || n != 64<<20 {
			t.Fatalf("bomb inflates to %d bytes (%v), want beyond 64 MiB from %d", n, err, len(body))
		}
	})
	t.Run("redirect loop", func(t *testing.T) {
		_, err := c.Get(run.URL(site(world.RedirectLoop)) + "some/page.html")
		if err == nil || !strings.Contains(err.Error(), "stopped after 10 redirects") {
			t.Fatalf("redirect loop: %v", err)
		}
		seen := map[string]bool{}
		u := run.URL(site(world.RedirectLoop)) + "r/" + fmt.Sprint(49)
		for range 6 {
			resp, _ := get(t, noRedirect(c), "GET", u, nil)
			loc := resp.Header.Get("Location")
			if seen[loc] {
				return // reached the cycle
			}
			seen[loc] = true
			u = strings.TrimSuffix(run.URL(site(world.RedirectLoop)), "/") + loc
		}
		t.Fatal("no cycle after the chain")
	})
	// The encoding kinds, read as they come: no decompression.
	rawTr := &http.Transport{DisableCompression: true, DialContext: mustDialer(t, run, w.NodeAddrs()[0]).DialContext}
	defer rawTr.CloseIdleConnections()
	raw := &http.Client{Transport: rawTr}
	// pagesOf returns the URLs of the site's pages that answer 200.
	pagesOf := func(s world.Site) []string {
		var out []string
		for _, pg := range w.Pages(s) {
			if pg.Status == 200 {
				out = append(out, strings.TrimSuffix(run.URL(s), "/")+pg.Path)
			}
		}
		return out
	}
	t.Run("huge headers", func(t *testing.T) {
		s := site(world.HugeHeaders)
		size := func(path string) int {
			return headerSize(t, mustDialer(t, run, w.NodeAddrs()[0]), s, run.Port(), path)
		}
		if n := size("/"); n < world.HugeHeadersHome-2<<10 || n > 64<<10 {
			t.Fatalf("home page headers %d bytes, want about %d", n, world.HugeHeadersHome)
		}
		// Other URLs (robots.txt aside) fall in one of four classes.
		byClass := map[string]string{}
		for i := 0; i < 40 && len(byClass) < 4; i++ {
			path := fmt.Sprintf("/x%d.html", i)
			n := size(path)
			class := ""
			switch {
			case n >= world.HugeHeadersHome-2<<10 && n <= 64<<10:
				class = "home-size"
			case n >= world.HugeHeadersUnder-4<<10 && n < 1<<20:
				class = "under"
			case n > 1<<20 && n < 10<<20:
				class = "over"
			case n > 10<<20:
				class = "beyond"
			default:
				t.Fatalf("%s: %d header bytes, in no class", path, n)
			}
			byClass[class] = path
		}
		if len(byClass) != 4 {
			t.Fatalf("header classes met: %v", byClass)
		}
		if n := size("/robots.txt"); n > 4<<10 {
			t.Fatalf("robots.txt with %d header bytes", n)
		}
		// What net/http clients make of them: its default limit (0: 10 MiB)
		// takes all but the largest; a 1 MiB limit takes the one just
		// under it and refuses the one just over.
		base := strings.TrimSuffix(run.URL(s), "/")
		for _, tc := range []struct {
			limit   int64
			class   string
			wantErr bool
		}{
			{0, "under", false}, {0, "over", false}, {0, "beyond", true},
			{1 << 20, "under", false}, {1 << 20, "over", true},
		} {
			tr := &http.Transport{MaxResponseHeaderBytes: tc.limit, DialContext: mustDialer(t, run, w.NodeAddrs()[0]).DialContext}
			resp, err := (&http.Client{Transport: tr}).Get(base + byClass[tc.class])
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			tr.CloseIdleConnections()
			if (err != nil) != tc.wantErr || err != nil && !strings.Contains(err.Error(), "headers exceeded") {
				t.Errorf("limit %d, %s: %v, want error %v", tc.limit, tc.class, err, tc.wantErr)
			}
		}
	})
	t.Run("bad charset", func(t *testing.T) {
		s := site(world.BadCharset)
		resp, body := get(t, raw, "GET", run.URL(s), map[string]string{"Accept-Encoding": "gzip"})
		if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "" || utf8.Valid(body) ||
			resp.Header.Get("Content-Type") != "text/html; charset=utf-8" || !bytes.Contains(body, []byte(`<meta charset="utf-8">`)) ||
			!bytes.Contains(body, []byte("<title>caf\xe9 \xff")) || resp.ContentLength != int64(len(body)) {
			t.Fatalf("bad charset home: %d %v %q", resp.StatusCode, resp.Header, body[:min(len(body), 300)])
		}
		types := map[string]bool{}
		for _, u := range pagesOf(s) {
			resp, body := get(t, raw, "GET", u, nil)
			if utf8.Valid(body) {
				t.Fatalf("%s: valid UTF-8", u)
			}
			types[resp.Header.Get("Content-Type")] = true
		}
		t.Logf("%d pages, content types %v", len(pagesOf(s)), types)
	})
	t.Run("unknown encoding", func(t *testing.T) {
		s := site(world.UnknownEncoding)
		resp, body := get(t, raw, "GET", run.URL(s), map[string]string{"Accept-Encoding": "gzip"})
		if resp.Header.Get("Content-Encoding") != "x-klingon" || !bytes.Contains(body, []byte("</html>")) {
			t.Fatalf("unknown encoding: %v", resp.Header)
		}
	})
	t.Run("false gzip", func(t *testing.T) {
		s := site(world.FalseGzip)
		resp, body := get(t, raw, "GET", run.URL(s), map[string]string{"Accept-Encoding": "gzip"})
		if resp.Header.Get("Content-Encoding") != "gzip" || !bytes.HasPrefix(body, []byte("<!DOCTYPE html>")) {
			t.Fatalf("false gzip home: %v %q", resp.Header, body[:min(len(body), 40)])
		}
		if _, err := gzip.NewReader(bytes.NewReader(body)); err == nil {
			t.Fatal("false gzip home page is gzip")
		}
		for _, u := range pagesOf(s) {
			_, body := get(t, raw, "GET", u, map[string]string{"Accept-Encoding": "gzip"})
			if zr, err := gzip.NewReader(bytes.NewReader(body)); err == nil {
				if _, err := io.Copy(io.Discard, zr); err == nil {
					t.Fatalf("%s: a valid gzip stream", u)
				}
			}
		}
	})
	t.Run("hidden gzip", func(t *testing.T) {
		s := site(world.HiddenGzip)
		resp, body := get(t, raw, "GET", run.URL(s), nil)
		if resp.Header.Get("Content-Encoding") != "identity" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Fatalf("hidden gzip home: %v", resp.Header)
		}
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		page, err := io.ReadAll(zr)
		if err != nil || !bytes.Contains(page, []byte("</html>")) {
			t.Fatalf("hidden gzip home does not hold the page: %v", err)
		}
	})
	t.Run("link trap", func(t *testing.T) {
		u := run.URL(site(world.LinkTrap))
		seen := map[string]bool{}
		for depth := range 5 {
			resp, body := get(t, c, "GET", u, nil)
			if resp.StatusCode != 200 {
				t.Fatalf("trap depth %d: %d", depth, resp.StatusCode)
			}
			i := bytes.Index(body, []byte(`href="`))
			if i < 0 {
				t.Fatal("trap page without links")
			}
			href := string(body[i+6 : i+6+bytes.IndexByte(body[i+6:], '"')])
			if seen[href] {
				t.Fatalf("trap link %s repeats", href)
			}
			seen[href] = true
			u = strings.TrimSuffix(run.URL(site(world.LinkTrap)), "/") + href
		}
	})
}

// headerSize sends GET path to site s on port and returns the bytes of the
// response's status line and headers, the blank line included (read up to
// 16 MiB).
func headerSize(t *testing.T, d *net.Dialer, s world.Site, port int, path string) int {
	t.Helper()
	c, err := d.DialContext(t.Context(), "tcp", netip.AddrPortFrom(s.Addrs[0], uint16(port)).String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n", path, s.Name, port)
	var got []byte
	buf := make([]byte, 64<<10)
	for len(got) < 16<<20 {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if i := bytes.Index(got, []byte("\r\n\r\n")); i >= 0 {
			return i + 4
		}
		if err != nil {
			t.Fatalf("%s: %v after %d bytes", path, err, len(got))
		}
	}
	t.Fatalf("%s: no end of headers in 16 MiB", path)
	return 0
}

func mustDialer(t *testing.T, run *world.Running, from netip.Addr) *net.Dialer {
	d, err := run.Dialer(from)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestLoopbackOnly(t *testing.T) {
	run := worldtest.Start(t, worldtest.Params(15, 20, 2))
	for _, a := range []string{"10.0.0.1", "192.0.2.1", "::1"} {
		if _, err := run.Client(netip.MustParseAddr(a)); !errors.Is(err, world.ErrNotLoopback) {
			t.Fatalf("Client(%s) = %v, want ErrNotLoopback", a, err)
		}
	}
	d := mustDialer(t, run, run.World().NodeAddrs()[0])
	// The Control hook refuses before any packet leaves.
	if _, err := d.DialContext(t.Context(), "tcp", "192.0.2.1:80"); !errors.Is(err, world.ErrNotLoopback) {
		t.Fatalf("dial outside loopback: %v, want ErrNotLoopback", err)
	}
}

func TestPortConflict(t *testing.T) {
	p := worldtest.Params(16, 20, 2)
	a := worldtest.Start(t, p)
	w := a.World()
	_, err := w.Start(t.Context(), world.Port(a.Port()))
	if !errors.Is(err, world.ErrAddrInUse) {
		t.Fatalf("second world on the same port: %v, want ErrAddrInUse", err)
	}
	b := worldtest.Start(t, p) // Port(0) finds another port
	if b.Port() == a.Port() {
		t.Fatal("two worlds on one port")
	}
}

func TestCloseWakesHandlers(t *testing.T) {
	p := worldtest.Params(17, 40, 2)
	w := worldtest.Generate(t, p)
	run, err := w.Start(t.Context(), world.Port(0), world.TimeScale(1), world.Hostile(true))
	if err != nil {
		t.Fatal(err)
	}
	var drip world.Site
	for _, s := range w.Sites() {
		if s.Hostile == world.SlowDrip {
			drip = s
		}
	}
	c, _ := run.Client(w.NodeAddrs()[0])
	done := make(chan error, 1)
	go func() {
		resp, err := c.Get(run.URL(drip))
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		done <- err
	}()
	// Wait (bounded) until the drip has started; it would last ten minutes.
	for i := 0; run.Counters(drip).Requests == 0; i++ {
		if i == 500 {
			t.Fatal("the request did not arrive")
		}
		time.Sleep(10 * time.Millisecond)
	}
	closed := make(chan error, 1)
	go func() { closed <- run.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return while a slow drip was being served")
	}
	if err := run.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("client still reading after Close")
	}
}
