package index

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/micra-net/micra/crawl"
)

// t0 is the time test records are crawled at; testNow is the index clock.
var (
	t0      = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	testNow = t0.Add(24 * time.Hour)
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func openMemDB(t testing.TB) *badger.DB {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func newTestIndex(t testing.TB, db *badger.DB, opts ...Option) *Index {
	t.Helper()
	if db == nil {
		db = openMemDB(t)
	}
	opts = append([]Option{Logger(quietLogger()), Clock(func() time.Time { return testNow })}, opts...)
	x, err := New(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	return x
}

// withImpactMin sets the document frequency from which terms have impact
// lists (impact.go).
func withImpactMin(n int) Option {
	return func(c *config) error { c.impactMin = n; return nil }
}

// withBlocks sets the document frequency from which terms have a run of
// posting blocks, the postings of a block and the bounds of a delta.
func withBlocks(min, size, deltaMin, deltaMax int) Option {
	return func(c *config) error {
		c.blockMin, c.blockLen, c.deltaMin, c.deltaMax = min, size, deltaMin, deltaMax
		return nil
	}
}

// withPGCount sets the postings up to which the PostgreSQL store counts
// matches exactly.
func withPGCount(n int) Option {
	return func(c *config) error { c.pgCount = n; return nil }
}

// page builds a record; kws alternate term and weight.
func page(url, title string, at time.Time, kws ...any) crawl.Record {
	r := crawl.Record{URL: url, FinalURL: url, Time: at, Status: 200, Type: crawl.TypeHTML, Title: title, Change: crawl.ChangeNew}
	for i := 0; i+1 < len(kws); i += 2 {
		r.Keywords = append(r.Keywords, crawl.Keyword{Term: kws[i].(string), Weight: uint16(kws[i+1].(int))})
	}
	return r
}

func gone(url string, at time.Time) crawl.Record {
	return crawl.Record{URL: url, FinalURL: url, Time: at, Status: 404, Change: crawl.ChangeGone}
}

var src = Source{Node: "12D3KooWTestNode", Seq: 7}

func mustPut(t testing.TB, x Store, recs ...crawl.Record) PutResult {
	t.Helper()
	res, err := x.Put(t.Context(), src, recs)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func urls(res *Results) []string {
	out := make([]string, len(res.Hits))
	for i, h := range res.Hits {
		out[i] = h.URL
	}
	return out
}

// vocabulary for synthetic corpora: valid stems (Snowball leaves these
// unchanged) with a Zipf-like frequency.
func vocabulary(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("w%sx", base26(i))
	}
	return out
}

func base26(i int) string {
	s := ""
	for {
		s = string(rune('a'+i%26)) + s
		i /= 26
		if i == 0 {
			return s
		}
	}
}

// synthRecord makes a record with nk distinct keywords drawn from vocab
// with a Zipf distribution, and nl links.
func synthRecord(rng *rand.Rand, zipf *rand.Zipf, vocab []string, i, nk, nl int, at time.Time) crawl.Record {
	url := fmt.Sprintf("http://site%d.example/page/%d", i%5000, i)
	r := crawl.Record{URL: url, FinalURL: url, Time: at, Status: 200, Type: crawl.TypeHTML, Change: crawl.ChangeNew,
		Lang: "en", Fingerprint: rng.Uint64(), Size: int64(5000 + rng.IntN(50000))}
	seen := make(map[string]bool, nk)
	for len(r.Keywords) < nk {
		t := vocab[zipf.Uint64()]
		if seen[t] {
			continue
		}
		seen[t] = true
		r.Keywords = append(r.Keywords, crawl.Keyword{Term: t, Weight: crawl.QuantiseWeight(uint16(1 + rng.IntN(65535)))}) // as a record carries it
	}
	r.Keywords[0].Weight = 65535
	r.Title = r.Keywords[0].Term + " " + r.Keywords[1].Term
	for j := range nl {
		r.Links = append(r.Links, crawl.Link{URL: fmt.Sprintf("http://site%d.example/page/%d", rng.IntN(5000), j), Anchor: "link"})
	}
	return r
}

type crawlRecord = crawl.Record

func itoa(i int) string { return fmt.Sprint(i) }

func contextWithCancel(t testing.TB) (context.Context, context.CancelFunc) {
	return context.WithCancel(t.Context())
}

// corpus makes n synthetic records over a 300-term vocabulary.
func corpus(n int, seed uint64) []crawl.Record {
	rng := rand.New(rand.NewPCG(seed, seed))
	vocab := vocabulary(300)
	zipf := rand.NewZipf(rng, 1.1, 1, uint64(len(vocab)-1))
	out := make([]crawl.Record, n)
	for i := range out {
		out[i] = synthRecord(rng, zipf, vocab, i, 5+rng.IntN(20), rng.IntN(5), t0.Add(time.Duration(i)*time.Second))
	}
	return out
}

// linkedPages are pages that link to each other with anchor text: a home
// page, two pages it links to, a tombstone, and a page that links to a
// page nobody stored.
func linkedPages() []crawl.Record {
	p := func(url, title string, links []crawl.Link, kws ...any) crawl.Record {
		r := page(url, title, t0, kws...)
		r.Links = links
		return r
	}
	return []crawl.Record{
		p("http://docs.example/", "Widget manual", []crawl.Link{
			{URL: "http://docs.example/config", Anchor: "Widget configuration"},
			{URL: "http://docs.example/api", Anchor: "frobnicate() reference"},
			{URL: "http://docs.example/", Anchor: "Home manual"},
		}, "widget", 65535, "manual", 40000),
		p("http://docs.example/config", "Settings", []crawl.Link{
			{URL: "http://docs.example/api", Anchor: "frobnicate"},
			{URL: "http://docs.example/", Anchor: "home"},
		}, "setting", 65535, "retry", 30000),
		p("http://docs.example/api", "API", []crawl.Link{
			{URL: "http://docs.example/config", Anchor: "settings of the widget"},
		}, "api", 65535, "call", 20000),
		gone("http://docs.example/old", t0),
		p("http://blog.example/post", "A post", []crawl.Link{
			{URL: "http://docs.example/old", Anchor: "old page"},
			{URL: "http://nowhere.example/x", Anchor: "missing target"},
			{URL: "http://docs.example/api", Anchor: "the frobnicate call"},
		}, "post", 65535),
	}
}
