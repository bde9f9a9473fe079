package crawl_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/micra-net/micra/crawl"
)

// Addresses of the egress test (RELIABILITY.md scenario 8). The attacker's web
// server sits in attackerNet, the only special-purpose range the crawler
// is allowed (as the emulated Internet's sites are); the target stands
// for the volunteer's own machine, a LAN device or a metadata service.
var (
	attackerNet  = netip.MustParsePrefix("127.77.0.0/24")
	attackerAddr = netip.MustParseAddr("127.77.0.1")
	targetAddr   = netip.MustParseAddr("127.0.0.1")
)

// countingListener accepts connections, counts them and answers each with
// one small HTTP response; it is the target's side of the egress test.
type countingListener struct {
	ln    net.Listener
	conns atomic.Int64
	wg    sync.WaitGroup
}

func (c *countingListener) serve() {
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			return
		}
		c.conns.Add(1)
		c.wg.Go(func() {
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 4096)
			_, _ = conn.Read(buf)
			_, _ = conn.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 33\r\nConnection: close\r\n\r\n<html><body>secret</body></html>\n"))
		})
	}
}

// rebindResolver is a hostile DNS: names that point at the target, at
// both the attacker and the target, at the target in IPv4-mapped form,
// the numeric spellings of the target a libc resolver would accept, and a
// name that answers the attacker first and the target ever after (DNS
// rebinding).
type rebindResolver struct {
	mu      sync.Mutex
	rebinds int
}

