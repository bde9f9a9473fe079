package searcheval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/micra-net/micra/internal/pgserver"
)

// Config says what to evaluate.
type Config struct {
	// Corpus is the directory of the site's HTML, served as the site's root.
	Corpus string
	// Judgments are the queries and their relevant pages; nil: read from
	// the site's own index pages (Judgments), which are then kept out of
	// the crawl.
	Judgments []Judgment
	// MaxQueries, when positive, evaluates an evenly spaced sample of that
	// many judgments (the short form).
	MaxQueries int
	// Keywords is the crawler's keyword cap per record (crawl.MaxKeywords);
	// 0: its default.
	Keywords int
	// Reference runs PostgreSQL's full-text search beside micra.
	Reference bool
	// Addr is the loopback address to serve the site on; "": 127.0.0.1:0.
	Addr string
	// Log receives progress lines; nil: none.
	Log io.Writer
	// Misses receives, as JSON Lines, each query an engine ranked no
	// relevant page of in its first 10 ({"engine", "query", "relevant",
	// "hits": the first three}); nil: none.
	Misses io.Writer
}

// Row is one engine's figures.
type Row struct {
	Engine     string  `json:"engine"`
	Success1   float64 `json:"success_at_1"`
	Success10  float64 `json:"success_at_10"`
	MRR10      float64 `json:"mrr_at_10"`
	NoResult   float64 `json:"no_result"` // share of queries with no hit
	P50        float64 `json:"latency_p50_ms"`
	P99        float64 `json:"latency_p99_ms"`
	IndexBytes int64   `json:"index_bytes"`
}

// Report is one corpus's evaluation.
type Report struct {
	Corpus      string  `json:"corpus"`
	Pages       int     `json:"pages"`     // pages crawled and indexed
	Judgments   int     `json:"judgments"` // judgments evaluated
	Unreachable int     `json:"unreachable"`
	CrawlSec    float64 `json:"crawl_seconds"`
	Decoded     int64   `json:"decoded_bytes"` // the pages' decoded bytes
	BatchBytes  int64   `json:"batch_bytes"`   // records in compressed batches
	RawBytes    int64   `json:"raw_record_bytes"`
	Rows        []Row   `json:"rows"`
	// Stores compares micra's two stores on the crawl's records (with
	// the reference, which brings a PostgreSQL server).
	Stores *StoreFigures `json:"stores,omitempty"`
}

// ResultRatio is the result ratio: batch bytes over the pages' decoded
// bytes.
func (r *Report) ResultRatio() float64 {
	if r.Decoded == 0 {
		return 0
	}
	return float64(r.BatchBytes) / float64(r.Decoded)
}

// Row returns the row of the named engine, or nil.
func (r *Report) Row(engine string) *Row {
	for i := range r.Rows {
		if r.Rows[i].Engine == engine {
			return &r.Rows[i]
		}
	}
	return nil
}

// Engine names in a Report.
const (
	EngineMicra    = "micra"
	EngineMicraAny = "micra, any word"
	EnginePostgres = "PostgreSQL full text"
	EngineMicraPG  = "micra, PostgreSQL store"
)

// ErrNoReference is returned, wrapped, when Config.Reference is set and no
// PostgreSQL server can be started (see pgserver.ErrUnavailable).
var ErrNoReference = pgserver.ErrUnavailable

