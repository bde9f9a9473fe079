package index

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/micra-net/micra/crawl"
)

func httpFixture(t *testing.T, o HTTPOptions) (*Index, *httptest.Server) {
	t.Helper()
	x := searchCorpus(t)
	hostile := page(`http://evil.example/"><script>alert(1)</script>`, `<script>alert("t")</script> & <b>bold</b> cyprus`, t0, "cyprus", 100)
	hostile.FinalURL = `http://evil.example/'onmouseover='alert(1)`
	res := mustPut(t, x, hostile, gone("http://gone.example/", t0))
	if res.Added != 1 || res.Removed != 1 {
		t.Fatalf("fixture: %+v", res)
	}
	srv := httptest.NewServer(Handler(x, o))
	t.Cleanup(srv.Close)
	return x, srv
}

func do(t *testing.T, method, u, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestHTTPAPI(t *testing.T) {
	_, srv := httpFixture(t, HTTPOptions{})
	big := `{"keywords":[{"word":"` + strings.Repeat("x", 70000) + `","weight":1}]}`
	tests := []struct {
		name, method, path, body string
		status                   int
		contains                 []string
	}{
		{"search", "GET", "/api/search?q=cyprus&limit=2", "", 200, []string{`"total":4`, `"limit":2`, `"mode":"all"`, `"url":"http://a.example/1"`, `"keywords":[{"term":"cyprus","weight":65535}`}},
		{"search any", "GET", "/api/search?q=lava+lamp&mode=any", "", 200, []string{`"total":2`, `"mode":"any"`}},
		{"search exclude", "GET", "/api/search?q=cyprus+-volcano", "", 200, []string{`"excluded":["volcano"]`}},
		{"search offset past end", "GET", "/api/search?q=cyprus&offset=50", "", 200, []string{`"hits":[]`}},
		{"no q", "GET", "/api/search", "", 400, []string{`"error":"bad query: empty"`}},
		{"no word", "GET", "/api/search?q=%21%21+%3F%3F", "", 400, []string{"no searchable word"}},
		{"long q", "GET", "/api/search?q=" + strings.Repeat("a", 1100), "", 400, []string{"longer than 1024 bytes"}},
		{"limit not int", "GET", "/api/search?q=cyprus&limit=ten", "", 400, []string{`limit: \"ten\" is not an integer`}},
		{"limit zero", "GET", "/api/search?q=cyprus&limit=0", "", 400, []string{"limit: must be positive"}},
		{"limit big", "GET", "/api/search?q=cyprus&limit=101", "", 400, []string{"limit 101 not in 1..100"}},
		{"offset negative", "GET", "/api/search?q=cyprus&offset=-1", "", 400, []string{"offset -1"}},
		{"deep offset", "GET", "/api/search?q=cyprus&offset=995", "", 400, []string{"only the first 1000"}},
		{"mode", "GET", "/api/search?q=cyprus&mode=some", "", 400, []string{`mode: \"some\"`}},
		{"record", "GET", "/api/record?url=" + url.QueryEscape("http://a.example/1"), "", 200, []string{`"title":"Cyprus volcanoes"`, `"provenance":{"node":"12D3KooWTestNode","seq":7`}},
		{"record missing param", "GET", "/api/record", "", 400, []string{"url: missing"}},
		{"record unknown", "GET", "/api/record?url=http://x.example/", "", 404, []string{"not found"}},
		{"record gone", "GET", "/api/record?url=http://gone.example/", "", 410, []string{"page gone", `"url":"http://gone.example/"`}},
		{"stats", "GET", "/api/stats", "", 200, []string{`"docs":5`, `"tombstones":1`, `"profiles":0`}},
		{"method", "POST", "/api/search?q=x", "", 405, nil},
		{"unknown path", "GET", "/api/nothing", "", 404, nil},
		{"profile put", "PUT", "/api/profiles/alice", `{"keywords":[{"word":"Cyprus","weight":2},{"word":"volcanoes","weight":1}],"threshold":0.1}`, 200,
			[]string{`"name":"alice"`, `"terms":[{"term":"cyprus","weight":2},{"term":"volcano","weight":1}]`, `"matches":2`, `"pending":false`}},
		{"profile get", "GET", "/api/profiles/alice", "", 200, []string{`"threshold":0.1`}},
		{"profile list", "GET", "/api/profiles", "", 200, []string{`"profiles":[{"name":"alice"`}},
		{"profile matches", "GET", "/api/profiles/alice/matches?limit=1", "", 200, []string{`"total":2`, `"url":"http://a.example/1"`, `"relevance":0.97`, `"terms":["cyprus","volcano"]`}},
		{"profile matches bad limit", "GET", "/api/profiles/alice/matches?limit=x", "", 400, []string{"not an integer"}},
		{"profile bad json", "PUT", "/api/profiles/bob", `{"keywords":`, 400, []string{"profile:"}},
		{"profile unknown field", "PUT", "/api/profiles/bob", `{"keywords":[{"word":"x1","weight":1}],"colour":"red"}`, 400, []string{"unknown field"}},
		{"profile trailing data", "PUT", "/api/profiles/bob", `{"keywords":[{"word":"xx","weight":1}]} {}`, 400, []string{"data after"}},
		{"profile name mismatch", "PUT", "/api/profiles/bob", `{"name":"eve","keywords":[{"word":"xx","weight":1}]}`, 400, []string{"differs"}},
		{"profile bad name", "PUT", "/api/profiles/-bob", `{"keywords":[{"word":"xx","weight":1}]}`, 400, []string{"bad profile: name"}},
		{"profile stop word", "PUT", "/api/profiles/bob", `{"keywords":[{"word":"the","weight":1}]}`, 400, []string{"no searchable term"}},
		{"profile too large", "PUT", "/api/profiles/bob", big, 413, []string{"larger than"}},
		{"profile unknown", "GET", "/api/profiles/nobody", "", 404, nil},
		{"matches unknown", "GET", "/api/profiles/nobody/matches", "", 404, nil},
		{"profile delete", "DELETE", "/api/profiles/alice", "", 204, nil},
		{"profile delete again", "DELETE", "/api/profiles/alice", "", 404, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := do(t, tt.method, srv.URL+tt.path, tt.body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			if tt.status != 204 && tt.status != 405 && !(tt.status == 404 && strings.HasPrefix(tt.path, "/api/nothing")) {
				if ct := resp.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
					t.Fatalf("content type %q", ct)
				}
				if !json.Valid([]byte(body)) {
					t.Fatalf("invalid JSON: %s", body)
				}
			}
			for _, c := range tt.contains {
				if !strings.Contains(body, c) {
					t.Fatalf("body lacks %s:\n%s", c, body)
				}
			}
		})
	}
}

