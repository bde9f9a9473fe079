package delegate

import (
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/subnet"
)

// densityTTL is how long a measured density (subnet.NearestRTT) is reused:
// it moves with the peers' set and their RTTs, both slow, and measuring it
// reads up to subnet's sample of 256 peers times every peer's RTTs.
const densityTTL = time.Minute

// density caches the network's density as the coordinator measures it:
// the median RTT from a peer to its nearest other peer
// (subnet.NearestRTT, SearchConfig.Nearest) over the peers of a decision.
// It is measured again when older than densityTTL or when the number of
// peers moved by more than a tenth since; while one decision measures it,
// the others take the value before. Safe for concurrent use.
type density struct {
	mu        sync.Mutex
	nearest   time.Duration
	peers     int       // the peers it was measured over
	at        time.Time // zero: never measured
	measuring bool
	// measured counts the measurements, for tests.
	measured int
}

// stale reports whether a density measured over n0 peers at t0 is out of
// date at now with n peers.
func stale(t0, now time.Time, n0, n int) bool {
	if t0.IsZero() || now.Sub(t0) >= densityTTL || now.Before(t0) {
		return true
	}
	diff := n - n0
	if diff < 0 {
		diff = -diff
	}
	return 10*diff > n0
}

// get returns the density over peers at now, measured by between when the
// cached one is stale (and no other call is measuring it); zero when no
// two peers are measured (the search then takes a fifth of the
// threshold).
func (c *density) get(now time.Time, peers []peer.ID, between func(a, b peer.ID) (time.Duration, bool)) time.Duration {
	c.mu.Lock()
	if c.measuring || !stale(c.at, now, c.peers, len(peers)) {
		defer c.mu.Unlock()
		return c.nearest
	}
	c.measuring = true
	c.mu.Unlock()
	nodes := make([]string, len(peers))
	for i, p := range peers {
		nodes[i] = string(p)
	}
	nearest := subnet.NearestRTT(nodes, func(a, b string) (time.Duration, bool) { return between(peer.ID(a), peer.ID(b)) })
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nearest, c.peers, c.at, c.measuring = nearest, len(peers), now, false
	c.measured++
	return nearest
}