// Run evaluates one corpus.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	logf := func(format string, a ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, format+"\n", a...)
		}
	}
	if st, err := os.Stat(cfg.Corpus); err != nil {
		return nil, fmt.Errorf("corpus: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("corpus %s: not a directory", cfg.Corpus)
	}
	js := cfg.Judgments
	var hidden []string
	if js == nil {
		var err error
		if js, hidden, err = Judgments(cfg.Corpus); err != nil {
			return nil, err
		}
		if len(js) == 0 {
			return nil, fmt.Errorf("corpus %s: no index page with judgments found (Sphinx genindex, Texinfo or DocBook index); give --queries", cfg.Corpus)
		}
	}
	addr := cfg.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	s, err := serveSite(cfg.Corpus, addr, hidden)
	if err != nil {
		return nil, err
	}
	defer s.close()
	logf("%s: %d judgments from %d index pages; crawling %s", cfg.Corpus, len(js), len(hidden), s.base)
	c, err := crawlSite(ctx, s.base, cfg)
	if err != nil {
		return nil, err
	}
	defer c.close()
	rep := &Report{Corpus: cfg.Corpus, CrawlSec: c.crawlTime.Seconds(), Decoded: c.decoded, BatchBytes: c.batchBytes, RawBytes: c.rawBytes}
	crawledKeys := map[string]string{} // page key → URL
	for _, u := range c.pages {
		crawledKeys[pageKey(u)] = u
	}
	rep.Pages = len(crawledKeys)
	logf("crawled %d pages in %.1fs (%d records, %d fetch errors); result ratio 1/%.1f", rep.Pages, rep.CrawlSec, c.records, c.fetchErrors, 1/max(rep.ResultRatio(), 1e-9))

	// The judgments with a relevant page that was crawled: no engine can
	// find a page nobody crawled.
	var qs []query
	for _, j := range js {
		q := query{text: j.Query, relevant: map[string]bool{}}
		for _, p := range j.Relevant {
			if k := pageKey(s.base + "/" + p); crawledKeys[k] != "" {
				q.relevant[k] = true
			}
		}
		if len(q.relevant) == 0 {
			rep.Unreachable++
			continue
		}
		qs = append(qs, q)
	}
	qs = sample(qs, cfg.MaxQueries)
	rep.Judgments = len(qs)
	if len(qs) == 0 {
		return nil, fmt.Errorf("corpus %s: none of %d judgments names a crawled page", cfg.Corpus, len(js))
	}

	ib, err := indexBytes(c.idxDB)
	if err != nil {
		return nil, err
	}
	for _, e := range []struct {
		name string
		eng  engine
	}{{EngineMicra, micraEngine{idx: c.idx}}, {EngineMicraAny, micraEngine{idx: c.idx, any: true}}} {
		row, err := measure(ctx, e.name, e.eng, qs, cfg.Misses)
		if err != nil {
			return nil, err
		}
		row.IndexBytes = ib
		rep.Rows = append(rep.Rows, row)
	}
	if cfg.Reference {
		srv, err := pgserver.Start(ctx, pgserver.Options{})
		if err != nil {
			return nil, fmt.Errorf("the full-text reference: %w", err)
		}
		defer srv.Stop()
		pages := make([]string, 0, len(crawledKeys))
		for _, u := range crawledKeys {
			pages = append(pages, u)
		}
		slices.Sort(pages)
		logf("loading %d pages into PostgreSQL", len(pages))
		eng, stop, size, err := startReference(ctx, srv, pages)
		if err != nil {
			return nil, fmt.Errorf("the full-text reference: %w", err)
		}
		defer stop()
		row, err := measure(ctx, EnginePostgres, eng, qs, cfg.Misses)
		if err != nil {
			return nil, err
		}
		row.IndexBytes = size
		rep.Rows = append(rep.Rows, row)
		logf("storing the %d batches again into each of micra's stores", len(c.batches))
		if err := storesSideBySide(ctx, srv, c, qs, rep); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// storesSideBySide stores the crawl's batches into both of micra's
// stores, adds the PostgreSQL store's row, and the stores' figures with
// the overlap of their top 10s on the queries.
func storesSideBySide(ctx context.Context, srv *pgserver.Server, c *crawled, qs []query, rep *Report) error {
	dir, err := os.MkdirTemp("", "searcheval-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, closeP, f, err := compareStores(ctx, srv, dir, c.batches)
	if err != nil {
		return fmt.Errorf("micra's stores: %w", err)
	}
	defer closeP()
	pgEng, emb := micraEngine{idx: p}, micraEngine{idx: c.idx}
	row, err := measure(ctx, EngineMicraPG, pgEng, qs, nil)
	if err != nil {
		return err
	}
	row.IndexBytes = f.PostgresBytes
	rep.Rows = append(rep.Rows, row)
	for _, q := range qs {
		a, err := emb.search(ctx, q.text)
		if err != nil {
			a = nil
		}
		b, err := pgEng.search(ctx, q.text)
		if err != nil {
			b = nil
		}
		f.Overlap10 += overlap(a, b)
	}
	f.Overlap10 /= float64(len(qs))
	rep.Stores = &f
	return nil
}

// overlap is the share of the longer of two top lists that both hold; 1
// when both are empty.
func overlap(a, b []string) float64 {
	if len(a) == 0 && len(b) == 0 {
		return 1
	}
	n := 0
	for _, u := range a {
		if slices.Contains(b, u) {
			n++
		}
	}
	return float64(n) / float64(max(len(a), len(b)))
}

// engine answers a query with at most 10 page URLs, best first.
type engine interface {
	search(ctx context.Context, q string) ([]string, error)
}

type query struct {
	text     string
	relevant map[string]bool // page keys
}

// sample returns n evenly spaced elements of qs (all when n ≤ 0 or n ≥
// len(qs)), in order: the same sample on every run.
func sample(qs []query, n int) []query {
	if n <= 0 || n >= len(qs) {
		return qs
	}
	out := make([]query, n)
	for i := range out {
		out[i] = qs[i*len(qs)/n]
	}
	return out
}

// measure runs every query on e, and writes those it misses to misses.
func measure(ctx context.Context, name string, e engine, qs []query, misses io.Writer) (Row, error) {
	row := Row{Engine: name}
	lat := make([]time.Duration, 0, len(qs))
	var s1, s10, none int
	var rr float64
	for _, q := range qs {
		t0 := time.Now()
		hits, err := e.search(ctx, q.text)
		lat = append(lat, time.Since(t0))
		if err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return row, err
			}
			// A query the engine refuses finds nothing, as for a user.
			hits = nil
		}
		if len(hits) == 0 {
			none++
		}
		found := false
		for i, h := range hits[:min(len(hits), 10)] {
			if q.relevant[pageKey(h)] {
				if i == 0 {
					s1++
				}
				s10++
				rr += 1 / float64(i+1)
				found = true
				break
			}
		}
		if !found && misses != nil {
			if err := writeMiss(misses, name, q, hits); err != nil {
				return row, err
			}
		}
	}
	n := float64(len(qs))
	row.Success1, row.Success10, row.MRR10, row.NoResult = float64(s1)/n, float64(s10)/n, rr/n, float64(none)/n
	slices.Sort(lat)
	row.P50 = ms(lat[len(lat)/2])
	row.P99 = ms(lat[min(len(lat)-1, len(lat)*99/100)])
	return row, nil
}

// writeMiss writes one line of Config.Misses.
func writeMiss(w io.Writer, engine string, q query, hits []string) error {
	rel := slices.Sorted(maps.Keys(q.relevant))
	b, err := json.Marshal(struct {
		Engine   string   `json:"engine"`
		Query    string   `json:"query"`
		Relevant []string `json:"relevant"`
		Hits     []string `json:"hits"`
	}{engine, q.text, rel, hits[:min(len(hits), 3)]})
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pageKey identifies a page by URL: no fragment, and a directory's
// index.html the directory itself (Go's file server redirects the one to
// the other).
func pageKey(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Fragment, u.RawFragment = "", ""
	if strings.HasSuffix(u.Path, "/index.html") {
		u.Path = strings.TrimSuffix(u.Path, "index.html")
		u.RawPath = ""
	}
	return u.String()
}

// Print writes the report as a table.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "%s: %d pages crawled in %.1f s; %d judgments (%d name no crawled page); result ratio 1/%.1f (%d batch bytes for %d page bytes)\n",
		r.Corpus, r.Pages, r.CrawlSec, r.Judgments, r.Unreachable, 1/max(r.ResultRatio(), 1e-9), r.BatchBytes, r.Decoded)
	fmt.Fprintf(w, "  %-23s %10s %11s %7s %10s %8s %8s %12s\n", "engine", "success@1", "success@10", "MRR@10", "no result", "p50 ms", "p99 ms", "index bytes")
	for _, x := range r.Rows {
		fmt.Fprintf(w, "  %-23s %9.1f%% %10.1f%% %7.3f %9.1f%% %8.2f %8.2f %12d\n", x.Engine, 100*x.Success1, 100*x.Success10, x.MRR10, 100*x.NoResult, x.P50, x.P99, x.IndexBytes)
	}
	if s := r.Stores; s != nil {
		fmt.Fprintf(w, "  micra's stores on the crawl's batches: embedded %.0f records/s, PostgreSQL %.0f records/s (%.2fx); top-10 overlap %.1f %%\n",
			s.EmbeddedRecordsPerSec, s.PostgresRecordsPerSec, s.PostgresRecordsPerSec/s.EmbeddedRecordsPerSec, 100*s.Overlap10)
	}
}
