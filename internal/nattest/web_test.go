//go:build linux

package nattest

import (
	"fmt"
	"html"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// region is a place of the emulated Internet: one organisation's address
// block in micra's built-in subnet snapshot (each a subnet of its own, in
// its own registry's tree), named by its registry country. Inside the lab
// these are ordinary public addresses; no packet to them leaves it.
type region struct {
	name   string
	prefix netip.Prefix
}

var (
	// hosting holds the public nodes and the DNS server (RIPE NCC's own
	// block).
	hosting = region{"nl", netip.MustParsePrefix("193.0.0.0/21")}
	// The volunteers' regions: each holds one volunteer's router and one
	// web site (APNIC's, LACNIC's and AFRINIC's own blocks).
	au = region{"au", netip.MustParsePrefix("202.12.28.0/24")}
	uy = region{"uy", netip.MustParsePrefix("200.3.12.0/22")}
	za = region{"za", netip.MustParsePrefix("196.216.2.0/23")}

	regions = []region{hosting, au, uy, za}
)

// interRegion is the backbone's one-way delay between two regions (none
// within one): 80 ms round trips, above IPMicra's 50 ms threshold, so that
// a site's subnet is delegated to the volunteer of its region, the only
// node that probes it under the threshold; and libp2p's own traffic sees
// the same distances, so that the guided search's triangle-inequality
// bounds hold and hole punching synchronises over a real round trip.
const interRegion = 40 * time.Millisecond

// regionOf returns the region holding a, "" for none.
func regionOf(a netip.Addr) string {
	for _, r := range regions {
		if r.prefix.Contains(a) {
			return r.name
		}
	}
	return ""
}

// oneWay is the backbone's delay from src to dst.
func oneWay(src, dst netip.Addr) time.Duration {
	if regionOf(src) == regionOf(dst) {
		return 0
	}
	return interRegion
}

// Addresses of the lab's public hosts.
var (
	bootstrapAddr = netip.MustParseAddr("193.0.0.10") // the bootstrap node, which relays
	indexerAddr   = netip.MustParseAddr("193.0.0.11")
	dnsAddr       = netip.MustParseAddr("193.0.0.53")
)

// site is one web site of the emulated Internet.
type site struct {
	host   string
	addr   netip.Addr
	region region
	words  string // what its pages are about
}

var sites = []site{
	{"www.outback-news.test", netip.MustParseAddr("202.12.28.80"), au, "kangaroo eucalyptus reef wombat"},
	{"www.rio-de-la-plata.test", netip.MustParseAddr("200.3.12.80"), uy, "gaucho mate candombe estuary"},
	{"www.cape-flora.test", netip.MustParseAddr("196.216.2.80"), za, "protea fynbos springbok savanna"},
}

// pagesPerSite is the number of article pages of a site besides its home
// page and one page for each other site's link to it.
const pagesPerSite = 4

// home is a site's home page URL.
func (s site) home() string { return "http://" + s.host + "/" }

// from is the page of s that site o links to: crawling o finds it, and
// o's volunteer hands it to s's.
func (s site) from(o site) string { return "http://" + s.host + "/from/" + o.region.name }

// web serves the sites (HTTP on port 80) and their DNS in the lab's web
// namespace, and counts each site's requests by source address.
type web struct {
	mu   sync.Mutex
	hits map[string]map[netip.Addr]int // host → source → requests
}

// startWeb serves the sites and DNS inside the namespace of role, until
// the test ends.
func startWeb(t *testing.T, l *lab, role string) *web {
	t.Helper()
	w := &web{hits: map[string]map[netip.Addr]int{}}
	srv := &http.Server{Handler: http.HandlerFunc(w.serve), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	t.Cleanup(func() { srv.Close() })
	for _, s := range sites {
		ln, err := l.listen(role, "tcp", netip.AddrPortFrom(s.addr, 80).String())
		if err != nil {
			t.Fatalf("site %s: %v", s.host, err)
		}
		go srv.Serve(ln)
	}
	h := dns.HandlerFunc(serveDNS)
	tl, err := l.listen(role, "tcp", netip.AddrPortFrom(dnsAddr, 53).String())
	if err != nil {
		t.Fatalf("DNS: %v", err)
	}
	pc, err := l.listenPacket(role, "udp", netip.AddrPortFrom(dnsAddr, 53).String())
	if err != nil {
		tl.Close()
		t.Fatalf("DNS: %v", err)
	}
	for _, s := range []*dns.Server{{Listener: tl, Handler: h}, {PacketConn: pc, Handler: h}} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		errc := make(chan error, 1)
		go func() { errc <- s.ActivateAndServe() }()
		select {
		case <-started:
		case err := <-errc:
			t.Fatalf("DNS: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatal("DNS: not serving after 10s")
		}
		t.Cleanup(func() { s.Shutdown() })
	}
	return w
}

// serveDNS answers A queries for the sites' names and NXDOMAIN for any
// other name.
func serveDNS(wr dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	if req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 {
		m.SetRcode(req, dns.RcodeFormatError)
		_ = wr.WriteMsg(m)
		return
	}
	m.SetReply(req)
	m.Authoritative = true
	q := req.Question[0]
	name := strings.TrimSuffix(strings.ToLower(q.Name), ".")
	m.Rcode = dns.RcodeNameError
	for _, s := range sites {
		if s.host == name {
			m.Rcode = dns.RcodeSuccess
			if q.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: s.addr.AsSlice()})
			}
		}
	}
	_ = wr.WriteMsg(m)
}

