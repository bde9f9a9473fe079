// A short walk towards a key: the few DHT queries that tell a node far from
// a shard key which peers are nearest to it, instead of a full lookup.

package overlay

import (
	"context"
	"fmt"
	"slices"
	"time"

	dhtpb "github.com/libp2p/go-libp2p-kad-dht/pb"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-msgio/pbio"
)

// maxWalkQueries bounds the FIND_NODE queries of one walk. Each query
// asks the nearest peer not asked yet, whose routing table knows the key's
// neighbourhood better than the asker's (a Kademlia step gains about
// log2(bucket size) bits of the key), so two reach the neighbourhood of a
// key at a hundred peers and three at a thousand.
const maxWalkQueries = 4

// walkTimeout bounds one walk; a walk that times out keeps what it found.
const walkTimeout = 10 * time.Second

// walk returns the peers nearest to key, nearest first, as a short
// iterative search from this node's view finds them: it asks the nearest
// peer of the first 2×replication not asked yet for its nearest peers to
// key (one FIND_NODE), merges the answer, and stops when an answer changes
// nothing among the first 2×replication, when all of them were asked, or
// after maxWalkQueries. The answer is cached as a lookup's is (closest).
//
// kad-dht's lookup (closestPeers) asks until the 20 peers nearest the key
// have all answered, some twenty queries whatever the network's size; the
// overlay's checks need the 2×replication nearest only, and a walk finds
// them in two or three. It is the plausibility check's lookup for a key far
// from this node; the full lookup stays the fallback where views disagree.
func (c *coordinator) walk(ctx context.Context, key [32]byte) []peer.ID {
	ctx, cancel := context.WithTimeout(ctx, walkTimeout)
	defer cancel()
	n := 2 * c.cfg.replication
	target := kadKey(key)
	known := slices.Clone(c.view(key))
	asked := map[peer.ID]bool{c.self: true}
	for range maxWalkQueries {
		var q peer.ID
		for _, p := range known[:min(len(known), n)] {
			if !asked[p] {
				q = p
				break
			}
		}
		if q == "" || ctx.Err() != nil {
			break
		}
		asked[q] = true
		found, err := c.findNode(ctx, q, key)
		if err != nil {
			c.log.Debug("walk query failed", "peer", q, "error", err)
			known = slices.DeleteFunc(slices.Clone(known), func(p peer.ID) bool { return p == q })
			continue
		}
		before := slices.Clone(known[:min(len(known), n)])
		for _, ai := range found {
			if ai.ID != c.self && len(ai.Addrs) > 0 {
				c.o.h.Peerstore().AddAddrs(ai.ID, ai.Addrs, peerstore.TempAddrTTL)
			}
			known = append(known, ai.ID)
		}
		known = c.ids.nearest(known, target, 20)
		if slices.Equal(before, known[:min(len(known), n)]) {
			break
		}
	}
	if len(known) == 0 {
		known = c.nearest(key, nil)
	}
	c.mu.Lock()
	c.closest[key] = closestEntry{peers: known, at: time.Now()}
	c.mu.Unlock()
	return known
}

// findNode sends one DHT FIND_NODE for key to p and returns the peers it
// answers with.
func (c *coordinator) findNode(ctx context.Context, p peer.ID, key [32]byte) ([]*peer.AddrInfo, error) {
	s, err := c.o.h.NewStream(ctx, p, DHTPrefix+"/kad/1.0.0")
	if err != nil {
		return nil, fmt.Errorf("find node on %s: %w", p, err)
	}
	if d, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(d)
	}
	req := dhtpb.NewMessage(dhtpb.Message_FIND_NODE, key[:], 0)
	if err := pbio.NewDelimitedWriter(s).WriteMsg(req); err != nil {
		s.Reset()
		return nil, fmt.Errorf("find node on %s: %w", p, err)
	}
	_ = s.CloseWrite()
	var resp dhtpb.Message
	if err := pbio.NewDelimitedReader(s, network.MessageSizeMax).ReadMsg(&resp); err != nil {
		s.Reset()
		return nil, fmt.Errorf("find node on %s: %w", p, err)
	}
	_ = s.Close()
	return dhtpb.PBPeersToPeerInfos(resp.GetCloserPeers()), nil
}
