package index

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/internal/pgserver"
	"github.com/micra-net/micra/internal/pgserver/pgtest"
)

// TestPostgresAgreesWithBruteForce is the property test of the embedded
// store run on the PostgreSQL store: random deliveries (duplicates, stale
// and gone records, content ties, anchors) and profiles, every search and
// profile listing compared with a scan of the model, Verify after each
// round.
//
// With impact lists from a document frequency of 3 on, queries of one
// or two words run on impact order (pg_threshold.go).
func TestPostgresAgreesWithBruteForce(t *testing.T) {
	seeds := uint64(3)
	if raceEnabled {
		seeds = 1 // the race detector's slowdown; the plain run has them all
	}
	for _, impactMin := range []int{defaultImpactMin, 3} {
		for seed := range seeds {
			t.Run(fmt.Sprint("impact", impactMin, "/seed", seed), func(t *testing.T) {
				p := newTestPostgres(t, PostgresOptions{}, withImpactMin(impactMin))
				storeAgreesWithBruteForce(t, seed, p)
				if st := p.Stats(); impactMin == 3 && st.ImpactQueries-st.ImpactFallbacks < 50 {
					t.Fatalf("%d queries ran on impact order, %d of them fell back: too few to test it", st.ImpactQueries, st.ImpactFallbacks)
				}
			})
		}
	}
}

