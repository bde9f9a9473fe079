package requests

import (
	"testing"

	"github.com/micra-net/micra/internal/readme"
)

// TestREADMEProtocols holds README's protocol table to this package's
// protocols and frame limits.
func TestREADMEProtocols(t *testing.T) {
	rows, err := readme.Protocols("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for id, limit := range map[string]int{string(CrawlID): maxCrawlMsg, string(WatchID): maxWatchMsg} {
		got, ok := rows[id]
		if want := readme.Size(limit); !ok || got != want {
			t.Errorf("README's row of %s: limit %q (listed %v), the code's %s", id, got, ok, want)
		}
	}
}
