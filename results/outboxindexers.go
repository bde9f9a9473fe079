package results

import (
	"context"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/results/pb"
)

// The indexers the outbox knows: heard on the announcement topic, dialled
// and protected while they serve its shards.

// knownIndexer is what a node knows of an indexer from its announcements.
type knownIndexer struct {
	ann       *pb.Announce
	take      map[uint32]bool // nil: all shards
	seen      time.Time
	expires   time.Time
	persisted time.Time // when seen was last stored
}

func (k *knownIndexer) takes(shard, shards uint32) bool {
	return k.ann.GetShards() == shards && (k.take == nil || k.take[shard])
}

func newKnown(a *pb.Announce, seen time.Time) *knownIndexer {
	k := &knownIndexer{ann: a, seen: seen, persisted: seen, expires: seen.Add(time.Duration(a.GetTtlS()) * time.Second)}
	if len(a.GetTake()) > 0 {
		k.take = make(map[uint32]bool, len(a.GetTake()))
		for _, s := range a.GetTake() {
			k.take[s] = true
		}
	}
	return k
}

func (ob *Outbox) trusts(p peer.ID) bool { return ob.cfg.trusted == nil || ob.cfg.trusted[p] }

// readAnnouncements keeps the table of indexers from their announcements.
func (ob *Outbox) readAnnouncements() {
	for {
		m, err := ob.sub.Next(ob.ctx)
		if err != nil {
			return
		}
		from := m.GetFrom()
		if from == ob.self || !ob.trusts(from) {
			continue
		}
		now := ob.cfg.now()
		a, err := decodeAnnounce(m.GetData(), now)
		if err != nil {
			continue
		}
		ob.noteIndexer(from, a, now)
	}
}

// noteIndexer records an announcement. An indexer that is new, or back
// after its announcement lapsed, gets every waiting batch of its shards
// published again at once.
func (ob *Outbox) noteIndexer(p peer.ID, a *pb.Announce, now time.Time) {
	if string(a.GetSnapshot()) != string(ob.sid[:]) {
		ob.log.Debug("indexer announcement for another snapshot ignored", "peer", p)
		return
	}
	k := newKnown(a, now)
	ob.mu.Lock()
	for id, o := range ob.indexers {
		if now.Sub(o.expires) > ob.cfg.forgetIdx {
			delete(ob.indexers, id)
		}
	}
	old := ob.indexers[p]
	if old == nil && len(ob.indexers) >= maxKnownIndexers {
		ob.mu.Unlock()
		return
	}
	revived := old == nil || !now.Before(old.expires)
	if a.GetShards() != ob.cfg.shards && (old == nil || old.ann.GetShards() != a.GetShards()) {
		ob.log.Warn("indexer splits results into another number of shards: its acknowledgements count, it gets no batches",
			"peer", p, "its_shards", a.GetShards(), "shards", ob.cfg.shards)
	}
	persist := revived || now.Sub(old.persisted) >= k.expires.Sub(now)/2
	if old != nil && !persist {
		k.persisted = old.persisted
	} else {
		k.persisted = now
	}
	ob.indexers[p] = k
	if revived {
		for _, e := range ob.entries {
			if k.takes(e.shard, ob.cfg.shards) {
				e.next, e.attempts = time.Time{}, 0
			}
		}
	}
	ob.mu.Unlock()
	if revived {
		ob.log.Info("indexer found", "peer", p, "takes", a.GetTake(), "shards", a.GetShards())
		select {
		case ob.dial <- p:
		default:
		}
		ob.poke()
	}
	if persist {
		b, err := proto.Marshal(&pb.KnownIndexer{Announce: a, SeenMs: now.UnixMilli()})
		if err == nil {
			err = ob.db.Update(func(txn *badger.Txn) error { return txn.Set(ixKey(p), b) })
		}
		if err != nil {
			ob.log.Warn("storing indexer failed", "peer", p, "error", err)
		}
	}
}

// maxKnownIndexers bounds the table of indexers.
const maxKnownIndexers = 1024

// dialer connects to announced indexers and protects the connections, so
// that publishing reaches them directly.
func (ob *Outbox) dialer() {
	for {
		select {
		case <-ob.ctx.Done():
			return
		case p := <-ob.dial:
			ob.mu.Lock()
			k := ob.indexers[p]
			ob.mu.Unlock()
			if k == nil {
				continue
			}
			ai := peer.AddrInfo{ID: p, Addrs: addrsOf(k.ann)}
			ob.h.ConnManager().Protect(p, protectTag)
			ctx, cancel := context.WithTimeout(ob.ctx, 15*time.Second)
			if err := ob.h.Connect(ctx, ai); err != nil {
				ob.log.Debug("connecting to indexer failed", "peer", p, "error", err)
			}
			cancel()
		}
	}
}

// addrsOf returns the valid multiaddrs of an announcement.
func addrsOf(a *pb.Announce) []ma.Multiaddr {
	var out []ma.Multiaddr
	for _, b := range a.GetAddrs() {
		if m, err := ma.NewMultiaddrBytes(b); err == nil {
			out = append(out, m)
		}
	}
	return out
}

// IndexersFor returns the live indexers (their announcements hold) that
// take the result shard of host, sorted: those a watch of a link of host
// goes to (SendWatches).
func (ob *Outbox) IndexersFor(host string) []peer.ID {
	now := ob.cfg.now()
	shard := ShardOf(host, ob.cfg.shards)
	ob.mu.Lock()
	defer ob.mu.Unlock()
	var out []peer.ID
	for p, k := range ob.indexers {
		if now.Before(k.expires) && k.takes(shard, ob.cfg.shards) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}
