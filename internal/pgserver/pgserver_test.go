//go:build unix

package pgserver

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// start starts a server for t and stops it when t ends. It skips t when
// no PostgreSQL is installed, unless $CI is "true", where that fails t.
func start(t *testing.T, opts Options) *Server {
	t.Helper()
	s, err := Start(t.Context(), opts)
	if errors.Is(err, ErrUnavailable) {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func TestServer(t *testing.T) {
	var log lockedBuffer
	s := start(t, Options{Log: &log})
	ctx := t.Context()

	const db = "micra test" // a space, to exercise DSN quoting
	if err := s.CreateDB(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateDB(ctx, db); err == nil {
		t.Errorf("CreateDB(%q) twice: got nil error, want one", db)
	}

	conn, err := pgx.Connect(ctx, s.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	var got string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != db {
		t.Errorf("connected to database %q, want %q", got, db)
	}
	var match bool
	err = conn.QueryRow(ctx, `SELECT to_tsvector('english','Running fast') @@ plainto_tsquery('english','run')`).Scan(&match)
	if err != nil {
		t.Fatal(err)
	}
	if !match {
		t.Error("to_tsvector('english','Running fast') does not match plainto_tsquery('english','run')")
	}
	if err := conn.Close(ctx); err != nil {
		t.Fatal(err)
	}

	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(s.dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Stop, stat %s: got %v, want not exist", s.dir, err)
	}
	if err := s.Stop(); err != nil {
		t.Errorf("second Stop: %v, want nil", err)
	}
	if want := "database system is ready to accept connections"; !strings.Contains(log.String(), want) {
		t.Errorf("Options.Log lacks %q; got:\n%s", want, log.String())
	}
}

func TestStartUnavailable(t *testing.T) {
	t.Setenv("PG_BIN", t.TempDir())
	s, err := Start(t.Context(), Options{})
	if err == nil {
		s.Stop()
		t.Fatal("Start with an empty PG_BIN: got nil error")
	}
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("Start with an empty PG_BIN: got %v, want ErrUnavailable", err)
	}
	if want := "apt-get install postgresql-15"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
}

func TestDSN(t *testing.T) {
	s := &Server{port: 5433}
	for _, tc := range []struct{ name, db, want string }{
		{"plain", "micra", "host=127.0.0.1 port=5433 user=postgres dbname=micra sslmode=disable"},
		{"space", "a b", "host=127.0.0.1 port=5433 user=postgres dbname='a b' sslmode=disable"},
		{"quote", `it's\x`, `host=127.0.0.1 port=5433 user=postgres dbname='it\'s\\x' sslmode=disable`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := s.DSN(tc.db)
			if dsn != tc.want {
				t.Errorf("DSN(%q) = %s, want %s", tc.db, dsn, tc.want)
			}
			cfg, err := pgx.ParseConfig(dsn)
			if err != nil {
				t.Fatalf("pgx.ParseConfig(%s): %v", dsn, err)
			}
			if cfg.Database != tc.db || cfg.Host != "127.0.0.1" || cfg.Port != 5433 || cfg.User != superuser || cfg.TLSConfig != nil {
				t.Errorf("pgx.ParseConfig(%s) = database %q host %q port %d user %q TLS %v",
					dsn, cfg.Database, cfg.Host, cfg.Port, cfg.User, cfg.TLSConfig != nil)
			}
		})
	}
}

func TestNewestFirst(t *testing.T) {
	got := newestFirst([]string{"9.6", "15", "README", "16", "10", "1.x"})
	if want := []string{"16", "15", "10", "9.6"}; !slices.Equal(got, want) {
		t.Errorf("newestFirst = %q, want %q", got, want)
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestStartAsRootNeedsSearchableDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root runs the server as another user")
	}
	dir := t.TempDir() // in a directory of mode 0700, owned by root
	s, err := Start(t.Context(), Options{Dir: dir})
	if errors.Is(err, ErrUnavailable) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err == nil {
		s.Stop()
		t.Fatalf("Start under %s: got nil error", dir)
	}
	if want := "cannot enter"; !strings.Contains(err.Error(), want) {
		t.Errorf("Start under %s: got %v, want an error saying %q", dir, err, want)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("Start left %d entries in %s", len(entries), dir)
	}
}

// TestHaltResume halts a server, finds it refusing connections, resumes
// it and finds the data written before, and the extra setting applied.
func TestHaltResume(t *testing.T) {
	s := start(t, Options{Settings: []string{"work_mem=7MB"}})
	ctx := t.Context()
	if err := s.CreateDB(ctx, "kept"); err != nil {
		t.Fatal(err)
	}
	if err := s.Halt(); err != nil {
		t.Fatal(err)
	}
	if err := s.Halt(); err != nil {
		t.Fatalf("second Halt: %v", err)
	}
	if err := s.ping(ctx); err == nil {
		t.Fatal("a halted server accepted a connection")
	}
	if err := s.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, s.DSN("kept"))
	if err != nil {
		t.Fatalf("after Resume: %v", err)
	}
	defer conn.Close(ctx)
	var wm string
	if err := conn.QueryRow(ctx, "SHOW work_mem").Scan(&wm); err != nil || wm != "7MB" {
		t.Fatalf("work_mem %q (%v), want 7MB", wm, err)
	}
}
