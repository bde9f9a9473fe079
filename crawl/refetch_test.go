package crawl

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRefetch: Refetch computes the record's fingerprint for the page the
// crawler recorded (the audit's premise), obeys robots.txt and the
// per-server delay, and reports the status of a missing page.
func TestRefetch(t *testing.T) {
	var inFlight, maxInFlight atomic.Int32
	var mu sync.Mutex
	var times []time.Time
	page := `<html><head><title>Harbour home</title></head><body><h1>Ferries</h1>
<p>Ferries leave the harbour at dawn for the islands; timetables change with the seasons.</p>
<a href="/a">Ferry timetable</a></body></html>`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := maxInFlight.Load()
			if n <= m || maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		switch r.URL.Path {
		case "/robots.txt":
			io.WriteString(w, "User-agent: *\nDisallow: /private\n")
		case "/":
			io.WriteString(w, page)
		case "/a":
			io.WriteString(w, `<html><title>Timetable</title><body>Ferries leave at dawn.</body></html>`)
		case "/quiet":
			io.WriteString(w, `<html><head><meta name="robots" content="noindex"><title>Quiet</title></head><body>Nothing to index here.</body></html>`)
		case "/private/x":
			t.Errorf("robots.txt ignored: %s fetched", r.URL.Path)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	sink := &testSink{}
	const delay = 30 * time.Millisecond
	c := newTestCrawler(t, sink, Politeness(delay, time.Second))
	if err := c.Submit(t.Context(), Request{Link: srv.URL + "/", Depth: 0}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the home page's record", func() bool { return len(sink.byURL("/")) == 1 })
	rec := sink.byURL("/")[0]

	// Four audits of the page at once: each agrees with the record, and
	// the server never sees two requests at a time.
	var wg sync.WaitGroup
	obs := make([]Observation, 4)
	errs := make([]error, 4)
	for i := range obs {
		wg.Go(func() { obs[i], errs[i] = c.Refetch(t.Context(), srv.URL+"/") })
	}
	wg.Wait()
	for i, o := range obs {
		if errs[i] != nil {
			t.Fatalf("refetch %d: %v", i, errs[i])
		}
		if o.Status != 200 || o.Type != TypeHTML || o.Fingerprint != rec.Fingerprint || o.FinalURL != rec.FinalURL {
			t.Errorf("refetch %d: %+v; the record: fingerprint %016x, final URL %s", i, o, rec.Fingerprint, rec.FinalURL)
		}
	}
	if m := maxInFlight.Load(); m > 1 {
		t.Errorf("the server saw %d requests at once", m)
	}
	mu.Lock()
	for i := 1; i < len(times); i++ {
		// The delay counts from the end of the previous request, which
		// took 5 ms: start to start is at least the delay.
		if gap := times[i].Sub(times[i-1]); gap < delay {
			t.Errorf("requests %d and %d only %v apart (delay %v)", i-1, i, gap, delay)
		}
	}
	mu.Unlock()

	if _, err := c.Refetch(t.Context(), srv.URL+"/private/x"); !errors.Is(err, ErrRobotsDisallowed) {
		t.Errorf("refetch of a disallowed page: %v", err)
	}
	if o, err := c.Refetch(t.Context(), srv.URL+"/gone"); err != nil || o.Status != 404 || o.Fingerprint != 0 {
		t.Errorf("refetch of a missing page: %+v, %v", o, err)
	}
	if o, err := c.Refetch(t.Context(), srv.URL+"/quiet"); err != nil || o.Status != 200 || !o.NoIndex || obs[0].NoIndex {
		t.Errorf("refetch of a noindex page: %+v, %v (the home page's: %v)", o, err, obs[0].NoIndex)
	}
	if _, err := c.Refetch(t.Context(), "ftp://example.test/"); !errors.Is(err, ErrBadRequest) {
		t.Errorf("refetch of an ftp URL: %v", err)
	}
	if d := FingerprintDistance(obs[0].Fingerprint, obs[0].Fingerprint^0b1011); d != 3 {
		t.Errorf("distance of 3 flipped bits = %d", d)
	}
	if st := c.Stats(); st.Fetched != 1 {
		t.Errorf("refetches counted as crawl fetches: %+v", st)
	}
}
