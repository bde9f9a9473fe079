package crawl

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// TestPromise: the crawler takes the requests of a host only
// while those queued ahead of them can be fetched within the horizon at
// half the pace its Crawl-delay allows, and one sender's only while it
// holds less than three quarters of that (a newcomer may take one beyond,
// within a quarter); another host has its own room, a
// link found by the crawl itself does not count, and neither a host
// resting after a 429 nor a crawler kept idle by its windows takes any.
func TestPromise(t *testing.T) {
	release := make(chan struct{})
	var pages atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			io.WriteString(w, "User-agent: *\nCrawl-delay: 2\n")
			return
		}
		pages.Add(1)
		select { // every page hangs, so that the queue stays as it is
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	c := newTestCrawler(t, &testSink{}, Politeness(0, time.Minute))
	ctx := t.Context()
	link := func(i int) Request { return Request{Link: fmt.Sprintf("%s/%d", srv.URL, i)} }
	if err := c.Submit(ctx, link(0)); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(srv.URL, "http://")
	waitFor(t, "the first page fetched", func() bool { return pages.Load() == 1 })
	if d := c.robots.storedCrawlDelay(host); d != 2*time.Second {
		t.Fatalf("stored crawl delay %v, want 2s", d)
	}
	// A link the crawl found sorts after runtime requests: not ahead.
	addURL(t, c.front, srv.URL+"/found", srv.URL+"/0", 1, time.Now())

	// 20 s at half the pace of a 2-s delay: 5 requests, /0 among them;
	// one sender holds three of them at most, another has the fourth.
	const horizon = 20 * time.Second
	reqs := []Request{link(1), link(2), link(3), link(4), link(5), link(6)}
	taken, err := c.Promise(ctx, horizon, "a", reqs...)
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, true, true, false, false, false}; fmt.Sprint(taken) != fmt.Sprint(want) {
		t.Fatalf("taken %v, want %v", taken, want)
	}
	if taken, err := c.Promise(ctx, horizon, "a", link(4)); err != nil || taken[0] {
		t.Fatalf("a sender holding its share took another request: %v, %v", taken, err)
	}
	if taken, err := c.Promise(ctx, horizon, "b", link(4), link(5)); err != nil || !taken[0] || taken[1] {
		t.Fatalf("another sender: %v, %v; want the fourth taken, not a fifth", taken, err)
	}
	if taken, err := c.Promise(ctx, horizon, "", link(5)); err != nil || taken[0] {
		t.Fatalf("a full host took another request: %v, %v", taken, err)
	}
	// A newcomer takes one beyond the room (the reserve, a quarter of it:
	// one), a second newcomer none, nor the newcomer a second.
	if taken, err := c.Promise(ctx, horizon, "c", link(5), link(6)); err != nil || !taken[0] || taken[1] {
		t.Fatalf("a newcomer to a full host: %v, %v; want one taken", taken, err)
	}
	if taken, err := c.Promise(ctx, horizon, "d", link(6)); err != nil || taken[0] {
		t.Fatalf("a second newcomer, the reserve used: %v, %v", taken, err)
	}
	// Another host (the same server by another name) has no Crawl-delay
	// stored: the quarter-second floor, 40 requests in 20 s at half pace.
	other := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	var more []Request
	for i := range 45 {
		more = append(more, Request{Link: fmt.Sprintf("%s/%d", other, i)})
	}
	taken, err = c.Promise(ctx, horizon, "", append(more, Request{Link: "http://[::1"})...)
	if err == nil || !strings.Contains(err.Error(), "[::1") {
		t.Errorf("a malformed request: %v", err)
	}
	n := 0
	for _, ok := range taken {
		if ok {
			n++
		}
	}
	if n != 40 || taken[len(taken)-1] {
		t.Fatalf("%d of the other host's 45 taken (and the malformed one %v), want 40", n, taken[len(taken)-1])
	}
	if st := c.Stats(); st.Queued != 1+5+1+40 {
		t.Fatalf("%d queued, want 47", st.Queued)
	}

	// A host resting after a 429 with Retry-After: 60 (more than half the
	// horizon) takes nothing.
	var hits atomic.Int64
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		hits.Add(1)
		w.Header().Set("Retry-After", "60")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer busy.Close()
	c2 := newTestCrawler(t, &testSink{})
	if err := c2.Submit(ctx, Request{Link: busy.URL + "/x"}); err != nil {
		t.Fatal(err)
	}
	busyHost := strings.TrimPrefix(busy.URL, "http://")
	waitFor(t, "the busy host resting", func() bool {
		_, ready, err := c2.front.ahead(busyHost, 10)
		return hits.Load() == 1 && err == nil && ready.After(time.Now().Add(horizon))
	})
	if taken, err := c2.Promise(ctx, horizon, "a", Request{Link: busy.URL + "/y"}); err != nil || taken[0] {
		t.Fatalf("a resting host: %v, %v", taken, err)
	}

	// A crawler outside its windows for longer than half the horizon
	// takes nothing.
	closed := Window{Day: (time.Now().Weekday() + 3) % 7, Start: time.Hour, End: 2 * time.Hour}
	idle := newTestCrawler(t, &testSink{}, Windows(time.Local, closed))
	if taken, err := idle.Promise(ctx, horizon, "a", link(1)); err != nil || taken[0] {
		t.Fatalf("outside its windows: %v, %v", taken, err)
	}
	if st := idle.Stats(); st.Queued != 0 {
		t.Fatalf("outside its windows: %d queued", st.Queued)
	}
	if _, err := c.Promise(ctx, 0, "a", link(1)); err == nil {
		t.Error("a zero horizon taken")
	}
}

