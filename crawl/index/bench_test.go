package index

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/micra-net/micra/crawl"
)

// Benchmarks run on the node's badger settings (crawl.BadgerOptions) on
// disk, with records shaped like the crawler's defaults: 64 keywords drawn
// from a 50 000-term Zipf vocabulary, a two-word title, 20 links.
//
//	go test -run '^$' -bench . -benchtime 20000x ./crawl/index/   (ingest, 20 000 records)
//	MICRA_INDEX_BENCH_DOCS=100000 go test -run '^$' -bench Search ./crawl/index/
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

func benchDB(b *testing.B) *badger.DB {
	db, err := badger.Open(crawl.BadgerOptions(b.TempDir()).WithLogger(nil))
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
// 500 into an index that grows to b.N records, with one profile registered.
func BenchmarkPut(b *testing.B) {
	recs := benchRecords(b.N, 1)
	x := newTestIndex(b, benchDB(b))
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
