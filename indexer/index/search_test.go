package index

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/micra-net/micra/crawl"
)

func TestParseQuery(t *testing.T) {
	tests := []struct {
		in        string
		terms, ex []string
		err       bool
	}{
		{in: "volcano", terms: []string{"volcano"}},
		{in: "  Running   DOGS  ", terms: []string{"dog", "run"}},
		{in: "the running of the bulls", terms: []string{"bull", "run"}},
		{in: "e-mail", terms: []string{"mail"}},
		{in: "cyprus -greece", terms: []string{"cyprus"}, ex: []string{"greec"}},
		{in: "+cyprus +cyprus cyprus", terms: []string{"cyprus"}},
		{in: "café Straße", terms: []string{"café", "straße"}},
		{in: "", err: true},
		{in: "   ", err: true},
		{in: "the of and", terms: []string{"=and", "=of", "=the"}}, // no word gives a stem: searched verbatim
		{in: "GET", terms: []string{"=get"}},
		{in: "-v", terms: []string{"=-v"}},
		{in: "all()", terms: []string{"=all"}},
		{in: `\d`, terms: []string{`=\d`}},
		{in: "the volcano", terms: []string{"volcano"}}, // verbatim only when no word gives a stem
		{in: "!!! ???", err: true},
		{in: "-cyprus", terms: []string{"cyprus"}},              // exclusions alone are searched for
		{in: "--add-location", terms: []string{"add", "locat"}}, // an option, not an exclusion
		{in: "x --verbose -quiet", terms: []string{"verbos"}, ex: []string{"quiet"}},
		{in: "cyprus -cyprus", err: true},
		{in: "2024 42", terms: []string{"=2024", "=42"}},
		{in: "a b c", terms: []string{"=a", "=b", "=c"}},
		{in: strings.Repeat("x", 2000), err: true},
		{in: "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			q, err := parseQuery(tt.in, 1024, 16)
			if tt.err {
				if !errors.Is(err, ErrBadQuery) {
					t.Fatalf("err = %v, want ErrBadQuery (got %+v)", err, q)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(q.Terms, tt.terms) || !reflect.DeepEqual(q.Excluded, tt.ex) {
				t.Fatalf("got %q / %q, want %q / %q", q.Terms, q.Excluded, tt.terms, tt.ex)
			}
		})
	}
}

// searchCorpus is a small corpus with known answers.
func searchCorpus(t *testing.T) *Index {
	x := newTestIndex(t, nil)
	mustPut(t, x, searchRecords()...)
	return x
}

func searchRecords() []crawl.Record {
	return []crawl.Record{
		page("http://a.example/1", "Cyprus volcanoes", t0, "cyprus", 65535, "volcano", 60000, "lava", 1000),
		page("http://b.example/2", "Greek islands", t0, "greec", 65535, "island", 50000, "cyprus", 20000),
		page("http://c.example/3", "Lava lamps", t0, "lava", 65535, "lamp", 65535),
		page("http://d.example/4", "Cooking", t0, "recip", 65535, "cyprus", 500, "halloumi", 40000),
	}
}

func TestSearch(t *testing.T) {
	x := searchCorpus(t)
	tests := []struct {
		q    Query
		want []string // urls in order
	}{
		{Query{Text: "cyprus"}, []string{"http://a.example/1", "http://b.example/2", "http://d.example/4"}},
		{Query{Text: "Cyprus VOLCANOES"}, []string{"http://a.example/1"}},
		{Query{Text: "cyprus lava"}, []string{"http://a.example/1"}},
		{Query{Text: "cyprus -volcano"}, []string{"http://b.example/2", "http://d.example/4"}},
		{Query{Text: "cyprus -nonexistent"}, []string{"http://a.example/1", "http://b.example/2", "http://d.example/4"}},
		{Query{Text: "lava lamp", Any: true}, []string{"http://c.example/3", "http://a.example/1"}},
		{Query{Text: "lava nonexistent"}, []string{"http://c.example/3", "http://a.example/1"}}, // partial: no page has both
		{Query{Text: "lava nonexistent", Any: true}, []string{"http://c.example/3", "http://a.example/1"}},
		{Query{Text: "halloumi island", Any: true}, []string{"http://b.example/2", "http://d.example/4"}},
		{Query{Text: "cyprus", Limit: 1, Offset: 1}, []string{"http://b.example/2"}},
		{Query{Text: "cyprus", Limit: 2, Offset: 5}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.q.Text, func(t *testing.T) {
			res, err := x.Search(t.Context(), tt.q)
			if err != nil {
				t.Fatal(err)
			}
			if got := urls(res); !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := 1; i < len(res.Hits); i++ {
				if res.Hits[i].Score > res.Hits[i-1].Score {
					t.Fatalf("hits not ordered by score: %+v", res.Hits)
				}
			}
		})
	}
	res, _ := x.Search(t.Context(), Query{Text: "cyprus", Limit: 1})
	if res.Total != 3 || res.Estimated || len(res.Hits) != 1 {
		t.Fatalf("total %d estimated %v hits %d", res.Total, res.Estimated, len(res.Hits))
	}
	h := res.Hits[0]
	// N=4, df(cyprus)=3, weight 65535, title contains Cyprus: boost 1.5.
	want := math.Log(1+(4-3+0.5)/(3+0.5)) * 1.5
	if math.Abs(h.Score-want) > 1e-12 || h.Title != "Cyprus volcanoes" || len(h.Keywords) != 3 || h.Keywords[0].Term != "cyprus" {
		t.Fatalf("hit %+v, want score %v", h, want)
	}
}

func TestSearchBadRequests(t *testing.T) {
	x := searchCorpus(t)
	for _, q := range []Query{
		{Text: ""}, {Text: "!!!"}, {Text: "x", Limit: -1}, {Text: "cyprus", Limit: 101},
		{Text: "cyprus", Offset: -1}, {Text: "cyprus", Offset: 995, Limit: 10},
	} {
		if _, err := x.Search(t.Context(), q); !errors.Is(err, ErrBadQuery) {
			t.Errorf("%+v: err = %v", q, err)
		}
	}
}

func TestSearchScanBudget(t *testing.T) {
	x := newTestIndex(t, nil, MaxScan(1000))
	var recs = make([]crawlRecord, 0, 1500)
	for i := range 1500 {
		recs = append(recs, page("http://s.example/"+itoa(i), "", t0, "common", 65535, "widget", 100))
	}
	mustPut(t, x, recs...)
	for _, any := range []bool{false, true} {
		res, err := x.Search(t.Context(), Query{Text: "common widget", Any: any})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Estimated || res.Total < 750 || res.Total > 3000 || len(res.Hits) != 10 {
			t.Fatalf("any=%v: estimated %v total %d hits %d", any, res.Estimated, res.Total, len(res.Hits))
		}
	}
	x2 := newTestIndex(t, nil)
	mustPut(t, x2, recs...)
	res, _ := x2.Search(t.Context(), Query{Text: "common widget"})
	if res.Estimated || res.Total != 1500 {
		t.Fatalf("unbounded: estimated %v total %d", res.Estimated, res.Total)
	}
}

func TestSearchCancelled(t *testing.T) {
	x := searchCorpus(t)
	ctx, cancel := contextWithCancel(t)
	cancel()
	if _, err := x.Search(ctx, Query{Text: "cyprus"}); err == nil {
		t.Fatal("cancelled search succeeded")
	}
}

// TestDistrust: pages whose version a distrusted node delivered leave
// search (and its totals) but stay stored and marked; a trusted node's
// newer record of such a page brings it back.
func TestDistrust(t *testing.T) {
	x := newTestIndex(t, nil)
	honest, liar := Source{Node: "honest", Seq: 1}, Source{Node: "liar", Seq: 1}
	if _, err := x.Put(t.Context(), honest, []crawl.Record{page("http://a.example/1", "Cyprus volcanoes", t0, "cyprus", 65535)}); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Put(t.Context(), liar, []crawl.Record{
		page("http://b.example/2", "Cyprus casino", t0, "cyprus", 65535, "casino", 65535),
		page("http://c.example/3", "Cyprus pills", t0, "cyprus", 60000),
	}); err != nil {
		t.Fatal(err)
	}
	search := func(q string) (*Results, []string) {
		res, err := x.Search(t.Context(), Query{Text: q})
		if err != nil {
			t.Fatal(err)
		}
		return res, urls(res)
	}
	if _, got := search("cyprus"); len(got) != 3 {
		t.Fatalf("before: %v", got)
	}
	hosts, err := x.HostsOf(t.Context(), "liar", 10)
	slices.Sort(hosts)
	if err != nil || !slices.Equal(hosts, []string{"b.example", "c.example"}) {
		t.Fatalf("HostsOf(liar) = %v, %v", hosts, err)
	}
	x.Distrust("liar")
	if res, got := search("cyprus"); !slices.Equal(got, []string{"http://a.example/1"}) || res.Total != 1 {
		t.Fatalf("liar distrusted: %v, total %d", got, res.Total)
	}
	if _, got := search("casino"); len(got) != 0 {
		t.Fatalf("a page only the liar delivered: %v", got)
	}
	d, err := x.Get(t.Context(), "http://b.example/2")
	if err != nil || !d.Distrusted || d.Provenance.Node != "liar" {
		t.Fatalf("Get of a distrusted page: %+v, %v", d, err)
	}
	var exp strings.Builder
	if n, err := x.Export(t.Context(), &exp); err != nil || n != 3 || strings.Count(exp.String(), `"distrusted":true`) != 2 {
		t.Fatalf("export: %d, %v:\n%s", n, err, exp.String())
	}
	// A trusted node recrawls one of the liar's pages.
	if _, err := x.Put(t.Context(), Source{Node: "honest", Seq: 2}, []crawl.Record{page("http://c.example/3", "Cyprus pharmacy", t0.Add(time.Hour), "cyprus", 50000)}); err != nil {
		t.Fatal(err)
	}
	if _, got := search("cyprus"); !slices.Equal(got, []string{"http://a.example/1", "http://c.example/3"}) {
		t.Fatalf("after the recrawl: %v", got)
	}
	x.Distrust()
	if _, got := search("cyprus"); len(got) != 3 {
		t.Fatalf("trusted again: %v", got)
	}
}
