package overlay

import (
	"testing"

	"github.com/micra-net/micra/internal/readme"
)

// TestREADMEProtocols holds README's protocol table to this package's
// protocols and frame limits.
func TestREADMEProtocols(t *testing.T) {
	rows := readme.CheckLimits(t, "../README.md", map[string]int{
		string(ProbeID): maxProbeMsg, string(CoordinateID): maxCoordMsg, string(ReplicateID): maxReplicateMsg,
		string(AuditID): maxAuditMsg, string(ReleaseID): maxReleaseMsg, string(AnnounceID): maxAnnounceMsg,
	})
	if _, ok := rows[string(DHTPrefix)+"/kad/1.0.0"]; !ok {
		t.Errorf("README lists no %s/kad/1.0.0", DHTPrefix)
	}
}
