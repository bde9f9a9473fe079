package requests

import (
	"testing"

	"github.com/micra-net/micra/internal/readme"
)

// TestREADMEProtocols holds README's protocol table to this package's
// protocols and frame limits.
func TestREADMEProtocols(t *testing.T) {
	readme.CheckLimits(t, "../README.md", map[string]int{string(CrawlID): maxCrawlMsg, string(WatchID): maxWatchMsg})
}
