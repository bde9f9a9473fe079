package results

import (
	"testing"

	"github.com/micra-net/micra/internal/readme"
)

// TestREADMEProtocols holds README's protocol table to this package's
// protocol and frame limit.
func TestREADMEProtocols(t *testing.T) {
	rows, err := readme.Protocols("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rows[string(AckID)], readme.Size(maxAckMsg); got != want {
		t.Errorf("README's row of %s: limit %q, the code's %s", AckID, got, want)
	}
	if len(rows) != 10 {
		t.Errorf("README lists %d protocols, the code has 10 (overlay's 6 and its DHT, requests' 2, results' 1): %v", len(rows), rows)
	}
}
