package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/indexer/index"
	"github.com/micra-net/micra/node"
)

// testIndexAPI serves an index holding three pages.
func testIndexAPI(t *testing.T) *httptest.Server {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	x, err := index.New(db, index.Logger(quietLog()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	now := time.Now().Add(-time.Hour)
	var recs []crawl.Record
	for i, p := range []struct{ url, title, kw string }{
		{"http://harbour.example/", "Harbour home", "ferri"},
		{"http://harbour.example/boats", "Sailing boats", "boat"},
		{"http://lake.example/", "Lake ferries", "ferri"},
	} {
		recs = append(recs, crawl.Record{URL: p.url, FinalURL: p.url, Time: now.Add(time.Duration(i) * time.Second), Status: 200,
			Type: crawl.TypeHTML, Title: p.title, Change: crawl.ChangeNew, Keywords: []crawl.Keyword{{Term: p.kw, Weight: 65535}}})
	}
	// The lake's page publishes an event.
	iri := func(v string) crawl.Term { return crawl.Term{Kind: crawl.TermIRI, Value: v} }
	ev := crawl.Term{Kind: crawl.TermBlank, Value: "b0"}
	recs[2].Statements = []crawl.Statement{
		{S: ev, P: iri("http://www.w3.org/1999/02/22-rdf-syntax-ns#type"), O: iri(crawl.SchemaOrg + "Event")},
		{S: ev, P: iri(crawl.SchemaOrg + "name"), O: crawl.Term{Kind: crawl.TermLiteral, Value: "Ferry \"parade\"", Lang: "en"}},
	}
	if _, err := x.Put(t.Context(), index.Source{Node: "test", Seq: 1}, recs); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(index.Handler(x, index.HTTPOptions{}))
	t.Cleanup(srv.Close)
	return srv
}

func TestSearchCommand(t *testing.T) {
	srv := testIndexAPI(t)
	code, out, errs := runCmd(t, "search", "--api", srv.URL, "ferries")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{`2 results for "ferries"`, "Harbour home", "http://lake.example/", "score"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = runCmd(t, "search", "--api", srv.URL, "--json", "--limit", "1", "ferry")
	var res struct {
		Total int               `json:"total"`
		Hits  []json.RawMessage `json:"hits"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Total != 2 || len(res.Hits) != 1 {
		t.Fatalf("--json: exit %d %s", code, out)
	}
	if code, out, _ = runCmd(t, "search", "--api", srv.URL, "--any", "boats", "lake"); code != 0 || !strings.Contains(out, "2 results") {
		t.Fatalf("--any: exit %d %s", code, out)
	}
	// No page has both words: the pages with one, said so, each with the
	// words it has.
	if code, out, _ = runCmd(t, "search", "--api", srv.URL, "ferries", "zanzibar"); code != 0 || !strings.Contains(out, "no page has all of these words") || !strings.Contains(out, "has ferries") {
		t.Fatalf("partial: exit %d %s", code, out)
	}
	// A word no page has, split into two that pages have, said so.
	if code, out, _ = runCmd(t, "search", "--api", srv.URL, "sailingboats"); code != 0 || !strings.Contains(out, `no page has "sailingboats": searched as "sailing boats"`) || !strings.Contains(out, "1 results") {
		t.Fatalf("split: exit %d %s", code, out)
	}
	// Words the crawler drops are searched as written, in titles and
	// anchors (none here has "the").
	if code, out, _ = runCmd(t, "search", "--api", srv.URL, "the"); code != 0 || !strings.Contains(out, `0 results for "the"`) {
		t.Fatalf("a stop word: exit %d %s", code, out)
	}
	// Structured data: typed queries, alone and with words.
	for _, q := range [][]string{{"type:Event"}, {"type:schema:Event", "ferries"}, {"name=parade"}} {
		code, out, errs := runCmd(t, append([]string{"search", "--api", srv.URL}, q...)...)
		if code != 0 || !strings.Contains(out, "1 results") || !strings.Contains(out, "http://lake.example/") || !strings.Contains(out, "types: Event") {
			t.Errorf("%q: exit %d %s %s", q, code, out, errs)
		}
	}
	if code, out, _ = runCmd(t, "search", "--api", srv.URL, "ferries", "-type:Event"); code != 0 || !strings.Contains(out, "1 results") || strings.Contains(out, "lake") {
		t.Errorf("-type:Event: exit %d %s", code, out)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no query", []string{"search", "--api", srv.URL}, 2, "needs a QUERY"},
		{"bad api", []string{"search", "--api", "ftp://x", "q"}, 2, "not an http(s) URL"},
		{"no word", []string{"search", "--api", srv.URL, "!!"}, 1, "400 Bad Request"},
		{"unknown prefix", []string{"search", "--api", srv.URL, "type:foo:Bar"}, 1, `unknown prefix "foo"`},
		{"unreachable", []string{"search", "--api", "http://127.0.0.1:1", "q"}, 1, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := runCmd(t, tc.args...)
			if code != tc.code || !strings.Contains(errs, tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, errs, tc.code, tc.want)
			}
		})
	}
}

func TestIndexerProfilesAndExport(t *testing.T) {
	srv := testIndexAPI(t)
	api := []string{"--api", srv.URL}
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"list"}, "no profiles"},
		{[]string{"add", "--threshold", "0.1", "boating", "boats:3", "sailing"}, "profile boating: threshold 0.1, boats:3 sailing:1"},
		{[]string{"list"}, "boating\tthreshold 0.1"},
		{[]string{"show", "boating"}, "http://harbour.example/boats"},
		{[]string{"delete", "boating"}, "profile boating deleted"},
		{[]string{"list"}, "no profiles"},
	}
	for _, s := range steps {
		args := append(append([]string{"indexer", "profiles"}, api...), s.args...)
		code, out, errs := runCmd(t, args...)
		if code != 0 || !strings.Contains(out, s.want) {
			t.Fatalf("%v: exit %d, out %q, err %q; want %q", s.args, code, out, errs, s.want)
		}
	}
	if code, _, errs := runCmd(t, append(append([]string{"indexer", "profiles"}, api...), "show", "nobody")...); code != 1 || !strings.Contains(errs, "404") {
		t.Fatalf("unknown profile: exit %d %s", code, errs)
	}
	if code, _, errs := runCmd(t, append(append([]string{"indexer", "profiles"}, api...), "add", "x")...); code != 2 || !strings.Contains(errs, "needs NAME") {
		t.Fatalf("add without words: exit %d %s", code, errs)
	}

	code, out, errs := runCmd(t, "indexer", "export", "--api", srv.URL)
	if code != 0 {
		t.Fatalf("export: exit %d %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("export: %d lines:\n%s", len(lines), out)
	}
	for _, l := range lines {
		var r struct {
			URL string `json:"url"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.URL == "" {
			t.Fatalf("export line %q: %v", l, err)
		}
	}
	file := filepath.Join(t.TempDir(), "out.jsonl")
	if code, _, errs := runCmd(t, "indexer", "export", "--api", srv.URL, "--out", file); code != 0 {
		t.Fatalf("export --out: exit %d %s", code, errs)
	}
	if b, _ := os.ReadFile(file); strings.Count(string(b), "\n") != 3 {
		t.Fatalf("export file:\n%s", b)
	}
	code, out, errs = runCmd(t, "indexer", "export", "--api", srv.URL, "--format", "ntriples")
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, `<https://schema.org/name> "Ferry \"parade\""@en .`) {
		t.Fatalf("export --format ntriples: exit %d %s %s", code, out, errs)
	}
	if code, _, errs := runCmd(t, "indexer", "export", "--api", srv.URL, "--format", "turtle"); code != 2 || !strings.Contains(errs, "neither jsonl nor ntriples") {
		t.Fatalf("export --format turtle: exit %d %s", code, errs)
	}
}

func TestIndexerCrawlCommand(t *testing.T) {
	var got map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/crawl" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewDecoder(r.Body).Decode(&got)
		if len(got["urls"].([]any)) == 2 {
			io.WriteString(w, `{"sent": 1, "later": [], "failed": [{"url": "http://b.example/", "error": "no delegation"}]}`)
		} else {
			io.WriteString(w, `{"sent": 0, "later": [{"url": "http://c.example/", "error": "crawl request not taken now"}], "failed": []}`)
		}
	}))
	defer srv.Close()
	code, out, errs := runCmd(t, "indexer", "crawl", "--api", srv.URL, "--depth", "2", "--owner", "alice", "http://a.example/", "http://b.example/")
	if code != 1 || !strings.Contains(out, "1 URLs sent") || !strings.Contains(out, "failed: http://b.example/: no delegation") || !strings.Contains(errs, "1 of 2 URLs failed") {
		t.Fatalf("exit %d, out %q, err %q", code, out, errs)
	}
	if got["depth"] != float64(2) || len(got["urls"].([]any)) != 2 || got["owners"].([]any)[0] != "alice" {
		t.Fatalf("request body %v", got)
	}
	// A URL the indexer keeps and sends again is not a failure.
	if code, out, errs := runCmd(t, "indexer", "crawl", "--api", srv.URL, "http://c.example/"); code != 0 ||
		!strings.Contains(out, "later: http://c.example/: crawl request not taken now") || errs != "" {
		t.Errorf("a URL sent later: exit %d, out %q, err %q", code, out, errs)
	}
}

