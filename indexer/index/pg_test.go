package index

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/micra-net/micra/crawl"
)

// TestPostgresAgreesWithBruteForce is the property test of the embedded
// store run on the PostgreSQL store: random deliveries (duplicates, stale
// and gone records, content ties, anchors) and profiles, every search and
// profile listing compared with a scan of the model, Verify after each
// round.
func TestPostgresAgreesWithBruteForce(t *testing.T) {
	for seed := range uint64(2) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			storeAgreesWithBruteForce(t, seed, newTestPostgres(t, PostgresOptions{}))
		})
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
		"widget manual", "frobnicate", "garlic -soup", "nosuchword " + vocab[3], vocab[0] + " " + vocab[7] + " " + vocab[40]}
	for i := range 40 {
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
