package readme

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
)

// Protocols returns the rows of the protocol table under README.md's
// "## Protocols" heading: each protocol ID (the first cell, without its
// backquotes) and its frame limit (the last cell, "" when empty). path is
// README.md's path from the calling test's package directory.
func Protocols(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows := map[string]string{}
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Protocols"
		case in && strings.HasPrefix(line, "| `/"):
			cells := strings.Split(strings.Trim(line, "|"), "|")
			if len(cells) < 2 {
				return nil, fmt.Errorf("%s:%d: a protocol row of %d cells", path, n, len(cells))
			}
			id := strings.Trim(strings.TrimSpace(cells[0]), "`")
			if _, dup := rows[id]; dup {
				return nil, fmt.Errorf("%s:%d: %s twice", path, n, id)
			}
			rows[id] = strings.TrimSpace(cells[len(cells)-1])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: no protocol table under \"## Protocols\"", path)
	}
	return rows, nil
}

// Size writes a frame limit of n bytes as the table does: whole MiB, else
// KiB, rounded to the nearest.
func Size(n int) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", (n+512)>>10)
}

// CheckLimits fails t unless README.md (at path) lists every protocol of
// limits with that frame limit (written as Size writes it), and returns
// the table's rows for further checks.
func CheckLimits(t testing.TB, path string, limits map[string]int) map[string]string {
	t.Helper()
	rows, err := Protocols(path)
	if err != nil {
		t.Fatal(err)
	}
	for id, limit := range limits {
		got, ok := rows[id]
		if want := Size(limit); !ok || got != want {
			t.Errorf("README's row of %s: limit %q (listed %v), the code's %s", id, got, ok, want)
		}
	}
	return rows
}
