package world

import (
	"bytes"
	"compress/gzip"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/micra-net/micra/subnet"
)

func fuzzWorld(t testing.TB) (*World, *Running) {
	p := params(31, 40, 2)
	p.Hostile = numHostileKinds // one of each kind
	w := genWorld(t, p)
	r := &Running{w: w, cfg: defaultConfig(), port: 8080, start: time.Unix(1_780_000_000, 0), log: slog.New(slog.DiscardHandler)}
	r.cfg.clock = func() time.Time { return time.Unix(1_780_000_000, 0) }
	r.stats = make([]*siteStats, len(w.sites))
	for i := range r.stats {
		r.stats[i] = newSiteStats()
	}
	return w, r
}

// FuzzRespond feeds arbitrary request lines and headers to every site's
// request handling (the decoder of untrusted requests): it must not panic
// and must answer a valid status with a body that fits its length.
func FuzzRespond(f *testing.F) {
	w, r := fuzzWorld(f)
	for _, s := range w.sites[:6] {
		f.Add(uint8(s.id), "GET", s.path(min(2, s.pages-1)), s.name, "", "", "gzip")
	}
	for _, s := range w.sites {
		if s.hostile != NotHostile {
			f.Add(uint8(s.id), "GET", "/", s.name, "", "", "gzip")
			f.Add(uint8(s.id), "GET", s.path(min(1, s.pages-1)), s.name, "", "", "")
		}
	}
	f.Add(uint8(0), "GET", "/old/old/index.php?page=3&cat=0", "x", `W/"a", "b"`, "Mon, 02 Jan 2006 15:04:05 GMT", "gzip;q=0")
	f.Add(uint8(1), "HEAD", "/sitemap-1.xml", "", "*", "garbage", "x-gzip;q=0.5")
	f.Add(uint8(2), "GET", "/robots.txt", "", "", "", "")
	f.Add(uint8(3), "DELETE", "/a/../b.html?%zz", "", "", "", "")
	f.Fuzz(func(t *testing.T, site uint8, method, target, host, inm, ims, ae string) {
		s := w.sites[int(site)%len(w.sites)]
		u, err := url.ParseRequestURI(target)
		if err != nil {
			return
		}
		req := &http.Request{Method: method, URL: u, Host: host, Header: http.Header{}}
		req.Header.Set("If-None-Match", inm)
		req.Header.Set("If-Modified-Since", ims)
		req.Header.Set("Accept-Encoding", ae)
		for _, hostile := range []bool{false, true} {
			r.hostile.Store(hostile)
			if hostile && s.hostile == SlowDrip || hostile && s.hostile == HugeBody {
				continue // streams: covered by the server tests
			}
			h := http.Header{}
			rep := r.respond(h, req, s)
			if rep.status < 200 || rep.status > 599 {
				t.Fatalf("status %d", rep.status)
			}
			if cl := h.Get("Content-Length"); rep.stream == nil && rep.status != 304 && cl != "" && cl != itoa(len(rep.body)) {
				t.Fatalf("Content-Length %s for %d bytes", cl, len(rep.body))
			}
		}
	})
}

func itoa(n int) string { return strconv.Itoa(n) }

// FuzzPagePath checks the page parser of every path style: whatever it
// accepts is a page whose canonical path it accepts again.
func FuzzPagePath(f *testing.F) {
	w, _ := fuzzWorld(f)
	for _, s := range w.sites[:6] {
		f.Add(uint8(s.id), s.path(s.pages-1))
	}
	f.Add(uint8(0), "/index.php?page=-1&cat=0")
	f.Add(uint8(1), "/a-99999999999999999999.html")
	f.Add(uint8(2), "//x/-1/")
	f.Fuzz(func(t *testing.T, site uint8, target string) {
		s := w.sites[int(site)%len(w.sites)]
		u, err := url.ParseRequestURI(target)
		if err != nil {
			return
		}
		i, ok := s.page(u.Path, u.Query())
		_ = s.disallowed(target)
		if !ok {
			return
		}
		if i < 0 || i >= s.pages {
			t.Fatalf("page %d of %d", i, s.pages)
		}
		cu, _ := url.ParseRequestURI(s.path(i))
		if j, ok := s.page(cu.Path, cu.Query()); !ok || j != i {
			t.Fatalf("canonical path of %d parses to %d, %v", i, j, ok)
		}
	})
}

// FuzzMatchRobots checks that the robots.txt matcher never panics and
// that a pattern always matches itself (without a '$' or '*').
func FuzzMatchRobots(f *testing.F) {
	f.Add("/a*b$", "/axxb")
	f.Add("*", "")
	f.Add("$", "/")
	f.Fuzz(func(t *testing.T, pattern, path string) {
		_ = matchRobots(pattern, path)
		if !strings.ContainsAny(pattern, "*$") && !matchRobots(pattern, pattern+path) {
			t.Fatalf("%q does not match %q", pattern, pattern+path)
		}
	})
}

// dnsRecorder is a dns.ResponseWriter that keeps the reply.
type dnsRecorder struct {
	remote net.Addr
	msg    *dns.Msg
}

