package overlay

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
	for id, limit := range map[string]int{
		string(ProbeID): maxProbeMsg, string(CoordinateID): maxCoordMsg, string(ReplicateID): maxReplicateMsg,
		string(AuditID): maxAuditMsg, string(ReleaseID): maxReleaseMsg, string(AnnounceID): maxAnnounceMsg,
	} {
		got, ok := rows[id]
		if want := readme.Size(limit); !ok || got != want {
			t.Errorf("README's row of %s: limit %q (listed %v), the code's %s", id, got, ok, want)
		}
	}
	if _, ok := rows[string(DHTPrefix)+"/kad/1.0.0"]; !ok {
		t.Errorf("README lists no %s/kad/1.0.0", DHTPrefix)
	}
}
