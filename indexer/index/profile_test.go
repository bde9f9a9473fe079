package index

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/micra-net/micra/crawl"
)

func TestProfileValidation(t *testing.T) {
	x := newTestIndex(t, nil, ProfileLimits(2, 3))
	kw := []ProfileKeyword{{Word: "java", Weight: 4}}
	tests := []struct {
		name string
		p    Profile
		err  error
	}{
		{"ok", Profile{Name: "alice", Keywords: kw, Threshold: 0.1}, nil},
		{"empty name", Profile{Keywords: kw}, ErrBadProfile},
		{"bad name", Profile{Name: "a/b", Keywords: kw}, ErrBadProfile},
		{"dot first", Profile{Name: ".x", Keywords: kw}, ErrBadProfile},
		{"long name", Profile{Name: strings.Repeat("a", 65), Keywords: kw}, ErrBadProfile},
		{"no keywords", Profile{Name: "b"}, ErrBadProfile},
		{"too many keywords", Profile{Name: "b", Keywords: []ProfileKeyword{{"aa", 1}, {"bb", 1}, {"cc", 1}, {"dd", 1}}}, ErrBadProfile},
		{"stop word", Profile{Name: "b", Keywords: []ProfileKeyword{{"the", 1}}}, ErrBadProfile},
		{"zero weight", Profile{Name: "b", Keywords: []ProfileKeyword{{"java", 0}}}, ErrBadProfile},
		{"nan weight", Profile{Name: "b", Keywords: []ProfileKeyword{{"java", math.NaN()}}}, ErrBadProfile},
		{"huge weight", Profile{Name: "b", Keywords: []ProfileKeyword{{"java", 1e9}}}, ErrBadProfile},
		{"threshold", Profile{Name: "b", Keywords: kw, Threshold: 1.5}, ErrBadProfile},
		{"nan threshold", Profile{Name: "b", Keywords: kw, Threshold: math.NaN()}, ErrBadProfile},
		{"second ok", Profile{Name: "bob", Keywords: kw}, nil},
		{"limit", Profile{Name: "carol", Keywords: kw}, ErrTooManyProfiles},
		{"update within limit", Profile{Name: "bob", Keywords: kw, Threshold: 0.5}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := x.PutProfile(t.Context(), tt.p)
			if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
		})
	}
	if ps, err := x.Profiles(t.Context()); err != nil || len(ps) != 2 {
		t.Fatalf("profiles %v, %v", ps, err)
	}
}

