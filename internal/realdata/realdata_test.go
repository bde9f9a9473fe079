package realdata

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFind: a named directory must hold the files; $MICRA_DATA likewise;
// otherwise shared/data beside the working directory or a parent is found,
// and without one the error names what was looked for.
func TestFind(t *testing.T) {
	root := t.TempDir()
	data := filepath.Join(root, "shared", "data")
	if err := os.MkdirAll(filepath.Join(data, "latency"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "latency", "m.csv"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(root, "main", "sub")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(Env, "")
	t.Chdir(work)

	if d, err := Find("", "latency/m.csv"); err != nil || d != data {
		t.Fatalf("walking up: %q, %v; want %q", d, err, data)
	}
	if _, err := Find("", "latency/m.csv", "geo/x.gz"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "geo/x.gz") {
		t.Fatalf("a missing file: %v", err)
	}
	if d, err := Find(data, "latency/m.csv"); err != nil || d != data {
		t.Fatalf("named: %q, %v", d, err)
	}
	if _, err := Find(work, "latency/m.csv"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), work) {
		t.Fatalf("a named directory without the file: %v", err)
	}
	// $MICRA_DATA decides when set, even if shared/data is beside.
	t.Setenv(Env, work)
	if _, err := Find("", "latency/m.csv"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "$"+Env) {
		t.Fatalf("$%s without the file: %v", Env, err)
	}
	t.Setenv(Env, data)
	if d, err := Find("", "latency/m.csv"); err != nil || d != data {
		t.Fatalf("$%s: %q, %v", Env, d, err)
	}
}

// fakeTB records what Need does.
type fakeTB struct{ skipped, failed string }

func (f *fakeTB) Helper()                        {}
func (f *fakeTB) Skipf(format string, a ...any)  { f.skipped = format }
func (f *fakeTB) Fatalf(format string, a ...any) { f.failed = format }

// TestNeed: without the data a test skips, and fails under CI.
func TestNeed(t *testing.T) {
	t.Setenv(Env, t.TempDir())
	t.Setenv("CI", "")
	var f fakeTB
	Need(&f, "nothing/here")
	if f.skipped == "" || f.failed != "" {
		t.Fatalf("without CI: %+v", f)
	}
	t.Setenv("CI", "true")
	f = fakeTB{}
	Need(&f, "nothing/here")
	if f.failed == "" {
		t.Fatalf("under CI: %+v", f)
	}
}
