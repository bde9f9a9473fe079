package index

import (
	"errors"
	"slices"
	"testing"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/internal/pgserver/pgtest"
)

func TestVerbatims(t *testing.T) {
	tests := []struct {
		text string
		k    int
		want []string
	}{
		{"The if tag", 16, []string{"=the", "=if"}}, // "tag" gives a stem
		{"HttpRequest.GET", 16, []string{"=get"}},   // a part of a name
		{"-v, --verbose", 16, []string{"=-v"}},
		{`\d and \D`, 16, []string{`=\d`, "=and"}},
		{"all() and any()", 16, []string{"=all", "=and", "=any"}},
		{"Python 3.11 on MONDAY", 16, []string{"=3.11", "=on", "=monday"}}, // a word no part of which gives a term is kept whole
		{"— … !!", 16, nil},                                                // no letter or digit
		{"a b c d e", 3, []string{"=a", "=b", "=c"}},                       // at most k
		{"a A a", 16, []string{"=a"}},
		{"widget configuration", 16, nil},
	}
	for _, tt := range tests {
		if got := verbatims(tt.text, tt.k); !slices.Equal(got, tt.want) {
			t.Errorf("verbatims(%q) = %q, want %q", tt.text, got, tt.want)
		}
		for _, v := range verbatims(tt.text, tt.k) {
			if !validVerbatim(v) || validTerm(v) || isHidden(v) {
				t.Errorf("%q: %q is not a verbatim term apart from stems and hidden terms", tt.text, v)
			}
		}
	}
}

// verbatimPages are pages whose names are words the crawler drops: a
// template tag, an HTTP method, a command's option, named in titles and
// in other pages' anchors.
func verbatimPages() []crawl.Record {
	p := func(url, title string, links []crawl.Link, kws ...any) crawl.Record {
		r := page(url, title, t0, kws...)
		r.Links = links
		return r
	}
	return []crawl.Record{
		p("http://docs.example/tags", "Built-in tags", []crawl.Link{
			{URL: "http://docs.example/request", Anchor: "HttpRequest.GET"},
			{URL: "http://docs.example/tags", Anchor: "the for tag"}, // its own: describes nothing
			{URL: "http://docs.example/admin", Anchor: "-v"},
		}, "templat", 65535, "tag", 50000),
		p("http://docs.example/request", "Request and response objects", nil, "request", 65535, "respons", 50000),
		p("http://docs.example/admin", "django-admin and manage.py", []crawl.Link{
			{URL: "http://docs.example/tags", Anchor: "if"},
		}, "admin", 65535, "command", 50000),
		p("http://docs.example/if", "The if tag", nil, "condit", 65535),
	}
}

// TestSearchVerbatim runs queries of words the crawler drops on both
// stores: titles and other pages' anchors find them, a page's anchors to
// itself do not.
func TestSearchVerbatim(t *testing.T) {
	stores := map[string]Store{"embedded": newTestIndex(t, nil), "postgres": newTestPostgres(t, PostgresOptions{})}
	for name, x := range stores {
		t.Run(name, func(t *testing.T) {
			mustPut(t, x, verbatimPages()...)
			for _, tt := range []struct {
				q    string
				want []string
			}{
				{"GET", []string{"http://docs.example/request"}},
				{"-v", []string{"http://docs.example/admin"}},
				{"if", []string{"http://docs.example/if", "http://docs.example/tags"}}, // title first, then the anchor
				{"for", nil},
				{"the if", []string{"http://docs.example/if"}},
			} {
				res, err := x.Search(t.Context(), Query{Text: tt.q})
				if err != nil {
					t.Fatalf("%q: %v", tt.q, err)
				}
				if got := urls(res); !slices.Equal(got, tt.want) {
					t.Errorf("%q: %v, want %v", tt.q, got, tt.want)
				}
				if len(res.Hits) > 0 && len(res.Hits[0].Matched) == 0 {
					t.Errorf("%q: the hit has none of the words: %+v", tt.q, res.Hits[0])
				}
			}
			if err := x.Verify(t.Context()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPostgresMigratesVerbatims strips a database of its verbatim terms,
// as the previous micra wrote it (schema 1), and opens it: the migration
// adds them back, and the store answers as an embedded index of the same
// records does.
func TestPostgresMigratesVerbatims(t *testing.T) {
	ctx := t.Context()
	recs := append(linkedPages(), verbatimPages()...)
	dsn := pgtest.DSN(t)
	w := openTestPostgres(t, dsn, PostgresOptions{})
	mustPut(t, w, recs...)
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	rows, err := tx.Query(ctx, `SELECT id, postings FROM micra.pages WHERE NOT gone`)
	if err != nil {
		t.Fatal(err)
	}
	own := map[int64][]posting{}
	for rows.Next() {
		var id int64
		var b []byte
		if err := rows.Scan(&id, &b); err != nil {
			t.Fatal(err)
		}
		ps, err := decodePostings(b)
		if err != nil {
			t.Fatal(err)
		}
		own[id] = slices.DeleteFunc(ps, func(p posting) bool { return isVerbatim(p.Term) })
	}
	rows.Close()
	for id, ps := range own {
		if _, err := tx.Exec(ctx, `UPDATE micra.pages SET postings = $2 WHERE id = $1`, id, encodePostings(ps)); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{
		`UPDATE micra.counts SET postings = postings - (SELECT count(*) FROM micra.postings WHERE term LIKE '=%'),
			terms = terms - (SELECT count(*) FROM micra.terms WHERE term LIKE '=%')`,
		`DELETE FROM micra.postings WHERE term LIKE '=%'`,
		`DELETE FROM micra.terms WHERE term LIKE '=%'`,
		`DELETE FROM micra.anchors WHERE term LIKE '=%'`,
		`UPDATE micra.schema SET version = 1`,
	} {
		tag, err := tx.Exec(ctx, q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if tag.RowsAffected() == 0 {
			t.Fatalf("%s: changed nothing", q)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if _, err := OpenPostgres(ctx, dsn, PostgresOptions{ReadOnly: true}, Logger(quietLogger())); !errors.Is(err, ErrSchema) {
		t.Fatalf("a read-only store on schema 1: %v", err)
	}
	defer func(n int) { pgMigrateBatch = n }(pgMigrateBatch)
	pgMigrateBatch = 3 // pages linking to pages of other batches
	p := openTestPostgres(t, dsn, PostgresOptions{})
	if err := p.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	x := newTestIndex(t, nil)
	mustPut(t, x, recs...)
	compareStores(t, x, p, recs)
	if res, err := p.Search(ctx, Query{Text: "GET"}); err != nil || !slices.Equal(urls(res), []string{"http://docs.example/request"}) {
		t.Fatalf("GET after the migration: %+v %v", res, err)
	}
}
