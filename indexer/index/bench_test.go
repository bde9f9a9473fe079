package index

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/micra-net/micra/crawl"
)

// Benchmarks run on an indexer's badger settings (BadgerOptions) on disk,
// with records of 64 keywords drawn from a 50 000-term Zipf vocabulary, a
// two-word title, 20 links (BenchmarkSearchLatency: 200 keywords of 500 000).
//
//	go test -run '^$' -bench . -benchtime 20000x ./indexer/index/   (ingest, 20 000 records)
//	MICRA_INDEX_BENCH_DOCS=100000 go test -run '^$' -bench Search ./indexer/index/
const (
	benchVocab    = 50000
	benchKeywords = 64
	benchLinks    = 20
	benchBatch    = 500 // records per Put, about one 256 KiB crawler batch
)

func benchRecords(n int, seed uint64) []crawl.Record {
	rng := rand.New(rand.NewPCG(seed, 1))
	vocab := vocabulary(benchVocab)
	zipf := rand.NewZipf(rng, 1.07, 2, benchVocab-1)
	out := make([]crawl.Record, n)
	for i := range out {
		out[i] = synthRecord(rng, zipf, vocab, i, benchKeywords, benchLinks, t0.Add(time.Duration(i)*time.Millisecond))
	}
	return out
}

// benchDB opens a database with an indexer's options in a temporary
// folder.
func benchDB(b *testing.B) *badger.DB { return openBenchDB(b, b.TempDir()) }

