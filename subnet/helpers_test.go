package subnet

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// build builds a tree from in-memory inputs, failing the test on error.
func build(t testing.TB, inputs ...string) (*Tree, *Report) {
	t.Helper()
	b, err := NewBuilder()
	if err != nil {
		t.Fatal(err)
	}
	for i, in := range inputs {
		if _, err := b.Add(context.Background(), "input"+string(rune('0'+i)), strings.NewReader(in), FormatAuto); err != nil {
			t.Fatalf("input %d: %v", i, err)
		}
	}
	tr, rep, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return tr, rep
}

func mustAddr(t testing.TB, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func mustRange(t testing.TB, s string) Range {
	t.Helper()
	if p, err := netip.ParsePrefix(s); err == nil {
		return RangeOf(p)
	}
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		t.Fatalf("bad range %q", s)
	}
	return Range{Start: mustAddr(t, strings.TrimSpace(a)), End: mustAddr(t, strings.TrimSpace(b))}
}

// dataDir returns ../shared/data beside the repository. Tests that need the
// real data skip when it is absent, except under CI, where it must exist.
func dataDir(t testing.TB) string {
	t.Helper()
	if raceEnabled {
		t.Skip("real-data tests are single-threaded; they run without -race")
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found")
		}
		dir = parent
	}
	d := filepath.Join(dir, "..", "shared", "data")
	if _, err := os.Stat(d); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI needs the real data at %s: %v", d, err)
		}
		t.Skipf("real data not found at %s", d)
	}
	return d
}

// chainStrings returns the ranges of the chain to a, as strings.
func chainStrings(tr *Tree, a netip.Addr) []string {
	var out []string
	for _, id := range tr.Chain(a) {
		out = append(out, tr.Range(id).String())
	}
	return out
}
