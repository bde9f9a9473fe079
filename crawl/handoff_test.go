package crawl

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// disownRouter keeps every URL (the node's view when the pages were
// processed) and disowns the addresses in gone (its view now: their subnet
// went to another node). It counts the questions it is asked.
type disownRouter struct {
	mu    sync.Mutex
	gone  map[netip.Addr]bool
	asked atomic.Int32
}

var _ Disowner = (*disownRouter)(nil)

func (r *disownRouter) Route(*url.URL, netip.Addr) bool { return true }

func (r *disownRouter) Disowned(a netip.Addr, _ time.Time) bool {
	r.asked.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gone[a]
}

func (r *disownRouter) set(a netip.Addr, gone bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gone == nil {
		r.gone = make(map[netip.Addr]bool)
	}
	r.gone[a] = gone
}

// hostServer is a test server on its own loopback address that counts the
// requests it gets per path (robots.txt included).
type hostServer struct {
	*httptest.Server
	addr netip.Addr
	mu   sync.Mutex
	hits map[string]int
}

func newHostServer(t *testing.T, ip string, page func(path string) string) *hostServer {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Skipf("cannot listen on %s: %v", ip, err)
	}
	s := &hostServer{addr: netip.MustParseAddr(ip), hits: make(map[string]int)}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.hits[r.URL.Path]++
		s.mu.Unlock()
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, page(r.URL.Path))
	}))
	s.Listener.Close()
	s.Listener = ln
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func (s *hostServer) count(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[path]
}

func (s *hostServer) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.hits {
		n += c
	}
	return n
}

