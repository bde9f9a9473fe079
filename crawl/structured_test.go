package crawl

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestCrawlStructured: a page's JSON-LD becomes its record's statements,
// the IRIs they name are crawled like anchors, a change of its structured
// data alone is ChangeModified, and StructuredData(false) turns it all off.
func TestCrawlStructured(t *testing.T) {
	var price atomic.Int32
	price.Store(30)
	var aboutHits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/robots.txt":
			http.NotFound(w, r)
		case "/":
			fmt.Fprintf(w, `<html><head><title>Kettle</title><script type="application/ld+json">
{"@context": "http://schema.org", "@type": "Product", "name": "Kettle", "sameAs": "/about",
 "offers": {"@type": "Offer", "price": %d, "priceCurrency": "EUR"}}</script></head>
<body><h1>Kettle</h1><p>A kettle that boils water.</p></body></html>`, price.Load())
		case "/about":
			aboutHits.Add(1)
			io.WriteString(w, "<title>About</title><p>Makers of kettles.</p>")
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	tests := []struct {
		name  string
		on    bool
		stmts int
		about int32
	}{
		{"on", true, 7, 1},
		{"off", false, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			aboutHits.Store(0)
			price.Store(30)
			sink := &testSink{}
			c := newTestCrawler(t, sink, StructuredData(tt.on))
			crawl := func() {
				t.Helper()
				if err := c.Submit(t.Context(), Request{Link: srv.URL + "/", Depth: 1}); err != nil {
					t.Fatal(err)
				}
				waitIdle(t, c)
			}
			crawl()
			waitFor(t, "the home page's record", func() bool { return len(sink.byURL("/")) == 1 })
			home := sink.byURL("/")[0]
			if len(home.Statements) != tt.stmts {
				t.Fatalf("%d statements, want %d: %v", len(home.Statements), tt.stmts, home.Statements)
			}
			if got := aboutHits.Load(); got != tt.about {
				t.Fatalf("/about fetched %d times, want %d", got, tt.about)
			}
			if st := c.Stats(); st.Statements != int64(tt.stmts) {
				t.Fatalf("Stats.Statements %d, want %d", st.Statements, tt.stmts)
			}
			// The price changes; the page's words do not.
			price.Store(25)
			crawl()
			if tt.on {
				waitFor(t, "a modified record", func() bool { return len(sink.byURL("/")) == 2 })
				if r := sink.byURL("/")[1]; r.Change != ChangeModified {
					t.Fatalf("change %v, want modified", r.Change)
				}
			} else {
				time.Sleep(200 * time.Millisecond) // let a wrong record reach the sink
				if n := len(sink.byURL("/")); n != 1 {
					t.Fatalf("%d records without the transform, want 1", n)
				}
			}
		})
	}
}
