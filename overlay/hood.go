// The neighbourhood: one DHT lookup of this node's own ID stands in for
// the periodic lookups of the shard keys it coordinates.

package overlay

import (
	"context"
	"slices"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A coordinator re-checked every shard it held with a DHT lookup of the
// shard's key every closestTTL: at 50 nodes holding 2,000 subnets that was
// 480 lookups and 10,600 FIND_NODE requests per node and hour, nine tenths
// of a volunteer's upkeep in service (docs/scale.md). But the keys a node
// coordinates are keys it is nearest to, and so lie in its own XOR
// neighbourhood: every peer nearer such a key than the farthest of its
// replica set shares at least as long a prefix with the key as that
// replica does, and so (XOR distance being an ultrametric) with this node.
// One lookup of this node's own ID finds every peer nearer to it than the
// farthest peer the lookup returns; a key whose replica set lies within
// that radius is settled by the lookup's answer joined with the routing
// table. The coordinator thus makes one lookup per closestTTL, and a
// shard's own lookup only where its replica set reaches beyond the
// neighbourhood, where a replica push failed, or where a replica is not
// connected (maintainView).

// hoodSize is how many peers a lookup answers with: kad-dht's bucket size,
// which micra does not change.
const hoodSize = 20

// hood is the answer of the last lookup of this node's own ID.
type hood struct {
	peers []peer.ID // nearest this node first, itself not among them
	// edge is the common prefix length of this node's and the farthest
	// peer's keys: every peer sharing a longer prefix with this node is
	// among peers. -1 when the lookup found fewer than hoodSize peers,
	// all the overlay has.
	edge  int
	at    time.Time // when the lookup answered; zero: none yet
	tried time.Time // when one was last started
}

// fromHood returns the peers nearest key, nearest first, as the
// neighbourhood and the routing table give them, when the neighbourhood
// lookup is younger than closestTTL and covers key: this node is in key's
// replica set and so is no peer outside the neighbourhood. It looks this
// node's own ID up first when the last lookup is older than closestTTL
// (at most once per maintenance interval when lookups fail).
func (c *coordinator) fromHood(ctx context.Context, key [32]byte) ([]peer.ID, bool) {
	h := c.freshHood(ctx)
	if h.at.IsZero() || time.Since(h.at) >= c.cfg.closestTTL {
		return nil, false
	}
	peers := c.nearest(key, h.peers)
	set := c.replicaSet(peers)
	if !slices.Contains(set, c.self) {
		return nil, false
	}
	if !hoodCovers(h.edge, set[len(set)-1], key) {
		return nil, false
	}
	return peers, true
}

// hoodCovers reports whether a neighbourhood with edge holds every peer
// nearer key than far, the farthest peer of a replica set this node is
// in: such a peer shares more than far's prefix length with key, and so
// at least that much with this node (which is no farther from key than
// far), which is more than edge when far's prefix length with key is.
func hoodCovers(edge int, far peer.ID, key [32]byte) bool {
	if edge < 0 {
		return true
	}
	return kb.CommonPrefixLen(kb.ConvertPeerID(far), kb.ConvertKey(string(key[:]))) > edge
}

// freshHood returns the neighbourhood, looked up again first when it is
// older than closestTTL and no lookup was started in the last maintenance
// interval.
func (c *coordinator) freshHood(ctx context.Context) hood {
	c.mu.Lock()
	h := c.hood
	stale := h.at.IsZero() || time.Since(h.at) >= c.cfg.closestTTL
	if !stale || time.Since(h.tried) < c.cfg.maintain || c.stopped {
		c.mu.Unlock()
		return h
	}
	c.hood.tried = time.Now()
	c.mu.Unlock()

	c.o.stats.lookups.Add(1)
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	found, err := c.o.dht.GetClosestPeers(lctx, string(c.self))
	cancel()
	if err != nil || ctx.Err() != nil {
		c.log.Debug("neighbourhood lookup failed", "error", err)
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.hood
	}
	self := kb.ConvertPeerID(c.self)
	found = kb.SortClosestPeers(dedupe(slices.DeleteFunc(found, func(p peer.ID) bool { return p == c.self })), self)
	edge := -1
	if len(found) >= hoodSize {
		edge = kb.CommonPrefixLen(kb.ConvertPeerID(found[len(found)-1]), self)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hood.peers, c.hood.edge, c.hood.at = found, edge, time.Now()
	return c.hood
}