// TestFresh: a page fetched within the revisit minimum whose record went
// out is fresh; one never fetched, one that made no record (a 404) and
// one fetched longer ago than the revisit minimum are not.
func TestFresh(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/page":
			io.WriteString(w, "<title>a page</title><p>words to index</p>")
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	for _, c := range []struct {
		name     string
		revisit  time.Duration
		wantPage bool
	}{{"within the revisit minimum", time.Hour, true}, {"past it", time.Millisecond, false}} {
		sink := &testSink{}
		cr := newTestCrawler(t, sink, Revisit(c.revisit, 2*time.Hour))
		if err := cr.Submit(t.Context(), Request{Link: srv.URL + "/page"}, Request{Link: srv.URL + "/gone"}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "both fetched", func() bool { return cr.Stats().Fetched == 2 && len(sink.byURL("/page")) == 1 })
		waitIdle(t, cr)
		if c.revisit < time.Second {
			time.Sleep(10 * c.revisit) // past the minimum
		}
		if got := cr.Fresh(srv.URL + "/page"); got != c.wantPage {
			t.Errorf("%s: the page fresh %v, want %v", c.name, got, c.wantPage)
		}
		if cr.Fresh(srv.URL+"/gone") || cr.Fresh(srv.URL+"/never") || cr.Fresh("http://[::1") {
			t.Errorf("%s: a 404, a page never fetched or a malformed link fresh", c.name)
		}
	}
}

