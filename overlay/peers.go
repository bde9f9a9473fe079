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
	"github.com/libp2p/go-libp2p/core/peerstore"
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

// cached returns key's cached list (a lookup's, a walk's or a confirmed
// claim's), however old, and the view when there is none. It never looks
// up: the list a shard's writes go to is kept current by maintenance.
func (c *coordinator) cached(key [32]byte) []peer.ID {
	c.mu.Lock()
	e, ok := c.closest[key]
	c.mu.Unlock()
	if ok && len(e.peers) > 0 {
		return e.peers
	}
	return c.view(key)
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
	return c.ids.nearest(peers, kadKey(key), 20)
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
	// The view is exact near this node: a Kademlia routing table holds
	// every peer of its owner's neighbourhood, and so of a key among whose
	// nearest peers the owner is. Elsewhere the table knows too few peers
	// near the key, and a peer far from it would pass: walk towards the
	// key first (two or three DHT queries, cached as a lookup's list).
	c.mu.Lock()
	_, looked := c.closest[key]
	c.mu.Unlock()
	peers := c.view(key)
	if !looked && !c.ranked(key, c.self, peers) {
		peers = c.walk(ctx, key)
	}
	if c.ranked(key, p, peers) {
		return true
	}
	// The list may predate p's arrival, or hold peers gone since: walk
	// again when it is older than a maintenance interval (a coordinator
	// that joined a moment ago sends its first notices), and where views
	// still disagree a full lookup settles it, at most once per closestTTL
	// and key: a peer that keeps asking, such as a deposed coordinator far
	// from the key offering its state every maintenance round, costs a
	// walk per round and a lookup per interval, not a lookup per request.
	age := c.age(key)
	if age >= c.cfg.maintain {
		if c.ranked(key, p, c.walk(ctx, key)) {
			return true
		}
	}
	if age < c.cfg.closestTTL {
		return false
	}
	return c.ranked(key, p, c.closestPeers(ctx, key, true))
}

// ranked reports whether p is among the first 2×replication of peers
// (nearest first), or, absent from peers, is a DHT server nearer the key
// than the 2×replication-th of them: a peer that joined a moment ago, which
// this node has not met yet, ranks without a lookup.
func (c *coordinator) ranked(key [32]byte, p peer.ID, peers []peer.ID) bool {
	n := 2 * c.cfg.replication
	if i := slices.Index(peers, p); i >= 0 {
		return i < n
	}
	if p != c.self && !c.dhtServer(p) {
		return false
	}
	return len(peers) < n || closer(p, peers[n-1], key)
}

// dhtServer reports whether p serves the DHT, as its identify said: only
// DHT servers coordinate or replicate shards.
func (c *coordinator) dhtServer(p peer.ID) bool {
	ok, err := c.o.h.Peerstore().SupportsProtocols(p, DHTPrefix+"/kad/1.0.0")
	return err == nil && len(ok) > 0
}

// nearerLive returns the peer nearest key among those this node knows
// nearer to it than p and takes for alive: itself, or a peer it is
// connected to (libp2p's keep-alives close a dead peer's connection within a
// minute, while the routing table keeps a dead peer until a query to it
// fails). A replica answers a claim with it (handleSync).
func (c *coordinator) nearerLive(key [32]byte, p peer.ID) (peer.AddrInfo, bool) {
	for _, q := range c.view(key) {
		if q == p || !closer(q, p, key) {
			break // nearest first: the rest are farther than p
		}
		if q == c.self {
			return peer.AddrInfo{ID: q, Addrs: c.o.h.Addrs()}, true
		}
		if c.o.h.Network().Connectedness(q) == network.Connected {
			return c.addrInfo(q), true
		}
	}
	return peer.AddrInfo{}, false
}

func (c *coordinator) addrInfo(p peer.ID) peer.AddrInfo {
	return peer.AddrInfo{ID: p, Addrs: c.o.h.Peerstore().Addrs(p)}
}

// confirmed records peers, nearest first, as key's list, confirmed now as
// a lookup would (a claim's replica set answered without naming a nearer
// peer). peers is not changed afterwards.
func (c *coordinator) confirmed(key [32]byte, peers []peer.ID) {
	c.mu.Lock()
	c.closest[key] = closestEntry{peers: peers, at: time.Now()}
	c.mu.Unlock()
}

// learn takes in p, a peer a replica named nearer to key than this node:
// this node dials it in the background (the DHT then adds it to the
// routing table) and, once it answered, puts it in key's list, so that the
// next request for the key is redirected to it without another claim
// round. A peer that cannot be reached is dropped from every list.
func (c *coordinator) learn(key [32]byte, p peer.AddrInfo) {
	if len(p.Addrs) > 0 {
		c.o.h.Peerstore().AddAddrs(p.ID, p.Addrs, peerstore.TempAddrTTL)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return
	}
	c.lookupWG.Go(func() {
		ctx, cancel := context.WithTimeout(c.o.ctx, 10*time.Second)
		err := c.o.h.Connect(ctx, peer.AddrInfo{ID: p.ID})
		cancel()
		if err != nil {
			c.log.Debug("a peer named nearer a shard key is unreachable", "peer", p.ID, "error", err)
			c.forget(p.ID)
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		e := c.closest[key]
		if !slices.Contains(e.peers, p.ID) {
			e.peers = kb.SortClosestPeers(append(slices.Clone(e.peers), p.ID), kb.ConvertKey(string(key[:])))
			c.closest[key] = e
		}
	})
}