// TestHandoffDisowned: queued requests of an address the node no longer
// crawls are handed off to the outgoing store, with their depth, parent,
// owners and address, and never fetched, while another host is crawled as
// usual. Kept again (the node won the address back), they are queued
// although their URLs were seen, and fetched.
func TestHandoffDisowned(t *testing.T) {
	b := newHostServer(t, "127.0.0.2", func(p string) string { return "<title>b" + p + "</title><p>words of b</p>" })
	a := newHostServer(t, "127.0.0.1", func(p string) string {
		if p == "/" {
			return fmt.Sprintf(`<title>a</title><a href="/a">a</a><a href="%s/x">x</a><a href="%s/y">y</a>`, b.URL, b.URL)
		}
		return "<title>a page</title><p>words of a</p>"
	})
	r := &disownRouter{}
	r.set(b.addr, true)
	sink := &testSink{}
	c := newTestCrawler(t, sink, Routing(r))
	if err := c.Submit(t.Context(), Request{Link: a.URL + "/", Depth: 1, Owners: []string{"alice"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "2 hand-offs and 2 records", func() bool {
		return c.Stats().HandedOff == 2 && len(sink.snapshot()) == 2
	})
	waitIdle(t, c)
	if n := b.total(); n != 0 {
		t.Fatalf("the disowned host got %d requests", n)
	}
	if a.count("/") != 1 || a.count("/a") != 1 {
		t.Fatalf("the other host: %v", a.hits)
	}
	if st := c.Stats(); st.HandedOff != 2 || st.Outgoing != 2 || st.Queued != 0 || st.Fetched != 2 || st.Dropped != 0 {
		t.Fatalf("stats after the hand-offs %+v", st)
	}
	out, err := c.Outgoing(Outlink{}, 10)
	if err != nil || len(out) != 2 {
		t.Fatalf("outgoing %+v (%v)", out, err)
	}
	want := map[string]bool{b.URL + "/x": true, b.URL + "/y": true}
	for _, o := range out {
		if !want[o.Link] || o.ParentLink != a.URL+"/" || o.Depth != 0 || o.hops != 1 || o.Addr != b.addr ||
			len(o.Owners) != 1 || o.Owners[0] != "alice" || !o.again {
			t.Fatalf("handed-off link %+v", o)
		}
		delete(want, o.Link)
	}

	// The node finds that it owns them after all.
	r.set(b.addr, false)
	if err := c.Keep(out...); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the kept pages", func() bool { return len(sink.snapshot()) == 4 })
	waitIdle(t, c)
	if b.count("/x") != 1 || b.count("/y") != 1 {
		t.Fatalf("the kept host: %v", b.hits)
	}
	if st := c.Stats(); st.HandedOff != 2 || st.Outgoing != 0 || st.Queued != 0 || st.Fetched != 4 {
		t.Fatalf("stats after Keep %+v", st)
	}
}

// sinceRouter disowns an address for requests queued before its subnet
// went to another node at decided, as the node's router does.
type sinceRouter struct {
	addr    netip.Addr
	decided time.Time
	asked   atomic.Int32
}

func (r *sinceRouter) Route(*url.URL, netip.Addr) bool { return true }

func (r *sinceRouter) Disowned(a netip.Addr, queued time.Time) bool {
	r.asked.Add(1)
	return a == r.addr && r.decided.After(queued)
}

// TestHandoffQueuedAfter: a request that entered the queue after its
// address went to another node (a node that resolved the host elsewhere
// sent it here) is fetched, not handed back; one queued before is handed
// off, and so is a revisit, whenever it came due.
func TestHandoffQueuedAfter(t *testing.T) {
	b := newHostServer(t, "127.0.0.2", func(p string) string { return "<title>b" + p + "</title><p>words of b</p>" })
	r := &sinceRouter{addr: b.addr, decided: time.Now()}
	sink := &testSink{}
	c := newTestCrawler(t, sink, Routing(r))
	if err := c.Submit(t.Context(), Request{Link: b.URL + "/after", Depth: 0}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the page queued after the decision", func() bool { return len(sink.snapshot()) == 1 })
	waitIdle(t, c)
	if st := c.Stats(); st.HandedOff != 0 || b.count("/after") != 1 || r.asked.Load() == 0 {
		t.Fatalf("stats %+v, hits %v, asked %d", st, b.hits, r.asked.Load())
	}
	for _, e := range []entry{{URL: b.URL + "/before", Added: r.decided.Add(-time.Second)}, {URL: b.URL + "/revisit", Revisit: true, Added: time.Now()}} {
		u, _ := url.Parse(e.URL)
		if _, err := c.front.add(e, u, true, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	c.poke()
	waitFor(t, "2 hand-offs", func() bool { return c.Stats().HandedOff == 2 })
	waitIdle(t, c)
	if b.count("/before") != 0 || b.count("/revisit") != 0 {
		t.Fatalf("disowned requests fetched: %v", b.hits)
	}
}

// TestHandoffOutgoingFull: a disowned request that finds the outgoing store
// full stays queued, unfetched, and is handed off once there is room.
func TestHandoffOutgoingFull(t *testing.T) {
	b := newHostServer(t, "127.0.0.2", func(string) string { return "<title>b</title>" })
	r := &disownRouter{}
	r.set(b.addr, true)
	c := newTestCrawler(t, &testSink{}, Routing(r), OutgoingCap(1))
	filler := Outlink{Request: Request{Link: "http://other.test/"}, Addr: netip.MustParseAddr("192.0.2.1")}
	if n, err := c.front.addOut([]Outlink{filler}); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	if err := c.Submit(t.Context(), Request{Link: b.URL + "/x", Depth: 0}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a hand-off to find the store full", c.outFull.Load)
	if st := c.Stats(); st.Queued != 1 || st.HandedOff != 0 || st.Outgoing != 1 || st.Dropped != 0 {
		t.Fatalf("stats with the store full %+v", st)
	}
	if n := b.total(); n != 0 {
		t.Fatalf("the disowned host got %d requests", n)
	}
	// The filler is handed on: the request follows it into the store.
	stored, err := c.Outgoing(Outlink{}, 10)
	if err != nil || len(stored) != 1 {
		t.Fatalf("outgoing %+v (%v)", stored, err)
	}
	if err := c.Handed(stored...); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the hand-off", func() bool { return c.Stats().HandedOff == 1 })
	out, err := c.Outgoing(Outlink{}, 10)
	if err != nil || len(out) != 1 || out[0].Link != b.URL+"/x" || !out[0].again {
		t.Fatalf("outgoing %+v (%v)", out, err)
	}
	if st := c.Stats(); st.Queued != 0 || st.Outgoing != 1 || st.Dropped != 0 || c.outFull.Load() {
		t.Fatalf("stats after the hand-off %+v", st)
	}
	if n := b.total(); n != 0 {
		t.Fatalf("the disowned host got %d requests", n)
	}
}

// TestHandoffFrontier: in the frontier, a hand-off takes the request out of
// its queue and into the store in one step, or, with the store full,
// leaves it queued with its host ready at the retry time. Keep queues a
// handed-off link again, but not twice, and a link from a page that was
// seen not at all.
func TestHandoffFrontier(t *testing.T) {
	f, err := openFrontier(openMemDB(t), 1000, time.Minute, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.outCap = 1
	c := &Crawler{front: f, log: quietLogger(), ctx: context.Background(), wake: make(chan struct{}, 1), outWake: make(chan struct{}, 1)}
	now := time.Now()
	addr := netip.MustParseAddr("192.0.2.1")
	x, y := mustURL(t, "http://b.test/x"), mustURL(t, "http://b.test/y")
	for _, u := range []*url.URL{x, y} {
		if _, err := f.add(entry{URL: u.String(), Parent: "http://a.test/", Depth: 2, Hops: 1}, u, false, now); err != nil {
			t.Fatal(err)
		}
	}
	handOff := func(at time.Time) (*lease, bool) {
		t.Helper()
		l, _, err := f.next(at)
		if err != nil || l == nil {
			t.Fatalf("next: %v %v", l, err)
		}
		e := l.entry
		o := Outlink{Request: Request{Link: e.URL, ParentLink: e.Parent, Depth: e.Depth}, Addr: addr, hops: e.Hops, again: true}
		stored, err := f.handOff(l, o, at, at.Add(handOffRetry))
		if err != nil {
			t.Fatal(err)
		}
		return l, stored
	}
	first, stored := handOff(now)
	if !stored {
		t.Fatal("not stored with room in the store")
	}
	if q, _ := f.counts(); q != 1 || f.nOut.Load() != 1 {
		t.Fatalf("after the hand-off: %d queued, %d outgoing", q, f.nOut.Load())
	}
	if st, found, err := f.state(first.entry.URL); err != nil || !found || st.Queued != nil {
		t.Fatalf("state of the handed-off URL %+v %v %v", st, found, err)
	}
	second, stored := handOff(now)
	if stored {
		t.Fatal("stored past the cap")
	}
	if q, _ := f.counts(); q != 1 || f.nOut.Load() != 1 {
		t.Fatalf("with the store full: %d queued, %d outgoing", q, f.nOut.Load())
	}
	if l, wait, err := f.next(now); err != nil || l != nil || !wait.Equal(now.Add(handOffRetry)) {
		t.Fatalf("with the store full, next: %v %v %v; want the host at the retry time", l, wait, err)
	}
	if l, _, err := f.next(now.Add(handOffRetry)); err != nil || l == nil || string(l.key) != string(second.key) {
		t.Fatalf("at the retry time, next: %v %v", l, err)
	} else if err := f.putBack(l, now); err != nil {
		t.Fatal(err)
	}

	out, bad, err := f.outgoing(nil, 10)
	if err != nil || bad != 0 || len(out) != 1 || !out[0].again {
		t.Fatalf("outgoing %+v %d %v", out, bad, err)
	}
	// Queued again meanwhile (a forwarded request): Keep adds no duplicate.
	if _, err := f.add(first.entry, mustURL(t, first.entry.URL), true, now); err != nil {
		t.Fatal(err)
	}
	if err := c.Keep(out...); err != nil {
		t.Fatal(err)
	}
	if q, _ := f.queued(); q != 2 || f.nOut.Load() != 0 {
		t.Fatalf("after Keep of a queued URL: %d queued, %d outgoing", q, f.nOut.Load())
	}
	// Not queued: a page's link to a URL seen before is not queued, a
	// handed-off link is.
	l, _, err := f.next(now.Add(time.Hour))
	if err != nil || l == nil {
		t.Fatalf("next: %v %v", l, err)
	}
	if err := f.finish(l, false, now); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		again bool
		want  int
	}{{false, 1}, {true, 2}} {
		e := l.entry
		if _, err := f.addOut([]Outlink{{Request: Request{Link: e.URL, ParentLink: e.Parent, Depth: e.Depth}, Addr: addr, hops: e.Hops, again: tc.again}}); err != nil {
			t.Fatal(err)
		}
		out, _, err := f.outgoing(nil, 10)
		if err != nil || len(out) != 1 {
			t.Fatalf("outgoing %+v %v", out, err)
		}
		if err := c.Keep(out...); err != nil {
			t.Fatal(err)
		}
		if q, _ := f.queued(); q != tc.want || f.nOut.Load() != 0 {
			t.Fatalf("again=%v: %d queued after Keep, want %d; %d outgoing", tc.again, q, tc.want, f.nOut.Load())
		}
	}
}