func TestHTTPReadOnly(t *testing.T) {
	_, srv := httpFixture(t, HTTPOptions{ReadOnly: true})
	for _, m := range []string{"PUT", "DELETE"} {
		if resp, _ := do(t, m, srv.URL+"/api/profiles/alice", `{"keywords":[{"word":"xx","weight":1}]}`); resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s: %d", m, resp.StatusCode)
		}
	}
	if resp, _ := do(t, "GET", srv.URL+"/api/profiles", ""); resp.StatusCode != 200 {
		t.Errorf("GET: %d", resp.StatusCode)
	}
}

func TestHTTPExport(t *testing.T) {
	x, srv := httpFixture(t, HTTPOptions{})
	resp, body := do(t, "GET", srv.URL+"/api/export", "")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson; charset=utf-8" {
		t.Fatalf("%d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	fields := []string{"canonical", "change", "final_url", "fingerprint", "keywords", "lang", "links", "owners",
		"provenance", "size", "statements", "status", "time", "timing", "title", "truncated", "type", "url"}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	n := 0
	seen := map[string]bool{}
	for sc.Scan() {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		var keys []string
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, fields) {
			t.Fatalf("fields %v, want %v", keys, fields)
		}
		var r JSONRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		seen[r.URL] = true
		if r.Provenance.Node != src.Node || r.Change != "new" || r.Type != "html" || len(r.Fingerprint) != 16 || r.Links == nil || r.Owners == nil || r.Statements == nil {
			t.Fatalf("record %+v", r)
		}
		n++
	}
	if n != int(x.Stats().Docs) || seen["http://gone.example/"] {
		t.Fatalf("%d lines for %d docs; gone exported: %v", n, x.Stats().Docs, seen["http://gone.example/"])
	}
}

