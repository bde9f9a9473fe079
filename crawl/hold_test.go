package crawl

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestHold: while the hold check fails, the dispatcher keeps asking it and
// fetches nothing, Promise takes nothing and Stats says why; the queued
// requests stay, and are all crawled once the check passes.
func TestHold(t *testing.T) {
	defer func(p time.Duration) { holdPoll = p }(holdPoll)
	holdPoll = 10 * time.Millisecond
	var fetches atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/robots.txt" {
			fetches.Add(1)
		}
		io.WriteString(w, `<title>page</title><p>words</p>`)
	}))
	defer srv.Close()
	var full atomic.Bool
	full.Store(true)
	var asked atomic.Int64
	capErr := errors.New("disk cap reached")
	check := func() error {
		asked.Add(1)
		if full.Load() {
			return capErr
		}
		return nil
	}
	sink := &testSink{}
	c := newTestCrawler(t, sink, Hold(check))
	reqs := []Request{{Link: srv.URL + "/1"}, {Link: srv.URL + "/2"}, {Link: srv.URL + "/3"}}
	if err := c.Submit(t.Context(), reqs...); err != nil {
		t.Fatal(err)
	}
	// The dispatcher asked the check again and again, with work queued,
	// and fetched nothing.
	start := asked.Load()
	waitFor(t, "the dispatcher held by the check", func() bool { return asked.Load() >= start+5 })
	if n := fetches.Load(); n != 0 {
		t.Fatalf("%d pages fetched while held", n)
	}
	st := c.Stats()
	if st.Queued != 3 || st.Held != capErr.Error() {
		t.Fatalf("held: %d queued, held %q", st.Queued, st.Held)
	}
	taken, err := c.Promise(t.Context(), time.Hour, "a", Request{Link: srv.URL + "/4"})
	if err != nil || taken[0] {
		t.Fatalf("Promise while held: %v, %v", taken, err)
	}

	full.Store(false)
	waitFor(t, "the queued pages crawled", func() bool { return len(sink.snapshot()) == 3 })
	if st := c.Stats(); st.Held != "" || st.Queued != 0 {
		t.Fatalf("resumed: held %q, %d queued", st.Held, st.Queued)
	}
	for _, r := range sink.snapshot() {
		if !strings.HasPrefix(r.URL, srv.URL) {
			t.Errorf("record of %s", r.URL)
		}
	}
}
