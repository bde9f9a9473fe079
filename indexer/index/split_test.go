package index

import (
	"slices"
	"testing"
)

func TestSplitUnknown(t *testing.T) {
	df := map[string]int64{"alias": 40, "read": 7, "file": 90, "autocd": 3, "lava": 5, "nois": 1}
	lookup := func(ts []string) (map[string]int64, error) {
		out := map[string]int64{}
		for _, t := range ts {
			if n := df[t]; n > 0 {
				out[t] = n
			}
		}
		return out, nil
	}
	tests := []struct {
		query     string
		terms     []string
		split     []Split
		unchanged bool
	}{
		// A negated option: "no" is a stop word, "aliases" a word pages have.
		{query: "NOALIASES", terms: []string{"alias"}, split: []Split{{"noaliases", []string{"no", "aliases"}}}},
		{query: "noautocd", terms: []string{"autocd"}, split: []Split{{"noautocd", []string{"no", "autocd"}}}},
		// Two words pages have, beside a word kept whole.
		{query: "lava readfile", terms: []string{"file", "lava", "read"}, split: []Split{{"readfile", []string{"read", "file"}}}},
		// Known words are never split, nor words no split explains.
		{query: "lava", unchanged: true},
		{query: "zzqxwv lava", unchanged: true},
		// Too short, or not letters alone.
		{query: "noal", unchanged: true},
		{query: "readfile2", unchanged: true},
		// An excluded word is not searched even when a split finds it.
		{query: "readfile -file", terms: []string{"read"}, split: []Split{{"readfile", []string{"read", "file"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			pq, err := parseQuery(tt.query, 1024, 16)
			if err != nil {
				t.Fatal(err)
			}
			got, split, err := splitUnknown(pq, lookup)
			if err != nil {
				t.Fatal(err)
			}
			if tt.unchanged {
				if split != nil || !slices.Equal(got.Terms, pq.Terms) {
					t.Fatalf("split %v into %v", split, got.Terms)
				}
				return
			}
			if !slices.Equal(got.Terms, tt.terms) {
				t.Fatalf("terms %v, want %v", got.Terms, tt.terms)
			}
			if !slices.EqualFunc(split, tt.split, func(a, b Split) bool { return a.Word == b.Word && slices.Equal(a.As, b.As) }) {
				t.Fatalf("split %+v, want %+v", split, tt.split)
			}
			for _, term := range got.Terms {
				if got.Words[term] == "" {
					t.Fatalf("term %q has no word", term)
				}
			}
		})
	}
}

// TestSearchSplitsUnknownWords runs a split query on both stores: the
// hits are those of the split words, and the results say what was searched.
func TestSearchSplitsUnknownWords(t *testing.T) {
	recs := searchRecords()
	stores := map[string]Store{"embedded": newTestIndex(t, nil), "postgres": newTestPostgres(t, PostgresOptions{})}
	for name, x := range stores {
		t.Run(name, func(t *testing.T) {
			mustPut(t, x, recs...)
			res, err := x.Search(t.Context(), Query{Text: "lavalamp"})
			if err != nil {
				t.Fatal(err)
			}
			if got := urls(res); !slices.Equal(got, []string{"http://c.example/3"}) || res.Partial {
				t.Fatalf("lavalamp: %v (partial %v)", got, res.Partial)
			}
			if len(res.Split) != 1 || res.Split[0].Word != "lavalamp" || !slices.Equal(res.Split[0].As, []string{"lava", "lamp"}) {
				t.Fatalf("split %+v", res.Split)
			}
			if !slices.Equal(res.Words, []string{"lava", "lamp"}) || !slices.Equal(res.Terms, []string{"lamp", "lava"}) {
				t.Fatalf("words %v, terms %v", res.Words, res.Terms)
			}
			if !slices.Equal(res.Hits[0].Matched, []string{"lava", "lamp"}) {
				t.Fatalf("matched %v", res.Hits[0].Matched)
			}
			// A word that no split explains is left to the partial matches.
			res, err = x.Search(t.Context(), Query{Text: "cyprus qqzzxxyy"})
			if err != nil {
				t.Fatal(err)
			}
			if res.Split != nil || !res.Partial || res.Total != 3 {
				t.Fatalf("cyprus qqzzxxyy: split %+v, partial %v, total %d", res.Split, res.Partial, res.Total)
			}
		})
	}
}

// TestMemoDFs: each term is looked up once, whatever the calls that ask
// for it; terms on no page are remembered as such.
func TestMemoDFs(t *testing.T) {
	var asked [][]string
	df := memoDFs(func(ts []string) (map[string]int64, error) {
		asked = append(asked, slices.Clone(ts))
		return map[string]int64{"lava": 3, "lamp": 0}, nil
	})
	for _, ts := range [][]string{{"lava", "lamp", "lava"}, {"lamp", "lava"}, {"lava", "new"}} {
		got, err := df(ts)
		if err != nil || got["lava"] != 3 || len(got) != 1 {
			t.Fatalf("%v: %v, %v", ts, got, err)
		}
	}
	if want := [][]string{{"lava", "lamp"}, {"new"}}; !slices.EqualFunc(asked, want, slices.Equal) {
		t.Fatalf("looked up %v, want %v", asked, want)
	}
}
