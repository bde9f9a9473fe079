// Who coordinates a shard: the cached, shared DHT lookups of the peers
// closest to a shard key.

package overlay

import (
	"context"
	"math"
	"slices"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

type closestEntry struct {
	peers []peer.ID
	at    time.Time
}

// closestPeers returns the live peers closest to key, self included, nearest
// first. The slice is shared with the cache and other callers: read it, do
// not change it. Lists are cached for the configured TTL; refresh forces a lookup.
// Concurrent lookups of one key share one DHT lookup: a coordinator asked
// by many joining nodes at once, or a node whose requests, heartbeats and
// maintenance want the same shard, pays for one.
func (c *coordinator) closestPeers(ctx context.Context, key [32]byte, refresh bool) []peer.ID {
	c.mu.Lock()
	e, ok := c.closest[key]
	if ok && !refresh && time.Since(e.at) >= c.cfg.closestTTL && !c.refreshing[key] && c.o.ctx.Err() == nil {
		// Stale: answer from the cache and refresh in the background, so
		// that requests never wait on a DHT lookup the cache can stand in
		// for.
		select {
		case c.refreshQ <- key:
			c.refreshing[key] = true
		default: // the refresher is busy; a later request asks again
		}
	}
	if ok && !refresh {
		c.mu.Unlock()
		return e.peers
	}
	f, running := c.lookups[key]
	if !running {
		if c.stopped {
			c.mu.Unlock()
			return c.nearest(key, nil)
		}
		f = &lookupFlight{done: make(chan struct{})}
		c.lookups[key] = f
		// On the overlay's lifetime: the callers that join this lookup
		// must not lose it when the first one gives up. Started under
		// c.mu, so that stop cannot begin waiting before it is counted.
		c.lookupWG.Go(func() {
			f.peers = c.lookupClosest(key, e.peers)
			c.mu.Lock()
			delete(c.lookups, key)
			c.mu.Unlock()
			close(f.done)
		})
	}
	c.mu.Unlock()
	select {
	case <-f.done:
		return f.peers
	case <-ctx.Done():
		if ok {
			return e.peers
		}
		return c.nearest(key, nil)
	}
}

// view returns the peers closest to key that this node knows without asking
// anyone, nearest first, never empty: a lookup's list younger than a
// maintenance interval as it is, else the last lookup's list joined with
// the routing table. A Kademlia routing table holds every peer of the
// node's own neighbourhood, so the view of a key near this node is the
// lookup's answer; the view of a key far from it is a first hop, which
// redirects correct (askCoordinator).
func (c *coordinator) view(key [32]byte) []peer.ID {
	c.mu.Lock()
	e, ok := c.closest[key]
	c.mu.Unlock()
	if ok && time.Since(e.at) < c.cfg.maintain {
		return e.peers
	}
	return c.nearest(key, e.peers)
}

// closer reports whether a is nearer key than b in XOR distance.
func closer(a, b peer.ID, key [32]byte) bool {
	return kb.Closer(a, b, string(key[:]))
}

// age returns how long ago key's closest peers were last looked up (a
// long time when never).
func (c *coordinator) age(key [32]byte) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.closest[key]; ok {
		return time.Since(e.at)
	}
	return time.Duration(math.MaxInt64)
}

// lookupFlight is one DHT lookup of a key that concurrent callers share.
type lookupFlight struct {
	done  chan struct{}
	peers []peer.ID
}

// lookupClosest runs a DHT lookup of key, caches and returns its answer
// (old, the cached list, if it fails and finds nothing).
func (c *coordinator) lookupClosest(key [32]byte, old []peer.ID) []peer.ID {
	c.o.stats.lookups.Add(1)
	lctx, cancel := context.WithTimeout(c.o.ctx, 20*time.Second)
	found, err := c.o.dht.GetClosestPeers(lctx, string(key[:]))
	cancel()
	if err != nil && len(found) == 0 {
		c.log.Debug("closest peers lookup failed", "error", err)
		if len(old) > 0 {
			return old
		}
	}
	peers := c.nearest(key, found)
	c.mu.Lock()
	c.closest[key] = closestEntry{peers: peers, at: time.Now()}
	c.mu.Unlock()
	return peers
}

// nearest joins found with this node and the routing table's nearest peers
// to key, nearest first, at most 20: in a small or young overlay a lookup
// can miss a peer that timed out once, and peers that disagree about the
// closest peer bounce requests between them. This node is among them only
// while it serves the DHT: a node behind NAT is a DHT client, in no other
// peer's view, and must not take shards it could coordinate only through
// relays. The list is never empty; callers take its first peer.
func (c *coordinator) nearest(key [32]byte, found []peer.ID) []peer.ID {
	peers := append(slices.Clone(found), c.o.dht.RoutingTable().NearestPeers(kb.ConvertKey(string(key[:])), 2*c.cfg.replication)...)
	if len(peers) == 0 || c.o.Reachability() != network.ReachabilityPrivate {
		peers = append(peers, c.self)
	}
	peers = kb.SortClosestPeers(dedupe(peers), kb.ConvertKey(string(key[:])))
	if len(peers) > 20 {
		peers = peers[:20]
	}
	return peers
}

// refresher runs the background lookups closestPeers queues, until ctx is
// done.
func (c *coordinator) refresher(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case key := <-c.refreshQ:
			c.closestPeers(ctx, key, true)
			c.mu.Lock()
			delete(c.refreshing, key)
			c.mu.Unlock()
		}
	}
}

// forget drops p from every cached closest list (it did not answer). A
// list it empties is dropped, so that the next request looks the key up:
// callers take a cached list's first peer.
func (c *coordinator) forget(p peer.ID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.closest {
		if i := slices.Index(e.peers, p); i >= 0 {
			e.peers = slices.Delete(slices.Clone(e.peers), i, i+1)
			if len(e.peers) == 0 {
				delete(c.closest, k)
				continue
			}
			c.closest[k] = e
		}
	}
}

func dedupe(ps []peer.ID) []peer.ID {
	seen := map[peer.ID]bool{}
	out := ps[:0]
	for _, p := range ps {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// plausible reports whether p may write to the shard with key: it must be
// among the first 2×replication peers this node knows closest to the key
// (twice the set, to tolerate views that differ by a few peers). It keeps
// arbitrary peers from overwriting or freezing shard state; a peer that
// chose an id close to a key is Kademlia's Sybil problem, not solved here.
func (c *coordinator) plausible(ctx context.Context, key [32]byte, p peer.ID) bool {
	// The view is exact near this node (a lookup's list, or the routing
	// table of a node itself among the key's closest); elsewhere the
	// routing table knows too few peers near the key, and a peer far from
	// it would pass: look the key up.
	c.mu.Lock()
	_, looked := c.closest[key]
	c.mu.Unlock()
	peers := c.view(key)
	n := min(len(peers), 2*c.cfg.replication)
	if !looked && !slices.Contains(peers[:n], c.self) {
		peers = c.closestPeers(ctx, key, false)
		n = min(len(peers), 2*c.cfg.replication)
	}
	if slices.Contains(peers[:n], p) {
		return true
	}
	// The view may predate p's arrival: look again once.
	peers = c.closestPeers(ctx, key, true)
	return slices.Contains(peers[:min(len(peers), 2*c.cfg.replication)], p)
}

func (c *coordinator) addrInfo(p peer.ID) peer.AddrInfo {
	return peer.AddrInfo{ID: p, Addrs: c.o.h.Peerstore().Addrs(p)}
}
