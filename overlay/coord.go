// The coordinator: its state, its shards and their life.

package overlay

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/internal/cooldown"
	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

// coordinator runs the shards this node coordinates or replicates.
//
// Ownership: the coordinator of a shard is the live peer closest to the
// shard key. A peer that finds itself closest claims the shard: it picks an
// epoch above every epoch it has seen, asks the shard's replica set (the
// replication-factor closest peers) to promise to refuse older writes and to
// send their state (SYNC), and needs a majority of the set, itself included,
// to answer. Every later write carries the epoch and counts only when a
// majority stores it (REPLICATE). Since any two majorities of one set meet,
// a write acknowledged under an old epoch reaches the claimer, and a write
// under an old epoch that comes after the promise is refused: of two peers
// that both believe they coordinate, only the higher epoch wins. (Peers whose
// views of the closest set differ can form disjoint sets; the DHT's lookups
// make that transient.)
type coordinator struct {
	o     *Overlay
	tree  *subnet.Tree
	sid   subnet.SnapshotID
	cfg   *config
	self  peer.ID
	sk    crypto.PrivKey
	st    store
	log   *slog.Logger
	start time.Time

	mu      sync.Mutex
	shards  map[[32]byte]*shard
	closest map[[32]byte]closestEntry
	ids     kadIDs // peers' Kademlia IDs, for nearest
	// refreshing marks keys with a background lookup in flight.
	refreshing map[[32]byte]bool
	refreshQ   chan [32]byte
	lookups    map[[32]byte]*lookupFlight // DHT lookups in flight, by key
	stopped    bool                       // stop was called: no new lookups
	lookupWG   sync.WaitGroup
	protected  map[peer.ID]bool // peers protect spares in the connection manager
	hood       hood             // the last lookup of this node's own ID (fromHood)

	// auditMu orders the read-modify-write of audit tallies.
	auditMu     sync.Mutex
	convictions convictionSet
	convictQ    chan struct{} // a node was convicted: re-delegate its subnets now
	withheld    withheldNotes // withholding notices noted (withheldserve.go)
	// hostAsks are the hosts whose refused notices had this coordinator
	// send a node a crawl request, by node and host (withheldserve.go).
	hostAsks *cooldown.Table[string]
	// selfWithheld: subnets this node gave up on its deputies' verdicts.
	selfWithheld selfExclusions

	assignQ chan assignJob
	orgQ    chan *pb.SignedRecord
	blockQ  chan *pb.SignedRecord
	pubQ    chan *pb.SignedRecord
	// noticing counts the notices the notifier's loops are sending now
	// (Stats.Notices adds the queued ones).
	noticing atomic.Int64
}

// shard is the in-memory state of one shard held by this node.
type shard struct {
	ref shardRef
	key [32]byte

	// claimSem admits one claim at a time. It is a channel, not a mutex:
	// a claim holds it across network round trips, and waiting on a
	// channel honours the waiter's ctx (and counts as durably blocked
	// under testing/synctest, which the virtual-time swarm needs).
	claimSem chan struct{}

	mu    sync.Mutex // guards the fields below and orders writes
	meta  *pb.ShardMeta
	owned bool // claimed at meta.epoch and not superseded
	dirty bool // a replication push failed: push the full state again
	// pending holds measurements written but not replicated yet, queue
	// the writes waiting for the batch in flight, which committing marks
	// (write).
	pending    []*pb.Entry
	queue      []*commit
	committing bool
	// handover counts the maintenance rounds left to hand this node's
	// state to a closer peer that took the shard over (0: none due).
	handover int
	// lookup has the next maintenance round look the shard's closest
	// peers up rather than trust its cached view (maintainView).
	lookup bool
	// nudged is the peer this replica last handed the state to because
	// the coordinator was gone and that peer, holding none, was nearest
	// (nudge).
	nudged   peer.ID
	replicas []peer.ID
	lastSeen map[peer.ID]time.Time
	flights  map[string]*flight
	loadAt   map[peer.ID]time.Time

	// Organisation shards: the index changed since its last publication
	// in the DHT, and when that was (see publishOrgs).
	orgDirty     bool
	orgPublished time.Time

	// owners is the shard's delegations by node, as of a count of changes
	// to its entries (ownerEntries); ownersMu guards it and admits one
	// rebuild at a time.
	ownersMu sync.Mutex
	owners   ownerIndex
}

func newCoordinator(o *Overlay) (*coordinator, error) {
	c := &coordinator{
		o: o, tree: o.tree, sid: o.tree.ID(), cfg: &o.cfg, self: o.h.ID(), sk: o.sk,
		st: newStore(o.db), log: o.log, start: time.Now(),
		shards:     map[[32]byte]*shard{},
		closest:    map[[32]byte]closestEntry{},
		refreshing: map[[32]byte]bool{},
		protected:  map[peer.ID]bool{},
		lookups:    map[[32]byte]*lookupFlight{},
		refreshQ:   make(chan [32]byte, 256),
		assignQ:    make(chan assignJob, 1024),
		convictQ:   make(chan struct{}, 1),
		orgQ:       make(chan *pb.SignedRecord, 1024),
		blockQ:     make(chan *pb.SignedRecord, 1024),
		pubQ:       make(chan *pb.SignedRecord, 1024),
		hostAsks:   cooldown.New[string](maxHostAsks),
	}
	if err := c.st.checkSchema(); err != nil {
		return nil, err
	}
	if err := c.selfWithheld.load(c.st); err != nil {
		return nil, fmt.Errorf("loading the subnets this node gave up: %w", err)
	}
	metas, err := c.st.allMetas()
	if err != nil {
		return nil, fmt.Errorf("loading shards: %w", err)
	}
	for key, m := range metas {
		ref, err := c.shardRefFromPB(m.GetShard())
		if err != nil || ref.key(c.sid) != key {
			continue // a shard of another snapshot: carried, then dropped (carryprobes.go)
		}
		sh := c.newShard(ref)
		sh.meta = m
		c.shards[sh.key] = sh
	}
	return c, nil
}

func (c *coordinator) newShard(ref shardRef) *shard {
	return &shard{
		ref: ref, key: ref.key(c.sid),
		claimSem: make(chan struct{}, 1),
		meta:     &pb.ShardMeta{Shard: ref.toPB()},
		lastSeen: map[peer.ID]time.Time{},
		flights:  map[string]*flight{},
		loadAt:   map[peer.ID]time.Time{},
	}
}

// shard returns the held shard for ref, loading or creating it.
func (c *coordinator) shard(ref shardRef) (*shard, error) {
	key := ref.key(c.sid)
	c.mu.Lock()
	defer c.mu.Unlock()
	if sh, ok := c.shards[key]; ok {
		return sh, nil
	}
	sh := c.newShard(ref)
	m, err := c.st.loadMeta(key)
	if err != nil {
		return nil, err
	}
	if m != nil {
		sh.meta = m
	}
	c.shards[key] = sh
	return sh, nil
}

func (c *coordinator) heldShards() []*shard {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*shard, 0, len(c.shards))
	for _, sh := range c.shards {
		out = append(out, sh)
	}
	return out
}

// stop waits for the lookups in flight (the overlay's context is done, so
// they end promptly) and refuses new ones. Close calls it.
func (c *coordinator) stop() {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	c.lookupWG.Wait()
}