func (r *rebindResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	switch host {
	case "evil.test":
		return []netip.Addr{attackerAddr}, nil
	case "internal.test", "localhost", "2130706433", "127.1", "0x7f.1", "017700000001":
		return []netip.Addr{targetAddr}, nil
	case "mixed.test":
		return []netip.Addr{targetAddr, attackerAddr}, nil
	case "mapped.test":
		return []netip.Addr{netip.AddrFrom16(targetAddr.As16())}, nil
	case "rebind.test":
		r.mu.Lock()
		defer r.mu.Unlock()
		r.rebinds++
		if r.rebinds == 1 {
			return []netip.Addr{attackerAddr}, nil
		}
		return []netip.Addr{targetAddr}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// listenPair binds the attacker's server and the target on the same port,
// so that only the address check can tell them apart.
func listenPair(t *testing.T) (attacker, target net.Listener) {
	for range 20 {
		a, err := net.Listen("tcp", netip.AddrPortFrom(attackerAddr, 0).String())
		if err != nil {
			t.Fatal(err)
		}
		port := a.Addr().(*net.TCPAddr).Port
		b, err := net.Listen("tcp", fmt.Sprintf("%s:%d", targetAddr, port))
		if err == nil {
			return a, b
		}
		a.Close()
	}
	t.Fatal("no port free on both addresses")
	return nil, nil
}

// TestEgressHostile (RELIABILITY.md scenario 8): with the egress guard on, a
// crawler allowed only the attacker's range is sent at the target by
// links, redirects (one hop and chains, robots.txt included), hostile DNS
// answers (the target, the target beside an allowed address, IPv4-mapped,
// numeric spellings, rebinding after a first honest answer), seeds and
// probe requests. The target's listener must see no connection at all.
// The same setup with the guard lifted reaches the target, which shows
// the count means something.
func TestEgressHostile(t *testing.T) {
	aln, tln := listenPair(t)
	port := uint16(aln.Addr().(*net.TCPAddr).Port)
	target := &countingListener{ln: tln}
	go target.serve()
	t.Cleanup(func() { tln.Close(); target.wg.Wait() })

	targets := []string{
		fmt.Sprintf("http://%s:%d/", targetAddr, port),
		fmt.Sprintf("http://internal.test:%d/admin", port),
		fmt.Sprintf("http://mixed.test:%d/", port),
		fmt.Sprintf("http://mapped.test:%d/", port),
		fmt.Sprintf("http://[::ffff:%s]:%d/", targetAddr, port),
		fmt.Sprintf("http://2130706433:%d/", port),
		fmt.Sprintf("http://127.1:%d/", port),
		fmt.Sprintf("http://0x7f.1:%d/", port),
		fmt.Sprintf("http://017700000001:%d/", port),
		fmt.Sprintf("http://rebind.test:%d/", port),
		fmt.Sprintf("http://rebind.test:%d/second", port),
		fmt.Sprintf("http://localhost:%d/", port),
	}
	var attackerHits atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/robots.txt", func(w http.ResponseWriter, r *http.Request) {
		attackerHits.Add(1)
		http.Redirect(w, r, targets[0]+"robots.txt", http.StatusMovedPermanently)
	})
	mux.HandleFunc("/redir/", func(w http.ResponseWriter, r *http.Request) {
		attackerHits.Add(1)
		var k int
		if _, err := fmt.Sscanf(r.URL.Path, "/redir/%d", &k); err != nil || k < 0 || k >= len(targets) {
			http.NotFound(w, r)
			return
		}
		http.Redirect(w, r, targets[k], http.StatusFound)
	})
	mux.HandleFunc("/chain/", func(w http.ResponseWriter, r *http.Request) {
		attackerHits.Add(1)
		// A chain of two hops on the attacker, then the target.
		if r.URL.Path == "/chain/1" {
			http.Redirect(w, r, "/chain/2", http.StatusFound)
			return
		}
		http.Redirect(w, r, targets[1], http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		attackerHits.Add(1)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		var b strings.Builder
		b.WriteString("<!DOCTYPE html><html><head><title>Free prizes</title>")
		fmt.Fprintf(&b, `<meta http-equiv="refresh" content="0; url=%s">`, targets[0])
		b.WriteString("</head><body><h1>Prizes</h1>\n")
		for k, u := range targets {
			fmt.Fprintf(&b, "<a href=%q>prize %d</a> <a href=\"/redir/%d\">more %d</a>\n", u, k, k, k)
		}
		b.WriteString(`<a href="/chain/1">chain</a> <img src="` + targets[0] + `img.png"></body></html>`)
		_, _ = w.Write([]byte(b.String()))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(aln) }()
	t.Cleanup(func() { srv.Close() })

	guarded := []crawl.Option{
		crawl.DNS(&rebindResolver{}), crawl.AllowPrefixes([]netip.Prefix{attackerNet}, port),
		crawl.Politeness(5*time.Millisecond, 50*time.Millisecond), crawl.MaxDepth(3),
		crawl.Timeouts(2*time.Second, 2*time.Second, 4*time.Second),
		crawl.Logger(slog.New(slog.DiscardHandler)),
	}

	// Probes: a hostile peer asks this node to time HEADs to the target.
	f, err := crawl.NewFetcher(guarded...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	for _, u := range targets {
		_, err := f.Probe(t.Context(), u, 3)
		// mixed.test has the attacker's address too, and rebind.test
		// answered it first (the fetcher keeps a name's answer): those
		// probes reach the attacker, every other one is refused.
		if err == nil && !strings.Contains(u, "mixed.test") && !strings.Contains(u, "rebind.test") {
			t.Errorf("probe of %s succeeded", u)
		}
	}
	// The attacker's range is reachable: the guard is not simply closed.
	if _, err := f.Probe(t.Context(), fmt.Sprintf("http://evil.test:%d/", port), 1); err != nil {
		t.Fatalf("probe of the allowed attacker: %v", err)
	}

	// The crawl: the attacker's site as a seed, and every target URL as a
	// seed (forwarded URLs and seeds reach the crawler the same way).
	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	sink := &worldSink{}
	c, err := crawl.New(db, sink, guarded...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	seeds := []crawl.Request{{Link: fmt.Sprintf("http://evil.test:%d/", port), Depth: crawl.DefaultDepth}}
	for _, u := range targets {
		seeds = append(seeds, crawl.Request{Link: u, Depth: crawl.DefaultDepth})
	}
	if err := c.Submit(t.Context(), seeds...); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, c, time.Minute)
	st := c.Stats()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := target.conns.Load(); n != 0 {
		t.Fatalf("the target saw %d connections with the egress guard on", n)
	}
	if attackerHits.Load() < 3 {
		t.Fatalf("the attacker's site was hardly crawled (%d requests): the test proves nothing", attackerHits.Load())
	}
	t.Logf("guard on: %d hostile URLs, %d requests to the attacker, %d fetched, %d fetch errors, 0 connections at the target",
		len(targets)*2+3, attackerHits.Load(), st.Fetched, st.FetchErrors)

	// Control: the guard lifted, the same links reach the target.
	open, err := crawl.NewFetcher(crawl.DNS(&rebindResolver{}), crawl.AllowPrivateNetworks(port),
		crawl.Timeouts(2*time.Second, 2*time.Second, 4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { open.Close() })
	resp, err := open.Fetch(t.Context(), crawl.FetchRequest{URL: mustURL(t, fmt.Sprintf("http://evil.test:%d/redir/1", port))})
	if err != nil || resp.Status != 200 || !strings.Contains(string(resp.Body), "secret") {
		t.Fatalf("guard lifted: redirect to the target: %v", err)
	}
	if target.conns.Load() == 0 {
		t.Fatal("the target's listener counts nothing")
	}
}

func waitIdle(t *testing.T, c *crawl.Crawler, limit time.Duration) {
	t.Helper()
	idle := 0
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		st := c.Stats()
		if st.Queued == 0 && st.InFlight == 0 && st.Fetched+st.FetchErrors > 0 {
			if idle++; idle >= 10 {
				return
			}
		} else {
			idle = 0
		}
	}
	t.Fatalf("the crawl did not finish in %v: %+v", limit, c.Stats())
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
