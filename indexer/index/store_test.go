package index

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/micra-net/micra/crawl"
)

func TestPutOrdering(t *testing.T) {
	const u = "http://a.example/doc"
	v1 := page(u, "Old volcano", t0, "volcano", 65535, "lava", 30000)
	v2 := page(u, "New geyser", t0.Add(time.Hour), "geyser", 65535, "steam", 20000)
	v2b := v2 // same time, other content: the greater hash wins everywhere
	v2b.Keywords = []crawl.Keyword{{Term: "geyser", Weight: 65535}, {Term: "iceland", Weight: 100}}
	rip := gone(u, t0.Add(2*time.Hour))
	type want struct {
		res   PutResult
		terms []string // terms that must find u
		none  []string // terms that must not
		gone  bool
	}
	tests := []struct {
		name  string
		steps [][]crawl.Record
		want  want
	}{
		{"new", [][]crawl.Record{{v1}}, want{PutResult{Added: 1}, []string{"volcano", "lava"}, nil, false}},
		{"twice in one batch", [][]crawl.Record{{v1, v1}}, want{PutResult{Added: 1, Duplicates: 1}, []string{"volcano"}, nil, false}},
		{"twice in two batches", [][]crawl.Record{{v1}, {v1}}, want{PutResult{Duplicates: 1}, []string{"volcano"}, nil, false}},
		{"newer replaces", [][]crawl.Record{{v1}, {v2}}, want{PutResult{Replaced: 1}, []string{"geyser", "steam"}, []string{"volcano", "lava"}, false}},
		{"older is stale", [][]crawl.Record{{v2}, {v1}}, want{PutResult{Stale: 1}, []string{"geyser"}, []string{"volcano"}, false}},
		{"gone removes", [][]crawl.Record{{v1, v2}, {rip}}, want{PutResult{Removed: 1}, nil, []string{"geyser", "volcano", "steam"}, true}},
		{"late record cannot resurrect", [][]crawl.Record{{rip}, {v2}}, want{PutResult{Stale: 1}, nil, []string{"geyser"}, true}},
		{"gone before any record", [][]crawl.Record{{rip}}, want{PutResult{Removed: 1}, nil, []string{"geyser"}, true}},
		{"newer after gone comes back", [][]crawl.Record{{rip}, {page(u, "Back", t0.Add(3*time.Hour), "phoenix", 65535)}}, want{PutResult{Added: 1}, []string{"phoenix"}, nil, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := newTestIndex(t, nil)
			var last PutResult
			for _, s := range tt.steps {
				last = mustPut(t, x, s...)
			}
			last.Errors = nil
			if !reflect.DeepEqual(last, tt.want.res) {
				t.Errorf("last put = %+v, want %+v", last, tt.want.res)
			}
			for _, term := range tt.want.terms {
				res, err := x.Search(t.Context(), Query{Text: term})
				if err != nil || res.Total != 1 || res.Hits[0].URL != u {
					t.Errorf("search %q: %v %+v", term, err, res)
				}
			}
			for _, term := range tt.want.none {
				res, err := x.Search(t.Context(), Query{Text: term})
				if err != nil || res.Total != 0 {
					t.Errorf("search %q found %v (err %v)", term, urls(res), err)
				}
			}
			_, err := x.Get(t.Context(), u)
			if tt.want.gone != errors.Is(err, ErrGone) {
				t.Errorf("Get: %v, want gone=%v", err, tt.want.gone)
			}
			checkInvariants(t, x)
		})
	}
	t.Run("tie by content converges", func(t *testing.T) {
		a, b := newTestIndex(t, nil), newTestIndex(t, nil)
		mustPut(t, a, v2, v2b)
		mustPut(t, b, v2b, v2)
		da, _ := a.Get(t.Context(), u)
		db, _ := b.Get(t.Context(), u)
		if da.Keywords[1] != db.Keywords[1] {
			t.Fatalf("indexers disagree: %v vs %v", da.Keywords, db.Keywords)
		}
	})
}

