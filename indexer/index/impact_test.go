package index

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/micra-net/micra/crawl"
)

// TestThresholdAgreesWithJoin stores one Zipf corpus twice, once with
// impact lists for every term of 64 pages or more and once with none,
// and checks that every query gets the same hits in the same order with
// the same scores from both: all words, any word, exclusions, partial
// matches, paging, distrusted nodes, pages replaced and removed.
func TestThresholdAgreesWithJoin(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	const vocabSize = 3000
	vocab := vocabulary(vocabSize)
	zipf := rand.NewZipf(rng, 1.07, 2, vocabSize-1)
	// The threshold algorithm looks postings up in runs of blocks; the
	// join reads the loose postings only.
	ta := newTestIndex(t, nil, withImpactMin(64), withBlocks(64, 16, 8, 32))
	join := newTestIndex(t, nil, withImpactMin(1<<30), withBlocks(1<<30, 16, 8, 32))
	put := func(node string, recs []crawl.Record) {
		for _, x := range []*Index{ta, join} {
			if res, err := x.Put(t.Context(), Source{Node: node, Seq: 1}, recs); err != nil || res.Rejected > 0 {
				t.Fatalf("%+v %v", res, err)
			}
		}
	}
	pages, queries := 2500, 400
	if raceEnabled {
		pages, queries = 800, 150 // the same paths, fewer times
	}
	var recs []crawl.Record
	for i := range pages {
		recs = append(recs, synthRecord(rng, zipf, vocab, i, 10+rng.IntN(60), rng.IntN(4), t0.Add(time.Duration(i)*time.Millisecond)))
	}
	put("n1", recs[:pages*3/5])
	put("n2", recs[pages*3/5:])
	// Replace some pages and remove others: their impact keys move.
	var later []crawl.Record
	for i := 0; i < pages; i += 7 {
		r := synthRecord(rng, zipf, vocab, i, 10+rng.IntN(60), 2, t0.Add(time.Hour))
		if i%3 == 0 {
			r = gone(r.URL, t0.Add(time.Hour))
		}
		later = append(later, r)
	}
	put("n1", later)
	checkInvariants(t, ta)
	if n := countKeys(t, ta.db, prefixImpact); n == 0 {
		t.Fatal("no impact lists were built")
	}
	if n := countKeys(t, join.db, prefixImpact); n != 0 {
		t.Fatalf("%d impact keys below the threshold", n)
	}
	word := func() string {
		if rng.IntN(3) == 0 {
			return vocab[rng.IntN(200)]
		}
		return vocab[zipf.Uint64()]
	}
	for i := range queries {
		if i == queries/2 {
			ta.Distrust("n2")
			join.Distrust("n2")
		}
		var words []string
		for range 1 + rng.IntN(3) {
			words = append(words, word())
		}
		if rng.IntN(4) == 0 {
			words = append(words, "-"+word())
		}
		if rng.IntN(8) == 0 {
			words = append(words, "zzmissing")
		}
		q := Query{Text: strings.Join(words, " "), Any: rng.IntN(3) == 0, Limit: 1 + rng.IntN(30), Offset: rng.IntN(3) * 10}
		a, err := ta.Search(t.Context(), q)
		b, berr := join.Search(t.Context(), q)
		if errors.Is(err, ErrBadQuery) && errors.Is(berr, ErrBadQuery) {
			continue // a word both searched and excluded
		}
		if err != nil || berr != nil {
			t.Fatal(err, berr)
		}
		if a.Partial != b.Partial || (a.Total == 0) != (b.Total == 0) || len(a.Hits) != len(b.Hits) {
			t.Fatalf("%+v: partial %v/%v, total %d/%d, %d/%d hits", q, a.Partial, b.Partial, a.Total, b.Total, len(a.Hits), len(b.Hits))
		}
		for j := range a.Hits {
			if a.Hits[j].URL != b.Hits[j].URL || a.Hits[j].Score != b.Hits[j].Score {
				t.Fatalf("%+v: hit %d is %s %v on impact lists, %s %v on the join", q, j, a.Hits[j].URL, a.Hits[j].Score, b.Hits[j].URL, b.Hits[j].Score)
			}
		}
		if !a.Estimated && a.Total != b.Total {
			t.Fatalf("%+v: exact total %d, the join's %d", q, a.Total, b.Total)
		}
		if a.Estimated && (a.Total < len(a.Hits)+a.Offset && len(a.Hits) == a.Limit) {
			t.Fatalf("%+v: estimated total %d below the hits shown", q, a.Total)
		}
	}
	if s := ta.Stats(); s.ImpactQueries < uint64(queries/4) || s.ImpactFallbacks == s.ImpactQueries {
		t.Fatalf("%d of %d queries ran on impact lists, %d of them joined instead", s.ImpactQueries, queries, s.ImpactFallbacks)
	} else {
		t.Logf("%d of %d queries ran on impact lists, %d of them joined instead", s.ImpactQueries, queries, s.ImpactFallbacks)
	}
	if s := join.Stats(); s.ImpactQueries != 0 {
		t.Fatalf("%d queries ran on impact lists that do not exist", s.ImpactQueries)
	}
}