func TestExportHonoursContext(t *testing.T) {
	x := newTestIndex(t, nil)
	recs := corpus(50, 1)
	for i := range recs {
		for j := range 100 {
			recs[i].Links = append(recs[i].Links, crawl.Link{URL: "http://links.example/a/long/path/to/page/" + itoa(j), Anchor: "anchor text"})
		}
	}
	mustPut(t, x, recs...)
	ctx, cancel := contextWithCancel(t)
	w := &cancelAfter{n: 1, cancel: cancel}
	n, err := x.Export(ctx, w)
	if err == nil || n >= 50 {
		t.Fatalf("export of %d records, err %v", n, err)
	}
}

// cancelAfter cancels its context after n writes.
type cancelAfter struct {
	n      int
	cancel func()
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	c.n--
	if c.n <= 0 {
		c.cancel()
	}
	return len(p), nil
}

func TestHTMLPage(t *testing.T) {
	x, srv := httpFixture(t, HTTPOptions{})
	t.Run("empty", func(t *testing.T) {
		resp, body := do(t, "GET", srv.URL+"/", "")
		if resp.StatusCode != 200 || !strings.Contains(body, `<form method="get"`) || strings.Contains(body, "result") {
			t.Fatalf("%d\n%s", resp.StatusCode, body)
		}
		for h, want := range map[string]string{
			"Content-Type":            "text/html; charset=utf-8",
			"X-Content-Type-Options":  "nosniff",
			"Content-Security-Policy": "default-src 'none'",
		} {
			if !strings.HasPrefix(resp.Header.Get(h), want) {
				t.Errorf("%s: %q", h, resp.Header.Get(h))
			}
		}
		if strings.Contains(body, "<script") {
			t.Error("page has a script")
		}
	})
	t.Run("hostile record", func(t *testing.T) {
		resp, body := do(t, "GET", srv.URL+"/?q=cyprus", "")
		if resp.StatusCode != 200 {
			t.Fatalf("%d", resp.StatusCode)
		}
		for _, bad := range []string{"<script", `"><s`, "<b>bold", `'onmouseover='`, "onmouseover='alert"} {
			if strings.Contains(body, bad) {
				t.Errorf("unescaped %q in page", bad)
			}
		}
		for _, good := range []string{"&lt;script&gt;alert(&#34;t&#34;)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt; <b>cyprus</b>", "4 results", "<b>Cyprus</b> volcanoes"} {
			if !strings.Contains(body, good) {
				t.Errorf("page lacks %q", good)
			}
		}
	})
	t.Run("words, not stems", func(t *testing.T) {
		resp, body := do(t, "GET", srv.URL+"/?q=Volcanoes+Lava+-Greece&any=1", "")
		if resp.StatusCode != 200 {
			t.Fatalf("%d", resp.StatusCode)
		}
		for _, good := range []string{"for <b>volcanoes lava</b>", "without <b>greece</b>", "has <b>volcanoes</b>, <b>lava</b>"} {
			if !strings.Contains(body, good) {
				t.Errorf("page lacks %q", good)
			}
		}
		_, js := do(t, "GET", srv.URL+"/api/search?q=Volcanoes", "")
		for _, good := range []string{`"terms":["volcano"]`, `"words":["volcanoes"]`, `"matched":["volcanoes"]`, `"partial":false`} {
			if !strings.Contains(js, good) {
				t.Errorf("API answer lacks %s: %s", good, js)
			}
		}
		// A word no page has, split into two that pages have, said so.
		_, js = do(t, "GET", srv.URL+"/api/search?q=CyprusVolcanoes", "")
		for _, good := range []string{`"split":[{"word":"cyprusvolcanoes","as":["cyprus","volcanoes"]}]`, `"words":["cyprus","volcanoes"]`, `"total":1`} {
			if !strings.Contains(js, good) {
				t.Errorf("API answer lacks %s: %s", good, js)
			}
		}
		_, body = do(t, "GET", srv.URL+"/?q=CyprusVolcanoes", "")
		if !strings.Contains(body, "No page has <b>cyprusvolcanoes</b>: searched as <b>cyprus volcanoes</b>.") {
			t.Errorf("page does not say how it searched:\n%s", body)
		}
		// No page has both words: the pages with one, said so.
		_, js = do(t, "GET", srv.URL+"/api/search?q=Volcanoes+Zanzibar", "")
		for _, good := range []string{`"partial":true`, `"matched":["volcanoes"]`} {
			if !strings.Contains(js, good) {
				t.Errorf("API answer lacks %s: %s", good, js)
			}
		}
	})
	t.Run("hostile query", func(t *testing.T) {
		q := `"><script>alert(1)</script> the`
		resp, body := do(t, "GET", srv.URL+"/?q="+url.QueryEscape(q), "")
		if resp.StatusCode != 200 || strings.Contains(body, "<script") || !strings.Contains(body, `value="&#34;&gt;&lt;script&gt;`) {
			t.Fatalf("%d\n%s", resp.StatusCode, body)
		}
	})
	t.Run("bad query", func(t *testing.T) {
		resp, body := do(t, "GET", srv.URL+"/?q=%21%21+%3F%3F", "")
		if resp.StatusCode != 400 || !strings.Contains(body, `class="error"`) || !strings.Contains(body, "no searchable word") {
			t.Fatalf("%d\n%s", resp.StatusCode, body)
		}
		resp, _ = do(t, "GET", srv.URL+"/?q=cyprus&offset=x", "")
		if resp.StatusCode != 400 {
			t.Fatalf("bad offset: %d", resp.StatusCode)
		}
	})
	t.Run("paging", func(t *testing.T) {
		var recs []crawl.Record
		for i := range 25 {
			recs = append(recs, page("http://p.example/"+itoa(i), "", t0.Add(time.Duration(i)), "page", 1000+i))
		}
		mustPut(t, x, recs...)
		_, body := do(t, "GET", srv.URL+"/?q=paging", "")
		if !strings.Contains(body, `href="?offset=10&amp;q=paging"`) || strings.Contains(body, "Previous") {
			t.Fatalf("first page links:\n%s", body)
		}
		_, body = do(t, "GET", srv.URL+"/?q=paging&offset=20", "")
		if !strings.Contains(body, `href="?offset=10&amp;q=paging"`) || strings.Contains(body, "Next") {
			t.Fatalf("last page links:\n%s", body)
		}
		_, body = do(t, "GET", srv.URL+"/?q=paging+nothing", "")
		if !strings.Contains(body, "No page has all of these words") || !strings.Contains(body, "p.example") {
			t.Fatalf("no partial matches:\n%s", body)
		}
		_, body = do(t, "GET", srv.URL+"/?q=nowhere+nothing", "")
		if !strings.Contains(body, `href="?any=1&amp;q=nowhere&#43;nothing"`) && !strings.Contains(body, `href="?any=1&amp;q=nowhere+nothing"`) {
			t.Fatalf("no any-word link:\n%s", body)
		}
	})
}