func (w *web) serve(rw http.ResponseWriter, r *http.Request) {
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	var s site
	for _, c := range sites {
		if c.host == host {
			s = c
		}
	}
	if s.host == "" {
		http.NotFound(rw, r)
		return
	}
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		w.mu.Lock()
		if w.hits[s.host] == nil {
			w.hits[s.host] = map[netip.Addr]int{}
		}
		w.hits[s.host][ap.Addr().Unmap()]++
		w.mu.Unlock()
	}
	if r.URL.Path == "/robots.txt" {
		rw.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(rw, "User-agent: *\nAllow: /\n")
		return
	}
	title, body, ok := s.page(r.URL.Path)
	if !ok {
		http.NotFound(rw, r)
		return
	}
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(rw, "<!doctype html><html><head><title>%s</title></head><body><h1>%s</h1>%s</body></html>\n",
		html.EscapeString(title), html.EscapeString(title), body)
}

// page returns the title and body of path on s.
func (s site) page(path string) (title, body string, ok bool) {
	var b strings.Builder
	para := func(n int) {
		for i := range 3 {
			fmt.Fprintf(&b, "<p>Page %d of %s, paragraph %d: %s and %s.</p>", n, s.host, i, s.words, s.region.name)
		}
	}
	switch {
	case path == "/":
		para(0)
		for i := 1; i <= pagesPerSite; i++ {
			fmt.Fprintf(&b, `<a href="/p/%d">article %d</a> `, i, i)
		}
		for _, o := range sites {
			if o.host != s.host {
				fmt.Fprintf(&b, `<a href="%s">our friends in %s</a> `, o.from(s), o.region.name)
			}
		}
		return s.host + " home", b.String(), true
	case strings.HasPrefix(path, "/p/"):
		var n int
		if _, err := fmt.Sscanf(path, "/p/%d", &n); err != nil || n < 1 || n > pagesPerSite || path != fmt.Sprintf("/p/%d", n) {
			return "", "", false
		}
		para(n)
		b.WriteString(`<a href="/">home</a>`)
		return fmt.Sprintf("%s article %d", s.host, n), b.String(), true
	case strings.HasPrefix(path, "/from/"):
		from := strings.TrimPrefix(path, "/from/")
		for _, o := range sites {
			if o.region.name == from && o.host != s.host {
				para(100)
				fmt.Fprintf(&b, `<a href="/">home</a> <a href="%s">back to %s</a>`, o.home(), o.host)
				return fmt.Sprintf("%s, as linked from %s", s.host, o.host), b.String(), true
			}
		}
	}
	return "", "", false
}

// sources returns the addresses that requested pages of host, with their
// counts, in address order.
func (w *web) sources(host string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var addrs []netip.Addr
	for a := range w.hits[host] {
		addrs = append(addrs, a)
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i].Less(addrs[j]) })
	var parts []string
	for _, a := range addrs {
		parts = append(parts, fmt.Sprintf("%s×%d", a, w.hits[host][a]))
	}
	return strings.Join(parts, " ")
}