// micra indexer runs, serves its API, and stops cleanly when its context
// ends.
func TestIndexerServe(t *testing.T) {
	t.Setenv("MICRA_BOOTSTRAP", "")
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &syncBuffer{}
	var wg sync.WaitGroup
	var code int
	wg.Go(func() {
		code = run(ctx, []string{"indexer", "--data-dir", dir, "--listen", "/ip4/127.0.0.1/tcp/0", "--http", "127.0.0.1:0",
			"--shards", "4", "--take", "1,3", "--announce", "1s"}, out, out)
	})
	re := regexp.MustCompile(`search on (http://\S+)/`)
	var api string
	for range 300 {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			api = m[1]
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if api == "" {
		cancel()
		wg.Wait()
		t.Fatalf("the indexer did not start:\n%s", out.String())
	}
	resp, err := http.Get(api + "/api/indexer")
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/api/indexer: %d %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	if c, o, e := runCmd(t, "search", "--api", api, "anything"); c != 0 || !strings.Contains(o, "0 results") {
		t.Fatalf("search: exit %d %s %s", c, o, e)
	}
	if !strings.Contains(out.String(), "listening on /ip4/127.0.0.1/tcp/") {
		t.Fatalf("no listen address printed:\n%s", out.String())
	}
	// The status API, the status page and the metrics count the search.
	var ist node.IndexerStatus
	resp, err = http.Get(api + "/api/status")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.NewDecoder(resp.Body).Decode(&ist); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/api/status: %d %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	if ist.Store != "embedded" || ist.Queries.Count != 1 || ist.Peer == "" || len(ist.Addrs) == 0 {
		t.Errorf("/api/status: %+v", ist)
	}
	for path, want := range map[string][]string{
		"/status":  {`<div class="n" id="queries">1</div>`, `<div class="n" id="pages">0</div>`, ist.Peer},
		"/metrics": {"micra_indexer_query_seconds_count 1", "micra_indexer_pages 0", "micra_indexer_batches_acknowledged_total 0", "go_goroutines"},
	} {
		resp, err := http.Get(api + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		for _, w := range want {
			if resp.StatusCode != 200 || !strings.Contains(string(body), w) {
				t.Errorf("%s: %d, lacks %q", path, resp.StatusCode, w)
			}
		}
	}
	cancel()
	wg.Wait()
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "identity.key")); err != nil {
		t.Fatal("no identity key written")
	}
	for _, tc := range [][]string{
		{"indexer", "--take", "7", "--shards", "4"},
		{"indexer", "--data-dir", dir, "--audit-share", "1.5"},
		{"indexer", "--data-dir", dir, "--crawl-patience", "10ms"},
		{"indexer", "--data-dir", dir, "--shards", "0"},
		{"indexer", "--listen", "not-a-multiaddr"},
		{"indexer", "extra"},
	} {
		if c, _, e := runCmd(t, tc...); c != 2 {
			t.Errorf("%v: exit %d, want 2: %s", tc, c, e)
		}
	}
}

func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestIndexerLivenessFlag(t *testing.T) {
	code, _, errs := runCmd(t, "indexer", "--liveness", "1s")
	if code != 2 || !strings.Contains(errs, "--liveness") {
		t.Errorf("--liveness 1s: exit %d, %s", code, errs)
	}
}

// TestSearchHintsWhenNoIndexer: with no indexer at the address, micra
// search says so and how to name another, as micra status does for nodes.
func TestSearchHintsWhenNoIndexer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	code, _, errs := runCmd(t, "search", "--api", "http://"+addr, "hello")
	if code != 1 || !strings.Contains(errs, "no indexer answers at http://"+addr+" (is \"micra indexer\" running") {
		t.Errorf("exit %d: %s", code, errs)
	}
}