func (d *dnsRecorder) LocalAddr() net.Addr {
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 53), Port: 53}
}
func (d *dnsRecorder) RemoteAddr() net.Addr        { return d.remote }
func (d *dnsRecorder) Network() string             { return "udp" }
func (d *dnsRecorder) WriteMsg(m *dns.Msg) error   { d.msg = m; return nil }
func (d *dnsRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (d *dnsRecorder) Close() error                { return nil }
func (d *dnsRecorder) TsigStatus() error           { return nil }
func (d *dnsRecorder) TsigTimersOnly(bool)         {}
func (d *dnsRecorder) Hijack()                     {}

// FuzzDNS feeds arbitrary DNS messages to the world's DNS handler: it must
// answer every message that unpacks with one that packs and fits UDP.
func FuzzDNS(f *testing.F) {
	w, r := fuzzWorld(f)
	for _, name := range []string{w.sites[0].name, "unknown.example", ""} {
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(name), dns.TypeA)
		b, _ := m.Pack()
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req := new(dns.Msg)
		if req.Unpack(b) != nil {
			return
		}
		rec := &dnsRecorder{remote: &net.UDPAddr{IP: net.IPv4(127, 9, 9, 9), Port: 5353}}
		r.serveDNS(rec, req)
		if rec.msg == nil {
			t.Fatal("no reply")
		}
		out, err := rec.msg.Pack()
		if err != nil {
			t.Fatalf("reply does not pack: %v", err)
		}
		if len(out) > dns.MaxMsgSize {
			t.Fatalf("reply of %d bytes", len(out))
		}
	})
}

// FuzzLatencyData feeds arbitrary bytes to the latency data parsers: they
// must fail cleanly or give symmetric, finite matrices.
func FuzzLatencyData(f *testing.F) {
	f.Add([]byte("id,name,title,location,state,country,state_abbv,continent,latitude,longitude\n1,A,A,A,S,Germany,S,3,50.1,8.6\n2,B,B,B,S,Japan,S,3,35.6,139.7\n"),
		[]byte("source,destination,min,avg,max,mdev\n1,2,1,230.5,240,0.5\n2,1,1,231,240,0.4\n"))
	f.Add([]byte("id,name\n"), []byte(""))
	f.Fuzz(func(t *testing.T, servers, pings []byte) {
		d := &latencyData{byCountry: map[string][]int{}}
		if d.readServers(bytes.NewReader(servers)) != nil {
			return
		}
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		_, _ = zw.Write(pings)
		_ = zw.Close()
		if d.readPings(&z) != nil {
			return
		}
		for i := 0; i < d.n(); i++ {
			for j := 0; j < d.n(); j++ {
				if v := d.at(i, j); v != d.at(j, i) || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
					t.Fatalf("rtt(%d,%d) = %v, rtt(%d,%d) = %v", i, j, v, j, i, d.at(j, i))
				}
			}
		}
	})
}

// FuzzUpdateRegistry feeds arbitrary bytes as an RPSL inetnum file to
// UpdateRegistry: it must not panic, and whatever it accepts it must turn
// into a file it accepts again, with at most n changes of each kind and
// none with n = 0.
func FuzzUpdateRegistry(f *testing.F) {
	w, _ := fuzzWorld(f)
	for _, rf := range w.Registry() {
		if strings.HasSuffix(rf.Name, ".db.inetnum") {
			f.Add(rf.Data, uint64(1), uint8(3))
		}
	}
	f.Add([]byte("inetnum: 10.0.0.0 - 10.0.0.255\n\ninetnum: 10.0.0.0/30\nnetname: A\n\ninetnum: 10.0.0.4 - 10.0.0.7\n"), uint64(2), uint8(1))
	f.Add([]byte("inetnum: 0.0.0.0/0\n\ninetnum: 255.255.255.252/30\n\ninetnum: 0.0.0.0/32\n"), uint64(3), uint8(2))
	f.Add([]byte("% c\ninetnum: 200.3/16 # x\n+ cont\n\ninetnum: 200.3.0.0 - 200.3.255.255\n"), uint64(4), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64, n uint8) {
		in := []RegistryFile{{Name: "fuzz.db.inetnum", Format: subnet.FormatRPSL, Data: data}}
		out, ch, err := UpdateRegistry(in, seed, int(n%8))
		if err != nil {
			return
		}
		for _, c := range [][]RegistryChange{ch.Split, ch.Merged, ch.Removed, ch.Added} {
			if len(c) > int(n%8) {
				t.Fatalf("%d changes of a kind, n = %d", len(c), n%8)
			}
		}
		if n%8 == 0 && !bytes.Equal(out[0].Data, data) {
			t.Fatalf("n = 0 changed the file to %q", out[0].Data)
		}
		if _, _, err := UpdateRegistry(out, seed, int(n%8)); err != nil {
			t.Fatalf("output not accepted again: %v\n%s", err, out[0].Data)
		}
	})
}

// BenchmarkRenderPage measures rendering one page with its links.
func BenchmarkRenderPage(b *testing.B) {
	w := genWorld(b, params(1, 1000, 4))
	rc := renderCtx{now: 1_780_000_000, base: "http://x:8080", port: 8080}
	var buf bytes.Buffer
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s := w.sites[i%len(w.sites)]
		pg := i % s.pages
		pi := w.pageInfo(s, pg)
		v, _ := pi.version(s, rc.now)
		buf.Reset()
		w.renderPage(&buf, s, pg, rc, v, pi)
		i++
	}
	b.SetBytes(int64(buf.Len()))
}
