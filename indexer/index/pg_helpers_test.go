package index

import (
	"testing"
	"time"

	"github.com/micra-net/micra/internal/pgserver/pgtest"
)

// The PostgreSQL store's tests run against a real server (pgtest): they
// skip without PostgreSQL binaries, and fail so under CI=true.

func TestMain(m *testing.M) { pgtest.Main(m) }

// newTestPostgres opens a PostgreSQL store on a new database, with the
// options of newTestIndex.
func newTestPostgres(t testing.TB, po PostgresOptions, opts ...Option) *Postgres {
	t.Helper()
	return openTestPostgres(t, pgtest.DSN(t), po, opts...)
}

func openTestPostgres(t testing.TB, dsn string, po PostgresOptions, opts ...Option) *Postgres {
	t.Helper()
	opts = append([]Option{Logger(quietLogger()), Clock(func() time.Time { return testNow })}, opts...)
	p, err := OpenPostgres(t.Context(), dsn, po, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}