// TestPostgresEstimatesTotals: a query that runs on impact order and
// whose driving list is longer than the count budget counts a share of
// the key space; the estimate is within a fifth of the exact count, and
// says it is one. The hits are the exact ones.
func TestPostgresEstimatesTotals(t *testing.T) {
	recs := corpus(3000, 8)
	exact := newTestPostgres(t, PostgresOptions{})
	est := newTestPostgres(t, PostgresOptions{}, withImpactMin(50), withPGCount(300))
	mustPut(t, exact, recs...)
	mustPut(t, est, recs...)
	vocab := vocabulary(300)
	for _, s := range []Store{exact, est} {
		s.Distrust("12D3KooWNobody") // a distrusted node that delivered nothing: the count must check
	}
	for _, q := range []Query{{Text: vocab[0] + " -" + vocab[5]}, {Text: vocab[1]}} {
		want, err := exact.Search(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		got, err := est.Search(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(urls(got), urls(want)) {
			t.Fatalf("%+v: hits %v, exact %v", q, urls(got), urls(want))
		}
		if want.Estimated || !got.Estimated || math.Abs(float64(got.Total-want.Total)) > float64(want.Total)/5 {
			t.Fatalf("%+v: total %d (estimated %v), exact %d (%v)", q, got.Total, got.Estimated, want.Total, want.Estimated)
		}
	}
}

// TestStoresAgree stores the same records, delivered in different orders
// and partly twice, in both stores, and compares everything a caller
// sees: searches (words, any word, exclusions, statement conditions,
// partial matches, paging), records and tombstones, counters, both
// exports, the hosts of a node, and all of it again with a node
// distrusted.
func TestStoresAgree(t *testing.T) {
	recs := append(corpus(300, 5), linkedPages()...)
	recs = append(recs, structuredPages(t0.Add(time.Hour))...)
	recs = append(recs, gone("http://s3.example/p7", t0.Add(2*time.Hour)), gone("http://never.example/", t0))
	x := newTestIndex(t, nil)
	p := newTestPostgres(t, PostgresOptions{})
	rng := rand.New(rand.NewPCG(1, 2))
	other := Source{Node: "12D3KooWOther", Seq: 9}
	for i, s := range []Store{x, p} {
		order := slices.Clone(recs)
		if i == 1 {
			rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		}
		// A third of the pages come from another node: provenance is the
		// delivering node's, so each record has one.
		var lists [2][]crawl.Record
		for _, r := range order {
			j := 0
			if xxhash.Sum64String(r.URL)%3 == 0 {
				j = 1
			}
			lists[j] = append(lists[j], r)
		}
		for len(lists[0])+len(lists[1]) > 0 { // batches of 1 to 60, every fifth record twice
			j := rng.IntN(2)
			if len(lists[j]) == 0 {
				j = 1 - j
			}
			n := min(len(lists[j]), 1+rng.IntN(60))
			b := slices.Clone(lists[j][:n])
			for k := 0; k < len(b); k += 5 {
				b = append(b, b[k])
			}
			from := []Source{src, other}[j]
			if _, err := s.Put(t.Context(), from, b); err != nil {
				t.Fatal(err)
			}
			lists[j] = lists[j][n:]
		}
		if err := s.Verify(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	compareStores(t, x, p, recs)
	x.Distrust(other.Node)
	p.Distrust(other.Node)
	compareStores(t, x, p, recs)
}

func compareStores(t *testing.T, x, p Store, recs []crawl.Record) {
	t.Helper()
	ctx := t.Context()
	sx, sp := x.Stats(), p.Stats()
	sx.LastIngest, sp.LastIngest = time.Time{}, time.Time{} // delivery order differs
	sx.Added, sx.Replaced, sx.Duplicates, sx.Stale = 0, 0, 0, 0
	sp.Added, sp.Replaced, sp.Duplicates, sp.Stale = 0, 0, 0, 0
	if sx != sp {
		t.Errorf("stats:\nembedded %+v\npostgres %+v", sx, sp)
	}
	vocab := vocabulary(300)
	queries := []string{"garlic", "type:Recipe", "type:Recipe garlic", "author=alice", "author=\"alice smith\"",
		"widget manual", "frobnicate", "garlic -soup", "the", "GET", "-v", "if the", "nosuchword " + vocab[3], vocab[0] + " " + vocab[7] + " " + vocab[40]}
	pairs := 40
	if raceEnabled {
		pairs = 8 // the race detector's slowdown; the plain run has them all
	}
	for i := range pairs {
		queries = append(queries, vocab[i*7%300]+" "+vocab[(i*13+5)%300], vocab[i]+" "+vocab[i+50]+" "+vocab[i+120]+" -"+vocab[i+1])
	}
	for _, text := range queries {
		for _, q := range []Query{{Text: text}, {Text: text, Any: true}, {Text: text, Limit: 7, Offset: 3}} {
			rx, errx := x.Search(ctx, q)
			rp, errp := p.Search(ctx, q)
			if (errx == nil) != (errp == nil) {
				t.Fatalf("%+v: errors %v and %v", q, errx, errp)
			}
			if errx != nil {
				continue
			}
			if !reflect.DeepEqual(rx, rp) {
				t.Fatalf("%+v:\nembedded %+v\npostgres %+v", q, rx, rp)
			}
		}
	}
	for _, r := range recs {
		dx, errx := x.Get(ctx, r.URL)
		dp, errp := p.Get(ctx, r.URL)
		if fmt.Sprint(errx) != fmt.Sprint(errp) || !reflect.DeepEqual(ToJSON(&dx), ToJSON(&dp)) {
			t.Fatalf("Get %s:\nembedded %v %+v\npostgres %v %+v", r.URL, errx, dx, errp, dp)
		}
	}
	for _, f := range []func(Store, io.Writer) error{
		func(s Store, w io.Writer) error { _, err := s.Export(ctx, w); return err },
		func(s Store, w io.Writer) error { _, err := s.ExportNTriples(ctx, w); return err },
	} {
		var bx, bp bytes.Buffer
		if err := f(x, &bx); err != nil {
			t.Fatal(err)
		}
		if err := f(p, &bp); err != nil {
			t.Fatal(err)
		}
		if bx.String() != bp.String() {
			t.Fatalf("exports differ:\nembedded %.2000s\npostgres %.2000s", bx.String(), bp.String())
		}
	}
	for _, node := range []string{src.Node, "12D3KooWOther", "nobody"} {
		hx, _ := x.HostsOf(ctx, node, 1000)
		hp, _ := p.HostsOf(ctx, node, 1000)
		slices.Sort(hx)
		slices.Sort(hp)
		if !slices.Equal(hx, hp) {
			t.Fatalf("hosts of %s: %v and %v", node, hx, hp)
		}
	}
}

// TestPostgresReadOnlyAndSchema opens a second, read-only store on a
// database a writer made: it sees the writer's records and refuses
// writes. A schema newer than this micra's, or a read-only store on an
// empty database, is refused at start with ErrSchema.
func TestPostgresReadOnlyAndSchema(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := t.Context()
	if _, err := OpenPostgres(ctx, dsn, PostgresOptions{ReadOnly: true}, Logger(quietLogger())); !errors.Is(err, ErrSchema) {
		t.Fatalf("read-only store on an empty database: %v", err)
	}
	w := openTestPostgres(t, dsn, PostgresOptions{})
	mustPut(t, w, linkedPages()...)
	r := openTestPostgres(t, dsn, PostgresOptions{ReadOnly: true})
	if res, err := r.Search(ctx, Query{Text: "widget"}); err != nil || res.Total == 0 {
		t.Fatalf("read-only search: %+v %v", res, err)
	}
	if _, err := r.Put(ctx, src, linkedPages()); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("read-only Put: %v", err)
	}
	if _, err := r.PutProfile(ctx, Profile{Name: "p", Keywords: []ProfileKeyword{{"widget", 1}}}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("read-only PutProfile: %v", err)
	}
	if _, err := w.pool.Exec(ctx, `UPDATE micra.schema SET version = 99`); err != nil {
		t.Fatal(err)
	}
	_, err := OpenPostgres(ctx, dsn, PostgresOptions{}, Logger(quietLogger()))
	if !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "99") {
		t.Fatalf("newer schema: %v", err)
	}
}

// TestPostgresServerDown: a store whose server is down fails at start
// with an error naming the server; one whose server goes down while it
// runs fails each Put, storing nothing, serves its last counters, and
// works again, losing nothing, once the server is back.
func TestPostgresServerDown(t *testing.T) {
	srv := pgtest.Private(t, pgserver.Options{})
	ctx := t.Context()
	if err := srv.CreateDB(ctx, "down"); err != nil {
		t.Fatal(err)
	}
	p := openTestPostgres(t, srv.DSN("down"), PostgresOptions{})
	recs := corpus(60, 3)
	mustPut(t, p, recs[:20]...)
	if err := srv.Halt(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Put(ctx, src, recs[20:40]); err == nil {
		t.Fatal("Put with the server down: nil error")
	}
	if _, err := p.Search(ctx, Query{Text: "wbx"}); err == nil {
		t.Fatal("Search with the server down: nil error")
	}
	if _, err := p.readStats(ctx); err == nil {
		t.Fatal("reading the counters with the server down: nil error")
	}
	if s := p.Stats(); s.Docs != 20 {
		t.Fatalf("stats with the server down: %+v", s)
	}
	_, err := OpenPostgres(ctx, srv.DSN("down"), PostgresOptions{}, Logger(quietLogger()))
	if err == nil || !strings.Contains(err.Error(), "cannot connect") || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("opening with the server down: %v", err)
	}
	if err := srv.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	mustPut(t, p, recs[20:]...) // the failed batch again, and more
	if s := p.Stats(); s.Docs != 60 || s.Added != 60 {
		t.Fatalf("after the server came back: %+v", s)
	}
	if err := p.Verify(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPostgresVerifyDetectsDamage: Verify finds each kind of damage an
// operator's SQL could do to the tables.
func TestPostgresVerifyDetectsDamage(t *testing.T) {
	for _, damage := range []string{
		`DELETE FROM micra.postings WHERE ctid = (SELECT min(ctid) FROM micra.postings)`,
		`UPDATE micra.postings SET impact = impact + 1 WHERE ctid = (SELECT min(ctid) FROM micra.postings)`,
		`UPDATE micra.terms SET df = df + 1 WHERE ctid = (SELECT min(ctid) FROM micra.terms)`,
		`UPDATE micra.counts SET docs = docs + 1`,
		`UPDATE micra.profiles SET matches = matches + 1`,
		`DELETE FROM micra.matches WHERE ctid = (SELECT min(ctid) FROM micra.matches)`,
		`UPDATE micra.anchors SET n = n + 5 WHERE (page, term) = (SELECT a.page, a.term FROM micra.anchors a JOIN micra.pages g ON g.id = a.page AND NOT g.gone LIMIT 1)`,
	} {
		p := newTestPostgres(t, PostgresOptions{})
		mustPut(t, p, linkedPages()...)
		if _, err := p.PutProfile(t.Context(), Profile{Name: "p", Keywords: []ProfileKeyword{{"widget", 1}}}); err != nil {
			t.Fatal(err)
		}
		if err := p.Verify(t.Context()); err != nil {
			t.Fatalf("before %q: %v", damage, err)
		}
		if _, err := p.pool.Exec(t.Context(), damage); err != nil {
			t.Fatal(err)
		}
		if err := p.Verify(t.Context()); err == nil {
			t.Errorf("%q: Verify found nothing", damage)
		}
	}
}