// TestRecordWanted: a page indexed and unchanged makes no record when it
// is requested again (the fetch is conditional), and one when the request
// says its requester lacks the record: fetched unconditionally, a record
// made of the unchanged page. A queued request takes the flag of a later
// one for the same page.
func TestRecordWanted(t *testing.T) {
	var conditional atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("If-None-Match") != "" {
			conditional.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", `"v1"`)
		io.WriteString(w, "<title>the same page</title><p>words to index</p>")
	}))
	defer srv.Close()
	sink := &testSink{}
	c := newTestCrawler(t, sink)
	page := srv.URL + "/p"
	fetch := func(r Request, want int, what string) {
		t.Helper()
		before := c.Stats().Fetched
		if err := c.Submit(t.Context(), r); err != nil {
			t.Fatal(err)
		}
		waitFor(t, what, func() bool { return c.Stats().Fetched == before+1 })
		waitIdle(t, c)
		if got := len(sink.byURL("/p")); got != want {
			t.Fatalf("%s: %d records, want %d", what, got, want)
		}
	}
	fetch(Request{Link: page}, 1, "the first fetch")
	fetch(Request{Link: page}, 1, "a request again")
	if conditional.Load() != 1 {
		t.Fatalf("%d conditional fetches, want the second", conditional.Load())
	}
	fetch(Request{Link: page, Record: true}, 2, "a request for the record")
	if conditional.Load() != 1 {
		t.Errorf("the request for the record was fetched conditionally")
	}
	if r := sink.byURL("/p"); r[1].Change != ChangeNew || r[1].Title != "the same page" {
		t.Errorf("the record made for the requester: %+v", r[1])
	}

	// The flag reaches an entry queued already (a crawler outside its
	// windows, so that nothing is fetched meanwhile).
	closed := Window{Day: (time.Now().Weekday() + 3) % 7, Start: time.Hour, End: 2 * time.Hour}
	c = newTestCrawler(t, &testSink{}, Windows(time.Local, closed))
	if err := c.Submit(t.Context(), Request{Link: page}); err != nil {
		t.Fatal(err)
	}
	if err := c.Submit(t.Context(), Request{Link: page, Record: true}); err != nil {
		t.Fatal(err)
	}
	st, _, err := c.front.state(mustURL(t, page).String())
	if err != nil || st.Queued == nil {
		t.Fatalf("state: %+v, %v", st, err)
	}
	var got entry
	if err := c.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(st.Queued)
		if err != nil {
			return err
		}
		v, err := it.ValueCopy(nil)
		if err != nil {
			return err
		}
		got, err = decodeEntry(v)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !got.Record {
		t.Errorf("the queued entry after a request for its record: %+v", got)
	}
}

// TestSenderLedger: a sender's requests count while their pages are
// queued and younger than the horizon; the ledger is bounded.
func TestSenderLedger(t *testing.T) {
	var l senderLedger
	t0 := time.Unix(1_000_000, 0)
	const horizon = time.Minute
	key := func(i int) [16]byte { return urlHash(fmt.Sprint("http://h/", i)) }
	for i := range 3 {
		l.add("h", "a", key(i), t0)
	}
	l.add("h", "a", key(0), t0.Add(time.Millisecond)) // sent again: counted once
	l.add("h", "b", key(9), t0)
	l.add("other", "a", key(5), t0)
	fetched := key(1)
	queued := func(k [16]byte) bool { return k != fetched }
	if n := l.count("h", "a", t0.Add(time.Second), horizon, queued); n != 2 {
		t.Errorf("a's requests queued: %d, want 2 (one fetched)", n)
	}
	if n := l.count("h", "b", t0.Add(time.Second), horizon, queued); n != 1 {
		t.Errorf("b's: %d, want 1", n)
	}
	if n := l.count("h", "a", t0.Add(horizon), horizon, queued); n != 0 || l.n != 1 {
		t.Errorf("a's after the horizon: %d, %d kept; want none, and other's one kept", n, l.n)
	}
	for i := range maxLedger + 10 {
		l.add(fmt.Sprint("host", i), "a", key(i), t0.Add(time.Duration(i)*time.Millisecond))
	}
	if l.n > maxLedger || len(l.hosts) > maxLedger {
		t.Errorf("%d requests kept of %d hosts, want at most %d", l.n, len(l.hosts), maxLedger)
	}
	if _, ok := l.hosts["other"]; ok {
		t.Error("the host with the oldest request kept")
	}
	if _, ok := l.hosts[fmt.Sprint("host", maxLedger+9)]; !ok || len(l.hosts) < maxLedger/4 {
		t.Errorf("the newest host forgotten, or too many: %d hosts kept", len(l.hosts))
	}
}
