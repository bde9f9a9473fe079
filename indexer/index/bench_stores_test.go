package index

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/micra-net/micra/internal/pgserver"
	"github.com/micra-net/micra/internal/pgserver/pgtest"
)

// BenchmarkStores compares the embedded store with the PostgreSQL store
// side by side, on the same MICRA_INDEX_BENCH_DOCS records (default
// 20 000; benchRecords, 30 % with statements) stored in batches of 500,
// the two stores taking turns every 20 batches so that both see the same
// load of the machine: records stored per second, bytes on disk, search
// latency p50/p99 of one-word, two-word and typed queries (each query on
// both stores in turns, after one pass that warms the caches), and the
// top-10 overlap of their answers. The PostgreSQL server is a private one
// with shared_buffers=1GB, without fsync (pgserver), as the embedded
// store's badger does not sync either.
//
//	MICRA_INDEX_BENCH_DOCS=1000000 go test -run '^$' -bench Stores -benchtime 1x -timeout 4h ./indexer/index/
func BenchmarkStores(b *testing.B) {
	n := 20000
	if s := os.Getenv("MICRA_INDEX_BENCH_DOCS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	srv := pgtest.Private(b, pgserver.Options{Settings: []string{"shared_buffers=1GB", "max_wal_size=4GB"}})
	if err := srv.CreateDB(b.Context(), "bench"); err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	x := newTestIndex(b, openBenchDB(b, dir))
	p := openTestPostgres(b, srv.DSN("bench"), PostgresOptions{QueryTimeout: time.Minute})
	stores := []Store{x, p}
	names := []string{"embedded", "postgres"}
	var took [2]time.Duration
	const turn = 20 * benchBatch
	for i := 0; i < n; i += turn {
		recs := benchRecords(min(turn, n-i), uint64(3+i))
		for j := range recs { // distinct pages across turns
			recs[j].URL = fmt.Sprintf("http://site%d.example/page/%d", (i+j)%5000, i+j)
			recs[j].FinalURL = recs[j].URL
		}
		benchStructured(recs, uint64(3+i))
		for k := range stores {
			s := stores[(k+i/turn)%2] // each first in turn
			start := time.Now()
			for j := 0; j < len(recs); j += benchBatch {
				res, err := s.Put(b.Context(), Source{Node: "bench", Seq: uint64(i + j)}, recs[j:min(j+benchBatch, len(recs))])
				if err != nil || res.Rejected > 0 {
					b.Fatalf("%+v %v", res, err)
				}
			}
			took[(k+i/turn)%2] += time.Since(start)
		}
	}
	start := time.Now()
	if _, err := p.pool.Exec(b.Context(), `VACUUM ANALYZE`); err != nil {
		b.Fatal(err)
	}
	vacuum := time.Since(start)
	pgBytes, err := p.Bytes(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	xBytes := diskBytes(b, dir)
	st := x.Stats()
	b.Logf("%d records (%d terms, %d postings) stored in %v (embedded) and %v (postgres; then VACUUM ANALYZE %v); on disk %.0f MB and %.0f MB",
		st.Docs, st.Terms, st.Postings, took[0].Round(time.Millisecond), took[1].Round(time.Millisecond), vacuum.Round(time.Millisecond),
		float64(xBytes)/1e6, float64(pgBytes)/1e6)
	for k, name := range names {
		b.ReportMetric(float64(n)/took[k].Seconds(), name+"-records/s")
	}
	b.ReportMetric(float64(pgBytes)/float64(xBytes), "postgres/embedded-bytes")

	classes := benchStoreQueries()
	for _, c := range classes {
		for _, q := range c.qs { // warm-up
			for _, s := range stores {
				if _, err := s.Search(b.Context(), q); err != nil {
					b.Fatalf("%q: %v", q.Text, err)
				}
			}
		}
		var lat [2][]time.Duration
		var overlap float64
		for i, q := range c.qs {
			var top [2][]string
			for r := range 2 {
				k := (i + r) % 2
				t := time.Now()
				res, err := stores[k].Search(b.Context(), q)
				lat[k] = append(lat[k], time.Since(t))
				if err != nil {
					b.Fatalf("%s %q: %v", names[k], q.Text, err)
				}
				top[k] = urls(res)
			}
			overlap += topOverlap(top[0], top[1])
		}
		overlap /= float64(len(c.qs))
		x50, x99 := percentiles(lat[0])
		p50, p99 := percentiles(lat[1])
		b.Logf("%-9s %d queries: embedded p50 %.2f ms p99 %.2f ms; postgres p50 %.2f ms p99 %.2f ms; top-10 overlap %.1f %%",
			c.name, len(c.qs), x50, x99, p50, p99, 100*overlap)
		slow := make([]int, len(c.qs))
		for i := range slow {
			slow[i] = i
		}
		slices.SortFunc(slow, func(i, j int) int { return int(lat[1][j] - lat[1][i]) })
		for _, i := range slow[:3] {
			b.Logf("  slowest on postgres: %q (any %v) %v; embedded %v", c.qs[i].Text, c.qs[i].Any, lat[1][i].Round(time.Microsecond), lat[0][i].Round(time.Microsecond))
		}
		b.ReportMetric(p50, c.name+"-postgres-p50-ms")
		b.ReportMetric(p99, c.name+"-postgres-p99-ms")
		b.ReportMetric(x99, c.name+"-embedded-p99-ms")
		b.ReportMetric(100*overlap, c.name+"-overlap-%")
	}
}

type benchClass struct {
	name string
	qs   []Query
}

// benchStoreQueries are 200 queries of each class: one word and two
// words, each a frequent word (a Zipf draw) or any word of the
// vocabulary with even odds; typed: a type alone, a type and a word, a
// property's value, a word without a type.
func benchStoreQueries() []benchClass {
	rng := rand.New(rand.NewPCG(7, 1))
	vocab := vocabulary(benchVocab)
	zipf := rand.NewZipf(rng, 1.07, 2, benchVocab-1)
	word := func() string {
		if rng.IntN(2) == 0 {
			return vocab[zipf.Uint64()]
		}
		return vocab[rng.IntN(benchVocab)]
	}
	props := vocabulary(200)
	cs := []benchClass{{name: "one-word"}, {name: "two-word"}, {name: "typed"}}
	for range 200 {
		cs[0].qs = append(cs[0].qs, Query{Text: word()})
		cs[1].qs = append(cs[1].qs, Query{Text: word() + " " + word()})
		ty := benchTypes[rng.IntN(len(benchTypes))]
		var q string
		switch rng.IntN(4) {
		case 0:
			q = "type:" + ty
		case 1:
			q = "type:" + ty + " " + word()
		case 2:
			q = "genre=" + props[rng.IntN(len(props))]
		default:
			q = word() + " -type:" + ty
		}
		cs[2].qs = append(cs[2].qs, Query{Text: q})
	}
	return cs
}

// topOverlap is the share of the longer of two result lists that both
// hold; 1 when both are empty.
func topOverlap(a, b []string) float64 {
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

// diskBytes is what the files under dir take on disk (allocated blocks:
// badger's value log is sparse).
func diskBytes(b *testing.B, dir string) int64 {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		} else {
			total += fi.Size()
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return total
}
