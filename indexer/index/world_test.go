package index

import (
	"bytes"
	"context"
	"log/slog"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/internal/world/worldtest"
)

// indexSink stores every batch the crawler publishes in indexes, as an
// indexer does, and remembers the URLs.
type indexSink struct {
	xs   []*Index
	mu   sync.Mutex
	urls map[string]bool
	seq  uint64
	err  error
}

func (s *indexSink) Results(ctx context.Context, b crawl.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	for _, x := range s.xs {
		res, err := x.PutBatch(ctx, Source{Node: "world-node", Seq: s.seq}, b.Data)
		if err == nil && res.Rejected > 0 {
			err = res.Errors[0]
		}
		if err != nil && s.err == nil {
			s.err = err
		}
	}
	recs, err := crawl.DecodeBatch(b.Data)
	if err != nil {
		return err
	}
	for _, r := range recs {
		s.urls[r.URL] = true
	}
	return nil
}

// TestStructuredWorld crawls an emulated Internet whose sites publish
// schema.org data in JSON-LD or microdata (world.Params.Structured: 30 %
// of them, one type each, one page in ten broken), stores the batches in
// an index as an indexer does, and checks typed search end to end: for
// every type, type:TYPE finds exactly the pages whose stored statements
// have an item of that type; no HTML page of a site without structured
// data is ever found (feeds are: rss:channel, rss:item); every page of a structured site that served a typed item is
// found by type:<the site's type>, most of them (the broken ones aside);
// a typed query with a word finds the page the word and type select; the
// N-Triples export of it all parses. It logs the index's size with and
// without the statements.
func TestStructuredWorld(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("crawls an emulated Internet: -short and -race skip it (the plain run has it; the index's races are concurrency_test.go's)")
	}
	run := worldtest.Start(t, worldtest.Params(29, 40, 2), world.TimeScale(0))
	w := run.World()
	sites := map[string]world.Site{}
	structured := 0
	for _, s := range w.Sites() {
		sites[s.Name] = s
		if s.SchemaType != "" && s.Hostile == world.NotHostile {
			structured++
		}
	}
	if structured < 3 {
		t.Fatalf("only %d structured sites in the world", structured)
	}
	node := w.Nodes()[0].Addr
	resolver, err := run.Resolver(node)
	if err != nil {
		t.Fatal(err)
	}
	x := newTestIndex(t, nil, Clock(time.Now))
	bare := newTestIndex(t, nil, Clock(time.Now), MaxStatements(0))
	sink := &indexSink{xs: []*Index{x, bare}, urls: map[string]bool{}}
	cdb := openMemDB(t)
	c, err := crawl.New(cdb, sink, crawl.SourceAddr(node), crawl.DNS(resolver), crawl.AllowPrivateNetworks(uint16(run.Port())),
		crawl.Politeness(0, 0), crawl.MaxDepth(1), crawl.Workers(8, 2, 16), crawl.Batching(16<<10, 50*time.Millisecond),
		crawl.Logger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var seeds []crawl.Request
	for _, s := range w.Sites() {
		if s.Hostile == world.NotHostile && !s.Flaky {
			seeds = append(seeds, crawl.Request{Link: run.URL(s), Depth: 1})
		}
	}
	if err := c.Submit(t.Context(), seeds...); err != nil {
		t.Fatal(err)
	}
	idle := 0
	for range 1200 { // 2 min: a bound, not a timing assertion
		time.Sleep(100 * time.Millisecond)
		if st := c.Stats(); st.HostsReady == 0 && st.InFlight == 0 && st.Fetched > 0 {
			idle++
		} else {
			idle = 0
		}
		if idle == 10 {
			break
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.err != nil {
		t.Fatalf("storing batches: %v", sink.err)
	}
	if err := x.Verify(t.Context()); err != nil {
		t.Fatal(err)
	}

	// What each stored page holds: its types, from its stored statements.
	byType := map[string][]string{} // type IRI → URLs
	var typedPages, untyped, structuredHTML, siteTyped int
	for u := range sink.urls {
		d, err := x.Get(t.Context(), u)
		if err != nil {
			continue // gone, or a redirect's other URL
		}
		pu, _ := url.Parse(u)
		site := sites[pu.Hostname()]
		types := pageTypes(d.Statements, 1000)
		for _, ty := range types {
			byType[ty] = append(byType[ty], u)
		}
		if len(types) > 0 {
			typedPages++
		} else {
			untyped++
		}
		if site.SchemaType == "" && len(types) > 0 && d.Type == crawl.TypeHTML {
			// (Feeds are typed: rss:channel, rss:item.)
			t.Errorf("%s: types %q on a site without structured data", u, types)
		}
		if site.SchemaType != "" && d.Type == crawl.TypeHTML {
			structuredHTML++
			if slices.Contains(types, crawl.SchemaOrg+site.SchemaType) {
				siteTyped++
			}
		}
	}
	t.Logf("%d pages stored: %d with typed items (%d types), %d without; %d HTML pages of structured sites, %d of them typed as their site",
		len(sink.urls), typedPages, len(byType), untyped, structuredHTML, siteTyped)
	if typedPages == 0 || untyped == 0 || structuredHTML == 0 || siteTyped < structuredHTML*7/10 {
		t.Fatalf("the crawl did not give a mix of typed and untyped pages")
	}
	for _, ty := range world.SchemaTypes {
		if _, ok := byType[crawl.SchemaOrg+ty]; !ok {
			byType[crawl.SchemaOrg+ty] = nil // a type no page has: found nowhere
		}
	}
	for ty, want := range byType {
		slices.Sort(want)
		for _, q := range []string{"type:" + ShortName(ty), "type:<" + ty + ">"} {
			got := searchAll(t, x, q)
			if !slices.Equal(got, want) {
				t.Errorf("%s: found %d pages, want %d:\n got %q\nwant %q", q, len(got), len(want), got, want)
			}
		}
		if got := searchAll(t, bare, "type:"+ShortName(ty)); len(got) != 0 {
			t.Errorf("index without statements: type:%s found %d pages", ShortName(ty), len(got))
		}
	}

	// Words and types together: a typed page's heaviest keyword and its
	// type find it, and every hit has the type.
	checked := 0
	for ty, us := range byType {
		if len(us) == 0 || checked == 5 {
			continue
		}
		d, err := x.Get(t.Context(), us[0])
		if err != nil || len(d.Keywords) == 0 {
			continue
		}
		q := "type:" + ShortName(ty) + " " + d.Keywords[0].Term
		res, err := x.Search(t.Context(), Query{Text: q, Limit: 100})
		if err != nil {
			t.Fatalf("%q: %v", q, err)
		}
		if !slices.Contains(urls(res), us[0]) && res.Total <= 100 {
			t.Errorf("%q does not find %s", q, us[0])
		}
		for _, h := range res.Hits {
			if !slices.Contains(h.Types, ty) {
				t.Errorf("%q: hit %s has types %q", q, h.URL, h.Types)
			}
		}
		checked++
	}

	var nt bytes.Buffer
	st, err := x.ExportNTriples(t.Context(), &nt)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pages != typedPages && st.Pages < typedPages || st.Skipped != 0 {
		t.Errorf("export: %+v for %d typed pages", st, typedPages)
	}
	rapperCount(t, nt.String(), st.Triples)

	with, without := indexBytes(t, x.db), indexBytes(t, bare.db)
	sx, sb := x.Stats(), bare.Stats()
	t.Logf("index size (keys and values under %s): %d bytes with statements, %d without (+%.0f %%); records %d and %d, postings %d and %d (%d and %d), document frequencies %d and %d (%d and %d terms); %d triples exported from %d pages",
		KeyPrefix, with[""], without[""], 100*float64(with[""]-without[""])/float64(without[""]),
		with["r/"], without["r/"], with["p/"], without["p/"], sx.Postings, sb.Postings, with["t/"], without["t/"], sx.Terms, sb.Terms, st.Triples, st.Pages)
}

// indexBytes sums the sizes of the index's keys and values: all of them
// (""), and by kind ("r/", "p/", "t/": records, postings, document
// frequencies).
func indexBytes(t testing.TB, db *badger.DB) map[string]int64 {
	t.Helper()
	n := map[string]int64{}
	err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(KeyPrefix)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			size := int64(len(k)) + it.Item().ValueSize()
			n[""] += size
			for _, p := range [][]byte{prefixRecord, prefixPosting, prefixDF} {
				if bytes.HasPrefix(k, p) {
					n[string(p[len(KeyPrefix):])] += size
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
