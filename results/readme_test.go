package results

import (
	"testing"

	"github.com/micra-net/micra/internal/readme"
)

// TestREADMEProtocols holds README's protocol table to this package's
// protocol and frame limit, and to the number of micra's protocols:
// overlay's six and its DHT, requests' two and this one.
func TestREADMEProtocols(t *testing.T) {
	if rows := readme.CheckLimits(t, "../README.md", map[string]int{string(AckID): maxAckMsg}); len(rows) != 10 {
		t.Errorf("README lists %d protocols, the code has 10: %v", len(rows), rows)
	}
}