func openBenchDB(b *testing.B, dir string) *badger.DB {
	db, err := badger.Open(BadgerOptions(dir))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

func ingest(b *testing.B, x *Index, recs []crawl.Record) {
	for i := 0; i < len(recs); i += benchBatch {
		res, err := x.Put(b.Context(), Source{Node: "bench", Seq: uint64(i)}, recs[i:min(i+benchBatch, len(recs))])
		if err != nil || res.Rejected > 0 {
			b.Fatalf("%+v %v", res, err)
		}
	}
}

// BenchmarkPut measures ingest: one op is one record, stored in batches of
// 500 into an index that grows to b.N records, with one profile
// registered; with impact lists and posting blocks for the terms of 1024
// pages or more (the default), without the blocks, and without either,
// side by side.
func BenchmarkPut(b *testing.B) {
	b.Run("impact", func(b *testing.B) { benchPut(b, false) })
	b.Run("no-blocks", func(b *testing.B) {
		benchPut(b, false, withBlocks(math.MaxInt, defaultBlockLen, defaultDeltaMin, defaultDeltaMax))
	})
	b.Run("none", func(b *testing.B) {
		benchPut(b, false, withImpactMin(math.MaxInt), withBlocks(math.MaxInt, defaultBlockLen, defaultDeltaMin, defaultDeltaMax))
	})
	b.Run("manual-anchors", func(b *testing.B) { benchPut(b, true) })
}

// manualAnchors are link texts of real manuals (Django, Python): words the
// crawler's analysis keeps and words it drops (verbatim terms).
var manualAnchors = []string{"HttpRequest.GET", "the if tag", "Request and response objects", "django-admin and manage.py",
	"QuerySet API reference", "-v", "Model field reference", "Next", "Previous", "Table of contents", "Index", "Module index",
	"the for loop", "os.path.join", "How to write a custom template tag", "What is new in 3.11", "Built-in functions",
	"the print() function", "str.split()", "re — Regular expressions"}

// benchPut stores b.N synthetic records; with manual, their titles and
// anchors are manualAnchors.
func benchPut(b *testing.B, manual bool, opts ...Option) {
	recs := benchRecords(b.N, 1)
	if manual {
		for i := range recs {
			recs[i].Title = manualAnchors[i%len(manualAnchors)] + " and the " + recs[i].Title
			for j := range recs[i].Links {
				recs[i].Links[j].Anchor = manualAnchors[(i+j)%len(manualAnchors)]
			}
		}
	}
	x := newTestIndex(b, benchDB(b), opts...)
	if _, err := x.PutProfile(b.Context(), Profile{Name: "p", Keywords: []ProfileKeyword{{"wbx", 1}, {"wcx", 2}, {"wdex", 3}}}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	ingest(b, x, recs)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkSearch measures query latency on a corpus of
// MICRA_INDEX_BENCH_DOCS records (default 100 000).
func BenchmarkSearch(b *testing.B) {
	n := 100000
	if s := os.Getenv("MICRA_INDEX_BENCH_DOCS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	x := newTestIndex(b, benchDB(b))
	start := time.Now()
	ingest(b, x, benchRecords(n, 2))
	st := x.Stats()
	b.Logf("corpus: %d records, %d terms, %d postings, built in %v", st.Docs, st.Terms, st.Postings, time.Since(start).Round(time.Millisecond))
	// vocabulary(i) is the i-th most frequent term: w + base26(i) + x.
	term := func(rank int) string { return "w" + base26(rank) + "x" }
	for _, q := range []Query{
		{Text: term(0)},                                      // the most frequent term
		{Text: term(3000)},                                   // a rare term
		{Text: term(10) + " " + term(50)},                    // two common terms, AND
		{Text: term(0) + " " + term(1) + " " + term(2)},      // three very common terms, AND
		{Text: term(10) + " " + term(2000)},                  // common AND rare
		{Text: term(10) + " " + term(50), Any: true},         // two common terms, OR
		{Text: term(100) + " " + term(200) + " -" + term(0)}, // with an exclusion
		{Text: term(10), Offset: 90, Limit: 10},              // page 10
	} {
		res, err := x.Search(b.Context(), q)
		if err != nil {
			b.Fatal(err)
		}
		name := fmt.Sprintf("%s/any=%v/offset=%d/total=%d", q.Text, q.Any, q.Offset, res.Total)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := x.Search(b.Context(), q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchTypes are the schema.org types of benchStructured's items.
var benchTypes = []string{"Event", "Recipe", "Product", "Organization", "Article"}

// benchStructured gives 30 % of recs statements shaped like the emulated
// Internet's (world.Params.Structured): an item of one of benchTypes with
// a name, a date, two word-valued properties and an author (a Person with
// a name of two words from a 200-word list), nine statements.
func benchStructured(recs []crawl.Record, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 3))
	vocab := vocabulary(200)
	for i := range recs {
		if rng.IntN(10) >= 3 {
			continue
		}
		it, au := crawl.Term{Kind: crawl.TermBlank, Value: "b0"}, crawl.Term{Kind: crawl.TermBlank, Value: "b1"}
		word := func() crawl.Term { return litT(vocab[rng.IntN(len(vocab))]) }
		recs[i].Statements = []crawl.Statement{
			st(it, iriT(rdfType), iriT(schemaOrg+benchTypes[rng.IntN(len(benchTypes))])),
			st(it, iriT(schemaOrg+"name"), litT(recs[i].Title)),
			st(it, iriT(schemaOrg+"url"), iriT(recs[i].URL)),
			st(it, iriT(schemaOrg+"datePublished"), crawl.Term{Kind: crawl.TermLiteral, Value: t0.AddDate(0, 0, -rng.IntN(3650)).Format("2006-01-02"), Datatype: xsdDate}),
			st(it, iriT(schemaOrg+"keywords"), word()),
			st(it, iriT(schemaOrg+"genre"), word()),
			st(it, iriT(schemaOrg+"author"), au),
			st(au, iriT(rdfType), iriT(schemaOrg+"Person")),
			st(au, iriT(schemaOrg+"name"), litT(vocab[rng.IntN(len(vocab))]+" "+vocab[rng.IntN(len(vocab))])),
		}
	}
}

// BenchmarkTypedSearch measures typed queries, alone and with words, on
// a corpus of MICRA_INDEX_BENCH_DOCS records (default 20 000), 30 % of
// them with structured data (benchStructured), and logs the cost of the
// statements: ingest time and index size against the same records
// without them.
//
//	go test -run '^$' -bench TypedSearch ./indexer/index/
func BenchmarkTypedSearch(b *testing.B) {
	n := 20000
	if s := os.Getenv("MICRA_INDEX_BENCH_DOCS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	recs := benchRecords(n, 2)
	benchStructured(recs, 2)
	bare := newTestIndex(b, benchDB(b), MaxStatements(0))
	start := time.Now()
	ingest(b, bare, recs)
	tBare := time.Since(start)
	x := newTestIndex(b, benchDB(b))
	start = time.Now()
	ingest(b, x, recs)
	tWith := time.Since(start)
	with, without := indexBytes(b, x.db), indexBytes(b, bare.db)
	st := x.Stats()
	b.Logf("corpus: %d records, %d terms, %d postings; ingest %v with statements, %v without; index %d bytes (keys and values) with statements, %d without (+%.0f %%)",
		st.Docs, st.Terms, st.Postings, tWith.Round(time.Millisecond), tBare.Round(time.Millisecond), with[""], without[""],
		100*float64(with[""]-without[""])/float64(without[""]))
	term := func(rank int) string { return "w" + base26(rank) + "x" }
	for _, q := range []Query{
		{Text: "type:Recipe"},                         // 6 % of the pages
		{Text: "type:Person"},                         // 30 %
		{Text: "type:Recipe " + term(10)},             // a type and a common word
		{Text: "type:Recipe " + term(2000)},           // a type and a rare word
		{Text: term(10) + " -type:Event"},             // a word, a type excluded
		{Text: "author=" + vocabulary(200)[7]},        // a property's value, by word
		{Text: "type:Event datePublished=2025-06-01"}, // a type and an exact value
		{Text: "type:Recipe", Offset: 90, Limit: 10},  // page 10
	} {
		res, err := x.Search(b.Context(), q)
		if err != nil {
			b.Fatal(err)
		}
		name := fmt.Sprintf("%s/offset=%d/total=%d", q.Text, q.Offset, res.Total)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := x.Search(b.Context(), q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSearchLatency measures the distribution of query latency on a
// corpus of MICRA_INDEX_BENCH_DOCS records (default 100 000), each with
// MICRA_INDEX_BENCH_KEYWORDS keywords (default 200: the crawler keeps a
// page's whole vocabulary, and the manuals of docs/search-quality.md have
// 120 to 550 distinct stems a page) from a Zipf vocabulary of 500 000
// terms. The queries are 2 000 of one to three words, half of them
// frequent (drawn from the Zipf law), half uniformly drawn (mostly rare,
// as known-item queries are), and one in ten with a word no page has,
// which an all-words query answers with partial matches. It reports the
// median and 99th percentile in ms. With MICRA_INDEX_BENCH_DIR, the corpus
// is kept in that folder and used again by the next run of the same size
// (building 100 000 records takes about a quarter of an hour on 2 cores).
//
//	go test -run '^$' -bench SearchLatency -benchtime 1x -timeout 1h ./indexer/index/
func BenchmarkSearchLatency(b *testing.B) {
	n, k := 100000, 200
	for _, v := range []struct {
		env string
		p   *int
	}{{"MICRA_INDEX_BENCH_DOCS", &n}, {"MICRA_INDEX_BENCH_KEYWORDS", &k}} {
		if s := os.Getenv(v.env); s != "" {
			var err error
			if *v.p, err = strconv.Atoi(s); err != nil {
				b.Fatal(err)
			}
		}
	}
	const vocabSize = 500000
	rng := rand.New(rand.NewPCG(3, 1))
	vocab := vocabulary(vocabSize)
	zipf := rand.NewZipf(rng, 1.07, 2, vocabSize-1)
	dir := os.Getenv("MICRA_INDEX_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	x := newTestIndex(b, openBenchDB(b, dir))
	start := time.Now()
	for i := int(x.Stats().Docs); i < n; i += benchBatch {
		recs := make([]crawl.Record, 0, benchBatch)
		for j := i; j < min(i+benchBatch, n); j++ {
			recs = append(recs, synthRecord(rng, zipf, vocab, j, k, benchLinks, t0.Add(time.Duration(j)*time.Millisecond)))
		}
		ingest(b, x, recs)
	}
	st := x.Stats()
	b.Logf("corpus: %d records, %d terms, %d postings, built in %v", st.Docs, st.Terms, st.Postings, time.Since(start).Round(time.Second))
	// The queries have their own generator, so that a kept corpus gets
	// the same ones.
	qrng := rand.New(rand.NewPCG(5, 1))
	qzipf := rand.NewZipf(qrng, 1.07, 2, vocabSize-1)
	qs := make([]Query, 2000)
	for i := range qs {
		words := make([]string, 1+qrng.IntN(3))
		for j := range words {
			if qrng.IntN(2) == 0 {
				words[j] = vocab[qzipf.Uint64()]
			} else {
				words[j] = vocab[qrng.IntN(vocabSize)]
			}
		}
		if qrng.IntN(10) == 0 {
			words = append(words, "zzmissing")
		}
		qs[i] = Query{Text: strings.Join(words, " ")}
	}
	b.ResetTimer()
	for b.Loop() {
		// As the index answers, and with every query joined (the impact
		// lists unused) as the baseline: after one pass that warms the
		// caches, each query both ways, in turns first.
		impactMin := x.cfg.impactMin
		warmUp(b, x, qs, impactMin)
		ta, join := make([]time.Duration, len(qs)), make([]time.Duration, len(qs))
		for i, q := range qs {
			for r := range 2 {
				if (i+r)%2 == 0 {
					x.cfg.impactMin = impactMin
					ta[i] = timeSearch(b, x, q)
				} else {
					x.cfg.impactMin = math.MaxInt
					join[i] = timeSearch(b, x, q)
				}
			}
		}
		x.cfg.impactMin = impactMin
		p50, p99 := percentiles(ta)
		j50, j99 := percentiles(join)
		b.ReportMetric(p50, "p50-ms")
		b.ReportMetric(p99, "p99-ms")
		b.ReportMetric(j50, "join-p50-ms")
		b.ReportMetric(j99, "join-p99-ms")
		b.ReportMetric(j99/p99, "p99-speedup")
		st := x.Stats()
		b.Logf("%d queries ran on impact lists, %d of them joined instead", st.ImpactQueries, st.ImpactFallbacks)
		slow := make([]int, len(qs))
		for i := range slow {
			slow[i] = i
		}
		slices.SortFunc(slow, func(i, j int) int { return int(ta[j] - ta[i]) })
		for _, i := range slow[:8] {
			b.Logf("%v (joined: %v) %q", ta[i].Round(time.Microsecond), join[i].Round(time.Microsecond), qs[i].Text)
		}
	}
}

func timeSearch(b *testing.B, x *Index, q Query) time.Duration {
	t := time.Now()
	if _, err := x.Search(b.Context(), q); err != nil {
		b.Fatal(err)
	}
	return time.Since(t)
}

// percentiles returns the median and 99th percentile of ds in ms.
func percentiles(ds []time.Duration) (p50, p99 float64) {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[len(s)/2]) / 1e6, float64(s[len(s)*99/100]) / 1e6
}

// warmUp runs qs on x once, to fill the caches.
func warmUp(b *testing.B, x *Index, qs []Query, impactMin int) {
	x.cfg.impactMin = impactMin
	for _, q := range qs {
		timeSearch(b, x, q)
	}
}
