package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDiskCap: the cap counts blocks allocated (a sparse file of 1 GiB
// counts for nothing), holds at the cap, keeps holding between 95 % of
// it and the cap, and lets go below 95 %.
func TestDiskCap(t *testing.T) {
	dir := t.TempDir()
	sparse, err := os.Create(filepath.Join(dir, "000001.vlog"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sparse.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	sparse.Close()
	write := func(name string, n int) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, "db"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "db", name), make([]byte, n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a.sst", 1<<20)
	used, err := allocated(dir)
	if err != nil {
		t.Fatal(err)
	}
	if used < 1<<20 || used > 1<<20+64<<10 {
		t.Fatalf("allocated %d bytes, want about 1 MiB", used)
	}
	d := &diskCap{dir: dir, limit: used, every: 0}
	if err := d.check(); err == nil || !strings.Contains(err.Error(), "disk cap reached") {
		t.Fatalf("at the cap: %v", err)
	}
	// Between 95 % and the cap: still held.
	d.limit = used + used/40
	if err := d.check(); err == nil {
		t.Fatal("let go above 95 % of the cap")
	}
	// Below 95 %: crawling goes on, and the cap is not reached again
	// until the directory reaches it.
	d.limit = used + used/10
	if err := d.check(); err != nil {
		t.Fatalf("under 95 %% of the cap: %v", err)
	}
	d.limit = used + used/40
	if err := d.check(); err != nil {
		t.Fatalf("under the cap, not held before: %v", err)
	}
	write("b.sst", 1<<20)
	if err := d.check(); err == nil {
		t.Fatal("grew past the cap, not held")
	}
	// A directory that cannot be measured holds, saying so.
	d = &diskCap{dir: filepath.Join(dir, "gone"), limit: 1 << 40}
	if err := d.check(); err == nil || !strings.Contains(err.Error(), "measuring the data directory") {
		t.Fatalf("unmeasurable: %v", err)
	}
}
