package searcheval

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/micra-net/micra/indexer/index"
	"github.com/micra-net/micra/internal/pgserver"
)

// The PostgreSQL store beside the embedded one, on the same records: the
// crawl's batches stored again into each, timed, and the same queries.

// StoreFigures compares the two stores of micra's index on one corpus.
type StoreFigures struct {
	EmbeddedRecordsPerSec float64 `json:"embedded_records_per_s"`
	PostgresRecordsPerSec float64 `json:"postgres_records_per_s"`
	PostgresBytes         int64   `json:"postgres_bytes"`
	Overlap10             float64 `json:"top10_overlap"` // mean share of the embedded store's top 10 the PostgreSQL store returns too
}

// storeBatches stores batches into s as an indexer does, and returns the
// records stored per second.
func storeBatches(ctx context.Context, s index.Store, batches [][]byte) (float64, error) {
	t0 := time.Now()
	n := 0
	for i, b := range batches {
		res, err := s.PutBatch(ctx, index.Source{Node: "searcheval", Seq: uint64(i + 1)}, b)
		if err != nil {
			return 0, err
		}
		n += res.Added + res.Replaced + res.Removed + res.Duplicates + res.Stale
	}
	return float64(n) / time.Since(t0).Seconds(), nil
}

// compareStores stores the crawl's batches into a new embedded store (on
// disk, in dir) and into the PostgreSQL store in a new database on srv,
// and returns the PostgreSQL store, open, with the figures; the queries'
// overlap is filled by the caller.
func compareStores(ctx context.Context, srv *pgserver.Server, dir string, batches [][]byte) (*index.Postgres, func(), StoreFigures, error) {
	var f StoreFigures
	quiet := index.Logger(slog.New(slog.DiscardHandler))
	db, err := badger.Open(index.BadgerOptions(dir).WithLogger(nil))
	if err != nil {
		return nil, nil, f, err
	}
	defer db.Close()
	x, err := index.New(db, quiet)
	if err != nil {
		return nil, nil, f, err
	}
	defer x.Close()
	if f.EmbeddedRecordsPerSec, err = storeBatches(ctx, x, batches); err != nil {
		return nil, nil, f, fmt.Errorf("embedded store: %w", err)
	}
	if err := srv.CreateDB(ctx, "micra"); err != nil {
		return nil, nil, f, err
	}
	p, err := index.OpenPostgres(ctx, srv.DSN("micra"), index.PostgresOptions{}, quiet)
	if err != nil {
		return nil, nil, f, err
	}
	if f.PostgresRecordsPerSec, err = storeBatches(ctx, p, batches); err != nil {
		p.Close()
		return nil, nil, f, fmt.Errorf("postgres store: %w", err)
	}
	if err := p.Analyze(ctx); err != nil {
		p.Close()
		return nil, nil, f, err
	}
	if f.PostgresBytes, err = p.Bytes(ctx); err != nil {
		p.Close()
		return nil, nil, f, err
	}
	return p, func() { p.Close() }, f, nil
}
