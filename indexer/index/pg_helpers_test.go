package index

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/micra-net/micra/internal/pgserver"
)

// The PostgreSQL store's tests run against a real server: a throwaway one
// this test process starts (internal/pgserver) with the PostgreSQL
// binaries on the machine, stopped by TestMain. Each test gets a database
// of its own. Without the binaries the tests skip, saying why; under
// CI=true they fail.

var testPG struct {
	once sync.Once
	srv  *pgserver.Server
	err  error
	n    atomic.Int64
}

func TestMain(m *testing.M) {
	code := m.Run()
	if testPG.srv != nil {
		if err := testPG.srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the test PostgreSQL server:", err)
		}
	}
	os.Exit(code)
}

// pgTestDSN returns the DSN of a new empty database, or skips the test.
func pgTestDSN(t testing.TB) string {
	t.Helper()
	testPG.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		testPG.srv, testPG.err = pgserver.Start(ctx, pgserver.Options{})
	})
	if testPG.err != nil {
		if os.Getenv("CI") == "true" || !errors.Is(testPG.err, pgserver.ErrUnavailable) {
			t.Fatalf("PostgreSQL store tests need a server (apt-get install postgresql-15): %v", testPG.err)
		}
		t.Skipf("no PostgreSQL server to test the PostgreSQL store against: %v", testPG.err)
	}
	name := fmt.Sprintf("micra_test_%d", testPG.n.Add(1))
	if err := testPG.srv.CreateDB(t.Context(), name); err != nil {
		t.Fatal(err)
	}
	return testPG.srv.DSN(name)
}

// newTestPostgres opens a PostgreSQL store on a new database, with the
// options of newTestIndex.
func newTestPostgres(t testing.TB, po PostgresOptions, opts ...Option) *Postgres {
	t.Helper()
	return openTestPostgres(t, pgTestDSN(t), po, opts...)
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