func TestProfileMatching(t *testing.T) {
	x := newTestIndex(t, nil)
	a := page("http://a.example/java", "Java research", t0, "java", 65535, "research", 32768, "ibm", 1000)
	b := page("http://b.example/xml", "XML parsers", t0, "xml", 65535, "parser", 40000)
	c := page("http://c.example/coffee", "Coffee", t0, "coffe", 65535, "java", 6554)
	mustPut(t, x, a, b, c)

	// URD of the paper: ibm 1, research 3, java 4, xmlp4j 5 ("xml" here).
	p, err := x.PutProfile(t.Context(), Profile{Name: "csyiaztl", Threshold: 0.02, Keywords: []ProfileKeyword{
		{"IBM", 1}, {"Research", 3}, {"Java", 4}, {"XML", 5},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Pending || p.Matches != 3 || len(p.Terms) != 4 || p.Terms[0] != (ProfileTerm{"ibm", 1}) {
		t.Fatalf("profile %+v", p)
	}
	rel := func(sum float64) float64 { return sum / 13 }
	q := func(w uint16) float64 { return float64(crawl.QuantiseWeight(w)) / 65535 } // as stored
	wantRel := map[string]float64{
		a.URL: rel(4*1 + 3*q(32768) + 1*q(1000)),
		b.URL: rel(5),
		c.URL: rel(4 * q(6554)),
	}
	check := func(wantOrder []string) {
		t.Helper()
		mp, err := x.Matches(t.Context(), "csyiaztl", 10, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range mp.Matches {
			got = append(got, m.URL)
			if w, ok := wantRel[m.URL]; ok && math.Abs(m.Relevance-w) > 1e-12 {
				t.Errorf("%s: relevance %v, want %v", m.URL, m.Relevance, w)
			}
		}
		if !slices.Equal(got, wantOrder) || mp.Total != int64(len(wantOrder)) {
			t.Fatalf("matches %v (total %d), want %v", got, mp.Total, wantOrder)
		}
		checkInvariants(t, x)
	}
	check([]string{a.URL, b.URL, c.URL})
	if mp, _ := x.Matches(t.Context(), "csyiaztl", 10, 0); !slices.Equal(mp.Matches[0].Terms, []string{"ibm", "java", "research"}) {
		t.Fatalf("terms %v", mp.Matches[0].Terms)
	}

	// Ingest after registration: a new matching page, a replaced one that
	// no longer matches, a removed one.
	d := page("http://d.example/", "IBM", t0, "ibm", 65535)
	b2 := page(b.URL, "Sewing", t0.Add(time.Hour), "sew", 65535)
	wantRel[d.URL] = rel(1)
	mustPut(t, x, d, b2, gone(c.URL, t0.Add(time.Hour)))
	check([]string{a.URL, d.URL})

	// A higher threshold drops the weak match on rebuild.
	if _, err := x.PutProfile(t.Context(), Profile{Name: "csyiaztl", Threshold: 0.2, Keywords: []ProfileKeyword{
		{"IBM", 1}, {"Research", 3}, {"Java", 4}, {"XML", 5},
	}}); err != nil {
		t.Fatal(err)
	}
	check([]string{a.URL})

	// Paging and bad requests.
	if mp, err := x.Matches(t.Context(), "csyiaztl", 1, 1); err != nil || len(mp.Matches) != 0 {
		t.Fatalf("page 2: %+v %v", mp, err)
	}
	if _, err := x.Matches(t.Context(), "nobody", 1, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown profile: %v", err)
	}
	if _, err := x.Matches(t.Context(), "csyiaztl", 1000, 0); !errors.Is(err, ErrBadQuery) {
		t.Fatalf("big limit: %v", err)
	}

	if err := x.DeleteProfile(t.Context(), "csyiaztl"); err != nil {
		t.Fatal(err)
	}
	if err := x.DeleteProfile(t.Context(), "csyiaztl"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if s := x.Stats(); s.Matches != 0 || s.Profiles != 0 {
		t.Fatalf("stats after delete %+v", s)
	}
	checkInvariants(t, x)
}

// TestProfileIngestEqualsBackfill: matching on ingest and back-filling
// through the postings give the same annotations.
func TestProfileIngestEqualsBackfill(t *testing.T) {
	recs := corpus(250, 11)
	prof := Profile{Name: "p", Threshold: 0.02, Keywords: []ProfileKeyword{{"wbx", 3}, {"wcx", 1}, {"wdx", 2}, {"wbax", 5}}}
	before := newTestIndex(t, nil)
	if _, err := before.PutProfile(t.Context(), prof); err != nil {
		t.Fatal(err)
	}
	mustPut(t, before, recs...)
	after := newTestIndex(t, nil)
	mustPut(t, after, recs...)
	if _, err := after.PutProfile(t.Context(), prof); err != nil {
		t.Fatal(err)
	}
	a, _ := before.Matches(t.Context(), "p", 100, 0)
	b, _ := after.Matches(t.Context(), "p", 100, 0)
	if a.Total == 0 || a.Total != b.Total || len(a.Matches) != len(b.Matches) {
		t.Fatalf("totals %d %d", a.Total, b.Total)
	}
	for i := range a.Matches {
		if a.Matches[i].URL != b.Matches[i].URL || a.Matches[i].Relevance != b.Matches[i].Relevance || !slices.Equal(a.Matches[i].Terms, b.Matches[i].Terms) {
			t.Fatalf("match %d: %+v vs %+v", i, a.Matches[i], b.Matches[i])
		}
	}
	checkInvariants(t, before)
	checkInvariants(t, after)
}