func TestPutRejects(t *testing.T) {
	ok := page("http://a.example/", "t", t0, "alpha", 65535)
	mod := func(f func(r *crawl.Record)) crawl.Record {
		r := ok
		r.Keywords = append([]crawl.Keyword(nil), ok.Keywords...)
		f(&r)
		return r
	}
	tests := []struct {
		name string
		rec  crawl.Record
	}{
		{"empty url", mod(func(r *crawl.Record) { r.URL = "" })},
		{"javascript url", mod(func(r *crawl.Record) { r.URL = "javascript:alert(1)" })},
		{"relative url", mod(func(r *crawl.Record) { r.URL = "/x" })},
		{"url with space", mod(func(r *crawl.Record) { r.URL = "http://a.example/a b" })},
		{"url with credentials", mod(func(r *crawl.Record) { r.URL = "http://u:p@a.example/" })},
		{"long url", mod(func(r *crawl.Record) { r.URL = "http://a.example/" + strings.Repeat("a", 3000) })},
		{"bad final url", mod(func(r *crawl.Record) { r.FinalURL = "data:text/html,x" })},
		{"zero time", mod(func(r *crawl.Record) { r.Time = time.Time{} })},
		{"ancient time", mod(func(r *crawl.Record) { r.Time = time.Unix(5, 0) })},
		{"future time", mod(func(r *crawl.Record) { r.Time = testNow.Add(time.Hour) })},
		{"change kind", mod(func(r *crawl.Record) { r.Change = 9 })},
		{"status", mod(func(r *crawl.Record) { r.Status = 42 })},
		{"too large", mod(func(r *crawl.Record) {
			for range 20000 {
				r.Links = append(r.Links, crawl.Link{URL: "http://b.example/" + strings.Repeat("x", 40)})
			}
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := newTestIndex(t, nil, RecordLimits(64<<10, 256, 100000))
			res := mustPut(t, x, tt.rec, ok)
			if res.Rejected != 1 || res.Added != 1 || len(res.Errors) != 1 || !errors.Is(res.Errors[0], ErrInvalidRecord) {
				t.Fatalf("res = %+v", res)
			}
			if s := x.Stats(); s.Rejected != 1 || s.Docs != 1 {
				t.Fatalf("stats = %+v", s)
			}
		})
	}
}

func TestPutSanitises(t *testing.T) {
	x := newTestIndex(t, nil, RecordLimits(512<<10, 3, 2))
	r := page("http://a.example/x", "Bad \xff title "+strings.Repeat("é", 400), t0,
		"alpha", 10000, "Upper", 50000, "two words", 50000, "beta", 65535, "alpha", 20000, "gamma", 30000, "delta", 5000, "x", 1000)
	r.FinalURL = ""
	r.Canonical = "javascript:alert(1)"
	r.Links = []crawl.Link{{URL: "http://b.example/1"}, {URL: "http://b.example/2"}, {URL: "http://b.example/3"}}
	res := mustPut(t, x, r)
	// Dropped: Upper, "two words", x (malformed), alpha (duplicate), delta (over the cap of 3).
	if res.Added != 1 || res.Dropped != 5 {
		t.Fatalf("res = %+v", res)
	}
	d, err := x.Get(t.Context(), r.URL)
	if err != nil {
		t.Fatal(err)
	}
	// Weights as a record's encoding quantises them.
	want := []crawl.Keyword{{Term: "beta", Weight: 65535}, {Term: "gamma", Weight: crawl.QuantiseWeight(30000)}, {Term: "alpha", Weight: crawl.QuantiseWeight(20000)}}
	if len(d.Keywords) != 3 || d.Keywords[0] != want[0] || d.Keywords[1] != want[1] || d.Keywords[2] != want[2] {
		t.Errorf("keywords = %v", d.Keywords)
	}
	if len(d.Links) != 2 || d.Canonical != "" || d.FinalURL != r.URL {
		t.Errorf("links %d canonical %q final %q", len(d.Links), d.Canonical, d.FinalURL)
	}
	if len(d.Title) > maxTitleBytes || !strings.HasPrefix(d.Title, "Bad \uFFFD title") {
		t.Errorf("title %d bytes: %.20q", len(d.Title), d.Title)
	}
	if d.Provenance.Node != src.Node || d.Provenance.Seq != src.Seq || !d.Provenance.Received.Equal(testNow) {
		t.Errorf("provenance = %+v", d.Provenance)
	}
}

func TestValidTermAcceptsCrawlerStems(t *testing.T) {
	for _, text := range []string{
		"The quick brown foxes jumped over the lazy dogs' kennels",
		"Ünïcödé naïve café façade résumé Straße ΑΘΗΝΑ Москва 東京",
		"o'neil rock'n'roll don’t 3d h2o mp3 x86_64 e-mail run'ing 22's",
	} {
		for _, s := range crawl.Stems(text, 100) {
			if !validTerm(s) {
				t.Errorf("stem %q of %q rejected", s, text)
			}
		}
	}
	for _, good := range []string{"run'", "22", "o'neil", "café", "naïv"} {
		if !validTerm(good) {
			t.Errorf("validTerm(%q) = false", good)
		}
	}
	for _, bad := range []string{"", "a", "Upper", "two words", "'tis", "a-b", "a/b", strings.Repeat("a", 65), "x\x00y", "\xff\xfe"} {
		if validTerm(bad) {
			t.Errorf("validTerm(%q) = true", bad)
		}
	}
}

func TestIndexTermsTitleAndHost(t *testing.T) {
	x := newTestIndex(t, nil)
	mustPut(t, x,
		page("http://www.volcanoes.example.org/etna", "Mount Etna erupts", t0, "lava", 65535, "ash", 20000),
		page("http://192.0.2.1/x", "Numbers", t0, "lava", 40000),
	)
	for _, tc := range []struct {
		q    string
		want int
	}{
		{"etna", 1},      // title only
		{"erupting", 1},  // title, stemmed
		{"volcanoes", 1}, // host label, stemmed like the query
		{"www", 0},
		{"org", 0},
		{"lava", 2},
		{"numbers", 1},
	} {
		res, err := x.Search(t.Context(), Query{Text: tc.q})
		if err != nil || res.Total != tc.want {
			t.Errorf("%q: total %v err %v, want %d", tc.q, res, err, tc.want)
		}
	}
	// The title boost ranks the page whose title has the term first.
	mustPut(t, x, page("http://c.example/", "Lava fields", t0, "lava", 65535))
	res, _ := x.Search(t.Context(), Query{Text: "lava"})
	if res.Hits[0].URL != "http://c.example/" {
		t.Errorf("order = %v", urls(res))
	}
}

func TestPutBatchAndSource(t *testing.T) {
	x := newTestIndex(t, nil)
	b, err := crawl.EncodeBatch([]crawl.Record{page("http://a.example/", "A", t0, "alpha", 65535)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := x.PutBatch(t.Context(), Source{Node: "n", Seq: 1, Received: t0}, b.Data)
	if err != nil || res.Added != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	if _, err := x.PutBatch(t.Context(), Source{}, b.Data[:10]); !errors.Is(err, crawl.ErrBatchCorrupt) {
		t.Fatalf("corrupt batch: %v", err)
	}
	if _, err := x.Put(t.Context(), Source{Node: strings.Repeat("n", 300)}, nil); !errors.Is(err, ErrInvalidRecord) {
		t.Fatalf("long node id: %v", err)
	}
	d, _ := x.Get(t.Context(), "http://a.example/")
	if d.Provenance != (Provenance{Node: "n", Seq: 1, Received: t0}) && !d.Provenance.Received.Equal(t0) {
		t.Fatalf("provenance %+v", d.Provenance)
	}
	if _, err := x.Get(t.Context(), "http://nope.example/"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown: %v", err)
	}
}

func TestClose(t *testing.T) {
	x := newTestIndex(t, nil)
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Put(t.Context(), src, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Put after Close: %v", err)
	}
	if _, err := x.Search(t.Context(), Query{Text: "x"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Search after Close: %v", err)
	}
}

func TestNewValidatesOptions(t *testing.T) {
	db := openMemDB(t)
	for _, o := range []Option{
		RecordLimits(10, 1, 1), QueryLimits(1, 1), ResultLimits(0, 10, 100), ResultLimits(10, 5, 100),
		MaxScan(1), TitleBoost(-1), ProfileLimits(-1, 1), Logger(nil), ClockSkew(-time.Second),
	} {
		if _, err := New(db, o); err == nil {
			t.Errorf("option accepted")
		}
	}
	if _, err := New(nil); err == nil {
		t.Error("nil db accepted")
	}
}

// checkInvariants compares the stored counters with a full scan.
func checkInvariants(t *testing.T, x *Index) {
	t.Helper()
	if err := x.Verify(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyDetectsDamage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(txn *badger.Txn) error
	}{
		{"lost posting", func(txn *badger.Txn) error { return txn.Delete(postingKey("alpha", idOf("http://a.example/"))) }},
		{"stray posting", func(txn *badger.Txn) error {
			return txn.Set(postingKey("alpha", idOf("http://z.example/")), encodePostingValue(1, inKeyword, 0))
		}},
		{"wrong df", func(txn *badger.Txn) error { return txn.Set(dfKey("alpha"), encodeUvarint(5)) }},
		{"lost record", func(txn *badger.Txn) error { return txn.Delete(recordKey(idOf("http://a.example/"))) }},
		{"bad value", func(txn *badger.Txn) error { return txn.Set(docKey(idOf("http://a.example/")), []byte{9}) }},
		{"lost impact key", func(txn *badger.Txn) error {
			id := idOf("http://b.example/")
			w, fl, a, _, err := getPosting(txn, "alpha", id)
			if err != nil {
				return err
			}
			return txn.Delete(impactKey("alpha", impactOf(w, fl, a), id))
		}},
		{"impact key at a wrong impact", func(txn *badger.Txn) error {
			return txn.Set(impactKey("alpha", 0.5, idOf("http://b.example/")), nil)
		}},
		{"impact key of a term without a list", func(txn *badger.Txn) error {
			return txn.Set(impactKey("b", 0.5, idOf("http://b.example/")), nil)
		}},
		{"impact list unmarked", func(txn *badger.Txn) error { return txn.Set(dfKey("alpha"), termState{df: 2}.encode()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := openMemDB(t)
			x := newTestIndex(t, db, withImpactMin(2)) // alpha has an impact list
			mustPut(t, x, page("http://a.example/", "A", t0, "alpha", 65535), page("http://b.example/", "B", t0, "alpha", 5))
			if err := x.Verify(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := db.Update(tc.damage); err != nil {
				t.Fatal(err)
			}
			if err := x.Verify(t.Context()); !errors.Is(err, ErrCorruptValue) {
				t.Fatalf("damage not detected: %v", err)
			}
		})
	}
}
