package overlay

import (
	"slices"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
)

// TestReplicaSetCopies checks that a replica set can be changed without
// changing the closest list it came from: that list is the cached one
// every request and ownership check reads (maintenance once dropped failed
// replicas from it in place, which raced with those readers and left
// empty peer IDs in the cache).
func TestReplicaSetCopies(t *testing.T) {
	c := &coordinator{cfg: &config{replication: 3}}
	peers := []peer.ID{"a", "b", "c", "d", "e"}
	orig := slices.Clone(peers)
	set := c.replicaSet(peers)
	if !slices.Equal(set, peers[:3]) {
		t.Fatalf("replica set %v, want %v", set, peers[:3])
	}
	set = slices.DeleteFunc(set, func(p peer.ID) bool { return p == "b" })
	if !slices.Equal(peers, orig) {
		t.Fatalf("dropping a replica changed the closest list: %v, was %v", peers, orig)
	}
	if got := c.replicaSet(peers[:2]); len(got) != 2 {
		t.Fatalf("replica set of 2 peers has %d", len(got))
	}
}
