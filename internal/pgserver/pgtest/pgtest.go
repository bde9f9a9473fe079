// Package pgtest gives tests a real PostgreSQL server: one throwaway
// server per test process (internal/pgserver), started by the first test
// that asks and stopped by Stop, which the package's TestMain calls, and a
// new empty database for each test. Without PostgreSQL binaries a test
// skips and says what to install; under CI=true it fails.
package pgtest

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

var shared struct {
	once sync.Once
	srv  *pgserver.Server
	err  error
	n    atomic.Int64
}

// Server returns the process's server, starting it on first use, or
// skips t (fails it under CI=true) when there is none.
func Server(t testing.TB) *pgserver.Server {
	t.Helper()
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		shared.srv, shared.err = pgserver.Start(ctx, pgserver.Options{})
	})
	check(t, shared.err)
	return shared.srv
}

// Private starts a server for t alone, stopped when t ends: for a test
// that halts its server. It skips t as Server does.
func Private(t testing.TB, opts pgserver.Options) *pgserver.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	srv, err := pgserver.Start(ctx, opts)
	check(t, err)
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	})
	return srv
}

// check skips or fails t on an error of pgserver.Start.
func check(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" || !errors.Is(err, pgserver.ErrUnavailable) {
		t.Fatalf("this test needs PostgreSQL (apt-get install postgresql-15): %v", err)
	}
	t.Skipf("no PostgreSQL to test against: %v", err)
}

// DSN creates a new empty database on the process's server and returns
// its DSN, or skips t as Server does.
func DSN(t testing.TB) string {
	t.Helper()
	srv := Server(t)
	name := fmt.Sprintf("micra_test_%d", shared.n.Add(1))
	if err := srv.CreateDB(t.Context(), name); err != nil {
		t.Fatal(err)
	}
	return srv.DSN(name)
}

// Main runs m and stops the server if a test started one: a package's
// TestMain is func TestMain(m *testing.M) { pgtest.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	if shared.srv != nil {
		if err := shared.srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the test PostgreSQL server:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}
