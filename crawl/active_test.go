package crawl

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
)

// TestCrawlingNow: a host whose page is being fetched is listed in
// Stats.Crawling until its page is done; today's bytes count what was
// downloaded, beside the daily cap.
func TestCrawlingNow(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		io.WriteString(w, `<title>page</title><p>some words</p>`)
	}))
	defer srv.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	sink := &testSink{}
	c := newTestCrawler(t, sink, Bandwidth(0, 1<<30))
	host := must(url.Parse(srv.URL)).Host
	if err := c.Submit(t.Context(), Request{Link: srv.URL + "/slow"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the host listed as crawled now", func() bool { return slices.Contains(c.Stats().Crawling, host) })
	close(release)
	waitFor(t, "the page recorded", func() bool { return len(sink.snapshot()) == 1 })
	waitFor(t, "the host no longer listed", func() bool { return len(c.Stats().Crawling) == 0 })
	st := c.Stats()
	if st.TodayBytes <= 0 || st.DailyCap != 1<<30 || st.InFlight != 0 {
		t.Errorf("today %d bytes of %d, %d in flight", st.TodayBytes, st.DailyCap, st.InFlight)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
