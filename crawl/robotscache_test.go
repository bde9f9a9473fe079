package crawl

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestRobotsCachePersists checks that robots.txt is fetched once, that a new
// cache over the same database (a restart) applies the stored rules without
// fetching again, and that Sitemap lines are reported as fresh only when
// robots.txt was just fetched.
func TestRobotsCachePersists(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "User-agent: *\nDisallow: /private\nSitemap: http://e.org/s.xml\n")
	}))
	defer srv.Close()
	db := openMemDB(t)
	f := newTestFetcher(t, AllowPrivateNetworks())
	u := mustURL(t, srv.URL+"/page")
	for i, want := range []bool{true, false} {
		rc := newRobotsCache(db, f, "micra", time.Hour, 0, quietLogger())
		rules, fresh, _, err := rc.rules(t.Context(), u)
		if err != nil {
			t.Fatal(err)
		}
		if fresh != want || rules.Allowed("/private/x") || !rules.Allowed("/page") || len(rules.Sitemaps) != 1 {
			t.Fatalf("cache %d: fresh=%v private allowed=%v sitemaps=%v", i, fresh, rules.Allowed("/private/x"), rules.Sitemaps)
		}
		if _, fresh, _, _ := rc.rules(t.Context(), u); fresh {
			t.Fatalf("cache %d: second lookup fetched again", i)
		}
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("robots.txt fetched %d times", n)
	}
}