// TestThresholdWork checks, on a Zipf corpus, that queries of one and two
// frequent words do half of the join's work or less on impact lists,
// a lookup counted as ten postings read in order (what they cost on
// badger: BenchmarkSearchLatency has the times).
func TestThresholdWork(t *testing.T) {
	if raceEnabled {
		t.Skip("a count of one goroutine's work: nothing for the race detector to see")
	}
	rng := rand.New(rand.NewPCG(11, 11))
	const vocabSize = 3000
	vocab := vocabulary(vocabSize)
	zipf := rand.NewZipf(rng, 1.07, 2, vocabSize-1)
	var recs []crawl.Record
	for i := range 6000 {
		recs = append(recs, synthRecord(rng, zipf, vocab, i, 40, 0, t0))
	}
	work := func(impactMin int) uint64 {
		x := newTestIndex(t, nil, withImpactMin(impactMin))
		mustPut(t, x, recs...)
		r0, l0 := x.readPostings.Load(), x.lookups.Load()
		qrng := rand.New(rand.NewPCG(12, 12))
		qzipf := rand.NewZipf(qrng, 1.07, 2, 40)
		for range 200 {
			q := vocab[qzipf.Uint64()]
			if qrng.IntN(2) == 0 {
				q += " " + vocab[qzipf.Uint64()]
			}
			if _, err := x.Search(t.Context(), Query{Text: q}); err != nil {
				t.Fatal(err)
			}
		}
		return x.readPostings.Load() - r0 + 10*(x.lookups.Load()-l0)
	}
	lists, join := work(defaultImpactMin), work(1<<30)
	t.Logf("work of 200 queries: %d on impact lists, %d joined (1/%.1f)", lists, join, float64(join)/float64(lists))
	if lists*2 > join {
		t.Fatalf("impact lists do %d units of work, the join %d: not half", lists, join)
	}
}

// TestImpactListRebuilt checks that a list a crash left half built (keys
// written, the term not marked) is rebuilt whole by the next New, and
// that a list emptied with its term leaves no key.
func TestImpactListRebuilt(t *testing.T) {
	db := openMemDB(t)
	x := newTestIndex(t, db, withImpactMin(2))
	mustPut(t, x, page("http://a.example/", "A", t0, "alpha", 65535), page("http://b.example/", "B", t0, "alpha", 300))
	checkInvariants(t, x)
	x.Close()
	stray := impactKey("alpha", 0.25, idOf("http://gone.example/"))
	err := db.Update(func(txn *badger.Txn) error {
		if err := txn.Set(stray, nil); err != nil {
			return err
		}
		if err := txn.Set(keyBuilding, []byte("alpha")); err != nil {
			return err
		}
		return txn.Set(dfKey("alpha"), termState{df: 2}.encode())
	})
	if err != nil {
		t.Fatal(err)
	}
	x = newTestIndex(t, db, withImpactMin(2))
	checkInvariants(t, x)
	mustPut(t, x, page("http://c.example/", "C", t0, "alpha", 1000))
	checkInvariants(t, x)
	if countKeys(t, db, impactPrefix("alpha")) != 3 {
		t.Fatalf("alpha's list: %d keys, want 3", countKeys(t, db, impactPrefix("alpha")))
	}
	for _, u := range []string{"http://a.example/", "http://b.example/", "http://c.example/"} {
		mustPut(t, x, gone(u, t0.Add(time.Hour)))
	}
	checkInvariants(t, x)
	if n := countKeys(t, db, prefixImpact); n != 0 {
		t.Fatalf("%d impact keys left with no page", n)
	}
}

// TestMigrateV3 opens an index of schema 3 (one written by this binary
// with its impact lists and marks removed) and checks that New builds the
// lists of its frequent terms.
func TestMigrateV3(t *testing.T) {
	db := openMemDB(t)
	x := newTestIndex(t, db, withImpactMin(3))
	rng := rand.New(rand.NewPCG(1, 2))
	vocab := fixedVocabulary(20)
	for i := range 40 {
		mustPut(t, x, randomRecord(rng, vocab, fmt.Sprintf("http://h.example/p%d", i)))
	}
	want := dumpKeys(t, db, prefixDF, prefixImpact)
	x.Close()
	err := db.Update(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().KeyCopy(nil)
			switch {
			case bytes.HasPrefix(k, prefixImpact):
				if err := txn.Delete(k); err != nil {
					return err
				}
			case bytes.HasPrefix(k, prefixDF):
				v, _ := it.Item().ValueCopy(nil)
				s, err := decodeTermState(v)
				if err != nil {
					return err
				}
				if err := txn.Set(k, encodeUvarint(s.df)); err != nil {
					return err
				}
			}
		}
		return txn.Set(keySchema, encodeUvarint(3))
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(dumpKeys(t, db, prefixImpact), "/index/i/") {
		t.Fatal("impact keys left")
	}
	y := newTestIndex(t, db, withImpactMin(3))
	checkInvariants(t, y)
	if v := schemaOf(t, db); v != schemaVersion {
		t.Errorf("schema %d", v)
	}
	if got := dumpKeys(t, db, prefixDF, prefixImpact); got != want {
		t.Errorf("migrated lists differ from those kept while storing:\n%s\n%s", got, want)
	}
}

func countKeys(t *testing.T, db *badger.DB, prefix []byte) int {
	t.Helper()
	n := 0
	err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: false})
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestImpactBound checks that a posting's impact bounds what it adds to a
// score, under the impacts' title boost and any other.
func TestImpactBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for range 100000 {
		w, a := uint16(rng.IntN(65536)), uint16(rng.IntN(65536))
		fl := uint8(rng.IntN(2)) * inTitle
		q := impactOf(w, fl, a)
		for _, b := range []float64{0, impactBoost, 2, 100} {
			idf := 0.1 + rng.Float64()*10
			if s, bound := termScore(idf, w, fl, a, b), impactBound(q, idf, b); s > bound {
				t.Fatalf("w %d flags %d anchor %d boost %v: score %v above bound %v", w, fl, a, b, s, bound)
			}
		}
	}
	if !slices.IsSortedFunc([]float64{impactOf(65535, inTitle, 65535), impactOf(65535, 0, 0), impactOf(1, 0, 0)}, func(a, b float64) int { return cmp.Compare(b, a) }) {
		t.Fatal("impacts not ordered by weight")
	}
}
