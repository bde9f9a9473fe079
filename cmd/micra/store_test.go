package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/indexer/index"
	"github.com/micra-net/micra/internal/pgserver/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestIndexersOnOnePostgres runs three `micra indexer` processes' worth of
// commands on one PostgreSQL database: two taking a shard each, a third
// --read-only. Records one of them stores (put here through the store,
// as its batches would be) are found through every one's search API. An
// unreachable database fails the command at start, naming it.
func TestIndexersOnOnePostgres(t *testing.T) {
	t.Setenv("MICRA_BOOTSTRAP", "")
	dsn := pgtest.DSN(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var apis []string
	for i, extra := range [][]string{{"--take", "0"}, {"--take", "1"}, {"--read-only"}} {
		out := &syncBuffer{}
		args := append([]string{"indexer", "--data-dir", t.TempDir(), "--listen", "/ip4/127.0.0.1/tcp/0", "--http", "127.0.0.1:0",
			"--shards", "2", "--store", dsn}, extra...)
		wg.Go(func() {
			if code := run(ctx, args, out, out); code != 0 {
				t.Errorf("indexer %d: exit %d:\n%s", i, code, out.String())
			}
		})
		re := regexp.MustCompile(`search on (http://\S+)/`)
		for range 600 {
			if m := re.FindStringSubmatch(out.String()); m != nil {
				apis = append(apis, m[1])
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if len(apis) != i+1 {
			t.Fatalf("indexer %d did not start:\n%s", i, out.String())
		}
	}
	p, err := index.OpenPostgres(t.Context(), dsn, index.PostgresOptions{}, index.Logger(quietLog()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	at := time.Now().Add(-time.Hour)
	var recs []crawl.Record
	for i := range 3 {
		u := fmt.Sprintf("http://harbour.example/%d", i)
		recs = append(recs, crawl.Record{URL: u, FinalURL: u, Time: at, Status: 200, Type: crawl.TypeHTML, Title: "Ferries",
			Change: crawl.ChangeNew, Keywords: []crawl.Keyword{{Term: "ferri", Weight: 65535}}})
	}
	if _, err := p.Put(t.Context(), index.Source{Node: "12D3KooWTest", Seq: 1}, recs); err != nil {
		t.Fatal(err)
	}
	for i, api := range apis {
		resp, err := http.Get(api + "/api/search?q=ferries")
		if err != nil {
			t.Fatal(err)
		}
		var res struct{ Total int }
		err = json.NewDecoder(resp.Body).Decode(&res)
		resp.Body.Close()
		if err != nil || res.Total != 3 {
			t.Fatalf("indexer %d: %d results (%v), want the 3 pages stored", i, res.Total, err)
		}
	}
	code, _, errs := runCmd(t, "indexer", "--data-dir", t.TempDir(), "--listen", "/ip4/127.0.0.1/tcp/0", "--http", "127.0.0.1:0",
		"--store", "postgres://micra@127.0.0.1:1/micra?connect_timeout=5")
	if code != 1 || !strings.Contains(errs, "cannot connect") || !strings.Contains(errs, "127.0.0.1:1/micra") {
		t.Fatalf("unreachable database: exit %d: %s", code, errs)
	}
}
