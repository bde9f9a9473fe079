package overlay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-msgio/pbio"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/proto"

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
	// refreshing marks keys with a background lookup in flight.
	refreshing map[[32]byte]bool
	refreshQ   chan [32]byte
	lookups    map[[32]byte]*lookupFlight // DHT lookups in flight, by key
	stopped    bool                       // stop was called: no new lookups
	lookupWG   sync.WaitGroup

	// auditMu orders the read-modify-write of audit tallies.
	auditMu     sync.Mutex
	convictions convictionSet
	convictQ    chan struct{} // a node was convicted: re-delegate its subnets now

	assignQ chan assignJob
	orgQ    chan *pb.SignedRecord
	blockQ  chan *pb.SignedRecord
	pubQ    chan *pb.SignedRecord
}

type closestEntry struct {
	peers []peer.ID
	at    time.Time
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
	// handover counts the maintenance rounds left to hand this node's
	// state to a closer peer that took the shard over (0: none due).
	handover int
	replicas []peer.ID
	lastSeen map[peer.ID]time.Time
	flights  map[string]*flight
	loadAt   map[peer.ID]time.Time

	// Organisation shards: the index changed since its last publication
	// in the DHT, and when that was (see publishOrgs).
	orgDirty     bool
	orgPublished time.Time
}

// flight is one in-progress decision that concurrent requests for the same
// subnet wait on.
type flight struct {
	done chan struct{}
	rec  *pb.SignedRecord
	err  error
}

type assignJob struct {
	to  peer.ID
	rec *pb.SignedRecord
	rtt time.Duration // to's stored probe of the subnet, 0 when none
}

func newCoordinator(o *Overlay) (*coordinator, error) {
	c := &coordinator{
		o: o, tree: o.tree, sid: o.tree.ID(), cfg: &o.cfg, self: o.h.ID(), sk: o.sk,
		st: store{o.db}, log: o.log, start: time.Now(),
		shards:     map[[32]byte]*shard{},
		closest:    map[[32]byte]closestEntry{},
		refreshing: map[[32]byte]bool{},
		lookups:    map[[32]byte]*lookupFlight{},
		refreshQ:   make(chan [32]byte, 256),
		assignQ:    make(chan assignJob, 1024),
		convictQ:   make(chan struct{}, 1),
		orgQ:       make(chan *pb.SignedRecord, 1024),
		blockQ:     make(chan *pb.SignedRecord, 1024),
		pubQ:       make(chan *pb.SignedRecord, 1024),
	}
	if err := c.st.checkSchema(); err != nil {
		return nil, err
	}
	metas, err := c.st.allMetas()
	if err != nil {
		return nil, fmt.Errorf("loading shards: %w", err)
	}
	for _, m := range metas {
		ref, err := c.shardRefFromPB(m.GetShard())
		if err != nil {
			continue // a shard of another snapshot: left alone
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

// stop waits for the lookups in flight (the overlay's context is done, so
// they end promptly) and refuses new ones. Close calls it.
func (c *coordinator) stop() {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	c.lookupWG.Wait()
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
// closest peer bounce requests between them.
func (c *coordinator) nearest(key [32]byte, found []peer.ID) []peer.ID {
	peers := append(slices.Clone(found), c.self)
	peers = append(peers, c.o.dht.RoutingTable().NearestPeers(kb.ConvertKey(string(key[:])), c.cfg.replication)...)
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

// forget drops p from every cached closest list (it did not answer).
func (c *coordinator) forget(p peer.ID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.closest {
		if i := slices.Index(e.peers, p); i >= 0 {
			e.peers = slices.Delete(slices.Clone(e.peers), i, i+1)
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

func majority(n int) int { return n/2 + 1 }

func (c *coordinator) addrInfo(p peer.ID) peer.AddrInfo {
	return peer.AddrInfo{ID: p, Addrs: c.o.h.Peerstore().Addrs(p)}
}

// ensureOwner returns the shard when this node is (or becomes, by claiming)
// its coordinator, and a notCoordinatorError naming the closest peer
// otherwise.
func (c *coordinator) ensureOwner(ctx context.Context, ref shardRef) (*shard, error) {
	sh, err := c.shard(ref)
	if err != nil {
		return nil, err
	}
	peers := c.closestPeers(ctx, sh.key, false)
	if peers[0] != c.self {
		sh.mu.Lock()
		sh.owned = false
		sh.mu.Unlock()
		return nil, &notCoordinatorError{closer: c.addrInfo(peers[0])}
	}
	sh.mu.Lock()
	owned := sh.owned
	sh.mu.Unlock()
	if owned {
		return sh, nil
	}
	if err := c.claim(ctx, sh, peers); err != nil {
		return nil, err
	}
	return sh, nil
}

// replicaSet returns a copy of the first replication-factor peers of
// peers, which the caller may change: peers is usually a cached closest
// list, shared with every other caller.
func (c *coordinator) replicaSet(peers []peer.ID) []peer.ID {
	return slices.Clone(peers[:min(len(peers), c.cfg.replication)])
}

// claim takes sh over: see the coordinator's doc.
func (c *coordinator) claim(ctx context.Context, sh *shard, peers []peer.ID) error {
	select {
	case sh.claimSem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("claiming %s: %w", sh.ref, ctx.Err())
	}
	defer func() { <-sh.claimSem }()
	sh.mu.Lock()
	if sh.owned {
		sh.mu.Unlock()
		return nil
	}
	epoch := max(sh.meta.GetEpoch(), sh.meta.GetPromised()) + 1
	sh.meta.Promised = epoch
	if err := c.st.saveMeta(sh.key, sh.meta); err != nil {
		sh.mu.Unlock()
		return err
	}
	prevOwner, _ := peer.IDFromBytes(sh.meta.GetOwner())
	sh.mu.Unlock()

	set := c.replicaSet(peers)
	ask := slices.DeleteFunc(slices.Clone(set), func(p peer.ID) bool { return p == c.self })
	if prevOwner != "" && prevOwner != c.self && !slices.Contains(ask, prevOwner) {
		ask = append(ask, prevOwner) // the state's last writer, if still reachable
	}
	type res struct {
		p     peer.ID
		seq   uint64
		stale uint64
		err   error
	}
	results := make(chan res, len(ask))
	var wg sync.WaitGroup
	for _, p := range ask {
		wg.Go(func() {
			seq, stale, err := c.syncFrom(ctx, p, sh, epoch)
			results <- res{p, seq, stale, err}
		})
	}
	wg.Wait()
	close(results)
	ok := 1 // self
	var maxSeq uint64
	var higher uint64
	for r := range results {
		switch {
		case r.err == nil:
			if slices.Contains(set, r.p) {
				ok++
			}
			maxSeq = max(maxSeq, r.seq)
		case r.stale > 0:
			higher = max(higher, r.stale)
		default:
			c.log.Debug("shard sync failed", "peer", r.p, "shard", sh.ref.String(), "error", r.err)
		}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if higher >= epoch {
		sh.meta.Promised = max(sh.meta.GetPromised(), higher)
		_ = c.st.saveMeta(sh.key, sh.meta)
		return fmt.Errorf("claiming %s: %w", sh.ref, &staleEpochError{got: epoch, current: higher})
	}
	if ok < majority(len(set)) {
		return fmt.Errorf("claiming %s: %w: %d of %d replicas answered", sh.ref, ErrUnavailable, ok, len(set))
	}
	if sh.meta.GetPromised() > epoch {
		return fmt.Errorf("claiming %s: %w", sh.ref, &staleEpochError{got: epoch, current: sh.meta.GetPromised()})
	}
	sh.meta.Epoch = epoch
	sh.meta.Owner = []byte(c.self)
	sh.meta.Seq = max(sh.meta.GetSeq(), maxSeq)
	if err := c.st.saveMeta(sh.key, sh.meta); err != nil {
		return err
	}
	sh.owned = true
	sh.handover = 0
	sh.dirty = true // the merged state goes to the replicas on the next push
	if sh.ref.kind == pb.ShardRef_ORG {
		sh.orgDirty = true // the new epoch's record supersedes the old coordinator's
	}
	sh.replicas = nil
	now := time.Now()
	// Crawlers get a full liveness timeout from the takeover: heartbeats
	// went to the previous coordinator.
	_ = c.st.scan(sh.key, pb.Entry_DELEGATION, func(e *pb.Entry) bool {
		if d, err := c.entryDelegation(e); err == nil {
			sh.lastSeen[d.Node] = now
		}
		return true
	})
	c.log.Info("shard claimed", "shard", sh.ref.String(), "epoch", epoch, "replicas", len(set)-1)
	return nil
}

// syncFrom asks p for sh's state under a promise for epoch and merges what
// it sends. It returns the highest entry sequence number received, or the
// peer's epoch when it refused because it promised a higher one.
func (c *coordinator) syncFrom(ctx context.Context, p peer.ID, sh *shard, epoch uint64) (uint64, uint64, error) {
	s, err := c.o.openStream(ctx, p, replicateSpec)
	if err != nil {
		return 0, 0, err
	}
	c.o.stats.requests.Add(1)
	req := newMsg(pb.Message_SYNC)
	req.Sync = &pb.Sync{Snapshot: c.sid[:], Shard: sh.ref.toPB(), Epoch: epoch}
	w := pbio.NewDelimitedWriter(s)
	r := pbio.NewDelimitedReader(s, replicateSpec.maxMsg)
	if err := w.WriteMsg(req); err != nil {
		s.Reset()
		return 0, 0, err
	}
	_ = s.CloseWrite()
	var maxSeq uint64
	for chunk := 0; ; chunk++ {
		if chunk > 1<<16 {
			s.Reset()
			return 0, 0, fmt.Errorf("%w: endless shard state", ErrTooLarge)
		}
		var m pb.Message
		if err := readMsg(r, &m); err != nil {
			s.Reset()
			return 0, 0, c.o.streamErr(p, replicateSpec, err)
		}
		if m.GetType() == pb.Message_ERROR {
			_ = s.Close()
			if m.GetError().GetCode() == pb.Error_STALE_EPOCH {
				return 0, m.GetError().GetEpoch(), codeToError(m.GetError())
			}
			return 0, 0, codeToError(m.GetError())
		}
		if m.GetType() != pb.Message_SYNC_STATE {
			s.Reset()
			return 0, 0, fmt.Errorf("%w: %v", ErrUnexpectedType, m.GetType())
		}
		st := m.GetSyncState()
		entries, err := c.checkEntries(st.GetEntries())
		if err != nil {
			s.Reset()
			return 0, 0, err
		}
		for _, e := range entries {
			maxSeq = max(maxSeq, e.GetSeq())
		}
		sh.mu.Lock()
		if _, err := c.st.putEntries(sh.key, entries); err != nil {
			sh.mu.Unlock()
			s.Reset()
			return 0, 0, err
		}
		sh.meta.Seq = max(sh.meta.GetSeq(), maxSeq)
		sh.mu.Unlock()
		if !st.GetMore() {
			_ = s.Close()
			return max(maxSeq, 0), 0, nil
		}
	}
}

// checkEntries verifies entries received from a peer: sizes, kinds, and for
// record entries the signature and that the key is the record's subnet.
func (c *coordinator) checkEntries(in []*pb.Entry) ([]*pb.Entry, error) {
	if len(in) > maxEntriesPerMsg {
		return nil, fmt.Errorf("%w: %d entries", ErrTooLarge, len(in))
	}
	for _, e := range in {
		if len(e.GetKey()) == 0 || len(e.GetKey()) > maxEntryKey || len(e.GetValue()) > maxEntryValue {
			return nil, fmt.Errorf("%w: entry key or value size", ErrMalformed)
		}
		switch e.GetKind() {
		case pb.Entry_DELEGATION, pb.Entry_ORG:
			if _, err := c.entryDelegation(e); err != nil {
				return nil, err
			}
		case pb.Entry_PROBE:
			var pe pb.ProbeEntry
			if err := proto.Unmarshal(e.GetValue(), &pe); err != nil {
				return nil, fmt.Errorf("%w: probe entry: %v", ErrMalformed, err)
			}
		case pb.Entry_LOAD:
			var le pb.LoadEntry
			if err := proto.Unmarshal(e.GetValue(), &le); err != nil {
				return nil, fmt.Errorf("%w: load entry: %v", ErrMalformed, err)
			}
		case pb.Entry_AUDIT:
			if err := checkAuditEntry(e); err != nil {
				return nil, err
			}
		case pb.Entry_BLOCK:
			ix, err := c.openBlockEntry(e.GetValue(), true)
			if err != nil {
				return nil, err
			}
			if string(rangeKey(ix.Subnet)) != string(e.GetKey()) {
				return nil, fmt.Errorf("%w: entry key is not the record's subnet", ErrBadRecord)
			}
		default:
			return nil, fmt.Errorf("%w: entry kind %d", ErrMalformed, e.GetKind())
		}
	}
	return in, nil
}

// entryDelegation opens a DELEGATION or ORG entry's record.
func (c *coordinator) entryDelegation(e *pb.Entry) (Delegation, error) {
	var sr pb.SignedRecord
	if err := proto.Unmarshal(e.GetValue(), &sr); err != nil {
		return Delegation{}, fmt.Errorf("%w: %v", ErrBadRecord, err)
	}
	r, err := openRecord(c.sid, &sr)
	if err != nil {
		return Delegation{}, err
	}
	if r.GetKind() != pb.Record_DELEGATION {
		return Delegation{}, fmt.Errorf("%w: not a delegation", ErrBadRecord)
	}
	d := delegationFrom(r)
	if string(rangeKey(d.Subnet)) != string(e.GetKey()) {
		return Delegation{}, fmt.Errorf("%w: entry key is not the record's subnet", ErrBadRecord)
	}
	return d, nil
}

// write stores entries as the owner of sh, stamping them with the shard's
// epoch and next sequence numbers (mk builds each entry's value once its
// version is known), and replicates them to a majority of the replica set.
func (c *coordinator) write(ctx context.Context, sh *shard, n int, mk func(i int, epoch, seq uint64) (*pb.Entry, error)) ([]*pb.Entry, error) {
	sh.mu.Lock()
	if !sh.owned {
		sh.mu.Unlock()
		return nil, fmt.Errorf("%w: shard %s was taken over", ErrNotCoordinator, sh.ref)
	}
	epoch := sh.meta.GetEpoch()
	entries := make([]*pb.Entry, 0, n)
	for i := range n {
		sh.meta.Seq++
		e, err := mk(i, epoch, sh.meta.Seq)
		if err != nil {
			sh.mu.Unlock()
			return nil, err
		}
		e.Epoch, e.Seq = epoch, sh.meta.Seq
		entries = append(entries, e)
	}
	if _, err := c.st.putEntries(sh.key, entries); err != nil {
		sh.mu.Unlock()
		return nil, err
	}
	if err := c.st.saveMeta(sh.key, sh.meta); err != nil {
		sh.mu.Unlock()
		return nil, err
	}
	sh.mu.Unlock()
	if err := c.replicate(ctx, sh, epoch, entries); err != nil {
		return nil, err
	}
	return entries, nil
}

// replicate pushes entries under epoch to the replica set and waits for a
// majority (self included).
func (c *coordinator) replicate(ctx context.Context, sh *shard, epoch uint64, entries []*pb.Entry) error {
	set := c.replicaSet(c.closestPeers(ctx, sh.key, false))
	others := slices.DeleteFunc(slices.Clone(set), func(p peer.ID) bool { return p == c.self })
	need := majority(len(set)) - 1
	if len(others) == 0 {
		return nil
	}
	errs := make(chan error, len(others))
	for _, p := range others {
		go func() { errs <- c.pushTo(ctx, p, sh, epoch, entries) }()
	}
	acks, stale := 0, false
	var last error
	for range others {
		err := <-errs
		switch {
		case err == nil:
			acks++
		case errors.Is(err, ErrStaleEpoch):
			stale = true
			last = err
		default:
			last = err
		}
	}
	if stale {
		sh.mu.Lock()
		if sh.meta.GetEpoch() == epoch {
			sh.owned = false
		}
		sh.mu.Unlock()
		c.log.Info("shard lost to a newer epoch", "shard", sh.ref.String(), "epoch", epoch)
		return fmt.Errorf("%w: %w", ErrNotCoordinator, last)
	}
	if acks < need {
		sh.mu.Lock()
		sh.dirty = true
		sh.mu.Unlock()
		return fmt.Errorf("replicating %s: %w: %d of %d replicas stored the write: %w", sh.ref, ErrUnavailable, acks, len(others), last)
	}
	if acks < len(others) {
		sh.mu.Lock()
		sh.dirty = true
		sh.mu.Unlock()
	}
	return nil
}

func (c *coordinator) pushTo(ctx context.Context, p peer.ID, sh *shard, epoch uint64, entries []*pb.Entry) error {
	for {
		// A chunk holds at most half the entry and byte limits of a frame.
		n, size := 0, 0
		for n < len(entries) && n < maxEntriesPerMsg/2 {
			sz := proto.Size(entries[n]) + 8
			if n > 0 && size+sz > replicateSpec.maxMsg/2 {
				break
			}
			size += sz
			n++
		}
		chunk := entries[:n]
		entries = entries[n:]
		req := newMsg(pb.Message_REPLICATE)
		req.Replicate = &pb.Replicate{Snapshot: c.sid[:], Shard: sh.ref.toPB(), Epoch: epoch, Owner: []byte(c.self), Entries: chunk}
		c.o.stats.requests.Add(1)
		if _, err := c.o.request(ctx, p, replicateSpec, req, pb.Message_OK); err != nil {
			return err
		}
		if len(entries) == 0 {
			return nil
		}
	}
}

// pushAll sends sh's whole state to p.
func (c *coordinator) pushAll(ctx context.Context, p peer.ID, sh *shard) error {
	sh.mu.Lock()
	epoch := sh.meta.GetEpoch()
	sh.mu.Unlock()
	var all []*pb.Entry
	if err := c.st.scan(sh.key, pb.Entry_UNKNOWN, func(e *pb.Entry) bool { all = append(all, e); return true }); err != nil {
		return err
	}
	return c.pushTo(ctx, p, sh, epoch, all)
}

// plausible reports whether p may write to the shard with key: it must be
// among the first 2×replication peers this node knows closest to the key
// (twice the set, to tolerate views that differ by a few peers). It keeps
// arbitrary peers from overwriting or freezing shard state; a peer that
// chose an id close to a key is Kademlia's Sybil problem, not solved here.
func (c *coordinator) plausible(ctx context.Context, key [32]byte, p peer.ID) bool {
	peers := c.closestPeers(ctx, key, false)
	n := min(len(peers), 2*c.cfg.replication)
	if slices.Contains(peers[:n], p) {
		return true
	}
	// The cached view may predate p's arrival: look again once.
	peers = c.closestPeers(ctx, key, true)
	return slices.Contains(peers[:min(len(peers), 2*c.cfg.replication)], p)
}

// handleReplicate stores a coordinator's write if its epoch is current.
func (c *coordinator) handleReplicate(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
	rq := req.GetReplicate()
	if err := c.checkSnapshot(rq.GetSnapshot()); err != nil {
		return nil, err
	}
	if owner, err := peer.IDFromBytes(rq.GetOwner()); err != nil || owner != from {
		return nil, fmt.Errorf("%w: owner is not the sender", ErrMalformed)
	}
	ref, err := c.shardRefFromPB(rq.GetShard())
	if err != nil {
		return nil, err
	}
	entries, err := c.checkEntries(rq.GetEntries())
	if err != nil {
		return nil, err
	}
	if !c.plausible(ctx, ref.key(c.sid), from) {
		return nil, fmt.Errorf("%w: %s is not among the peers closest to the shard", ErrNotCoordinator, from)
	}
	sh, err := c.shard(ref)
	if err != nil {
		return nil, err
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	cur := max(sh.meta.GetEpoch(), sh.meta.GetPromised())
	owner, _ := peer.IDFromBytes(sh.meta.GetOwner())
	if rq.GetEpoch() < cur || (rq.GetEpoch() == sh.meta.GetEpoch() && owner != "" && owner != from) {
		if from != c.self {
			// Another peer coordinated this shard under an older epoch at
			// the same time (a partition, or views of the closest peers that
			// differed) and hands its state over. Its decisions are merged,
			// not lost: every entry is signed by its writer, and where both
			// decided the same key the newer one wins (putEntries). A
			// coordinator sends the merged state to its replicas with the
			// next push; a replica that is not the coordinator keeps it for
			// the next claim. The crawlers that lost a conflicting subnet
			// learn it from their heartbeats.
			if n, err := c.st.putEntries(sh.key, entries); err == nil && n > 0 {
				if sh.owned {
					sh.dirty = true
				}
				c.log.Info("merged a stale coordinator's state", "shard", sh.ref.String(), "from", from,
					"epoch", rq.GetEpoch(), "entries", n)
			}
		}
		return nil, &staleEpochError{got: rq.GetEpoch(), current: cur}
	}
	if rq.GetEpoch() > sh.meta.GetEpoch() || owner != from {
		sh.meta.Epoch = rq.GetEpoch()
		sh.meta.Owner = []byte(from)
		if from != c.self {
			sh.owned = false
		}
	}
	sh.meta.Promised = max(sh.meta.GetPromised(), rq.GetEpoch())
	for _, e := range entries {
		sh.meta.Seq = max(sh.meta.GetSeq(), e.GetSeq())
	}
	if _, err := c.st.putEntries(sh.key, entries); err != nil {
		return nil, err
	}
	if err := c.st.saveMeta(sh.key, sh.meta); err != nil {
		return nil, err
	}
	return newMsg(pb.Message_OK), nil
}

// handleSync promises to refuse writes older than the asker's epoch and
// streams the shard's state.
func (c *coordinator) handleSync(ctx context.Context, from peer.ID, req *pb.Message, w pbio.Writer) error {
	rq := req.GetSync()
	if err := c.checkSnapshot(rq.GetSnapshot()); err != nil {
		return err
	}
	ref, err := c.shardRefFromPB(rq.GetShard())
	if err != nil {
		return err
	}
	if !c.plausible(ctx, ref.key(c.sid), from) {
		return fmt.Errorf("%w: %s is not among the peers closest to the shard", ErrNotCoordinator, from)
	}
	sh, err := c.shard(ref)
	if err != nil {
		return err
	}
	sh.mu.Lock()
	cur := max(sh.meta.GetEpoch(), sh.meta.GetPromised())
	if rq.GetEpoch() <= cur {
		sh.mu.Unlock()
		return &staleEpochError{got: rq.GetEpoch(), current: cur}
	}
	sh.meta.Promised = rq.GetEpoch()
	sh.owned = false
	err = c.st.saveMeta(sh.key, sh.meta)
	sh.mu.Unlock()
	if err != nil {
		return err
	}
	var chunk []*pb.Entry
	size := 0
	flush := func(more bool) error {
		m := newMsg(pb.Message_SYNC_STATE)
		m.SyncState = &pb.SyncState{Epoch: cur, Owner: sh.meta.GetOwner(), Entries: chunk, More: more}
		chunk, size = nil, 0
		return w.WriteMsg(m)
	}
	var werr error
	err = c.st.scan(sh.key, pb.Entry_UNKNOWN, func(e *pb.Entry) bool {
		chunk = append(chunk, e)
		size += proto.Size(e) + 8
		if len(chunk) >= maxEntriesPerMsg/2 || size > replicateSpec.maxMsg/2 {
			if werr = flush(true); werr != nil {
				return false
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	if werr != nil {
		return werr
	}
	return flush(false)
}

func (c *coordinator) checkSnapshot(b []byte) error {
	if string(b) != string(c.sid[:]) {
		return fmt.Errorf("%w: this node runs snapshot %s", ErrWrongSnapshot, c.sid.Short())
	}
	return nil
}

// lookup returns the delegation entry of subnet r in sh, if any.
func (c *coordinator) lookup(sh *shard, r subnet.Range) (*pb.SignedRecord, Delegation, bool, error) {
	e, err := c.st.getEntry(sh.key, pb.Entry_DELEGATION, rangeKey(r))
	if err != nil || e == nil {
		return nil, Delegation{}, false, err
	}
	var sr pb.SignedRecord
	if err := proto.Unmarshal(e.GetValue(), &sr); err != nil {
		return nil, Delegation{}, false, err
	}
	d, err := c.entryDelegation(e)
	if err != nil {
		return nil, Delegation{}, false, err
	}
	return &sr, d, true, nil
}

// decide returns sh's delegation of subnet id, running the delegation
// procedure when there is none (or it is orphaned, or redo is set). Decisions
// for one subnet are made once: concurrent callers wait for the first.
//
// An own-subnet claim (req.Own, paper III.D) is decided here without the
// procedure: the joining node takes its own subnet, unless another node
// holds it by its own claim (the first claimer keeps it).
func (c *coordinator) decide(sh *shard, req DelegateRequest, redo bool) (*pb.SignedRecord, error) {
	r := c.tree.Range(req.Subnet)
	// Nodes convicted by audits take no part; their own-subnet claims
	// are decided like any subnet (and settled once it is delegated).
	conv := c.convicted()
	if req.Own && conv[req.From] {
		req.Own = false
	}
	settled := func(d Delegation, ok bool) bool {
		if !ok || d.Orphaned || redo {
			return false
		}
		return !req.Own || d.Node == req.From || d.Own
	}
	sr, d, ok, err := c.lookup(sh, r)
	if err != nil {
		return nil, err
	}
	if settled(d, ok) {
		return sr, nil
	}
	fk := string(rangeKey(r))
	f, first := sh.join(fk)
	if !first {
		<-f.done
		return f.rec, f.err
	}
	defer sh.land(fk, f)
	// Re-check under the flight: a decision may have landed meanwhile.
	sr, d, ok, err = c.lookup(sh, r)
	if err == nil && settled(d, ok) {
		f.rec = sr
		return sr, nil
	}
	if ok && (d.Orphaned || redo) && req.Addr == (netip.Addr{}) {
		req.Addr, req.URL = d.Addr, d.URL
	}
	for p := range conv {
		req.Exclude = append(req.Exclude, p)
	}
	// The procedure runs on the overlay's lifetime, not the first
	// requester's: the others wait on the same decision.
	ctx, cancel := context.WithTimeout(c.o.ctx, coordDeadline)
	defer cancel()
	node := req.From
	if !req.Own {
		node, err = c.cfg.delegator.Delegate(ctx, req, &env{c: c, sh: sh, subnet: req.Subnet})
		if err != nil {
			f.err = fmt.Errorf("delegation procedure: %w", err)
			return nil, f.err
		}
	}
	if node == "" || slices.Contains(req.Exclude, node) {
		f.err = fmt.Errorf("delegation procedure: %w", ErrNoCandidate)
		return nil, f.err
	}
	f.rec, f.err = c.record(ctx, sh, req.Subnet, node, req.URL, req.Addr, req.Own)
	return f.rec, f.err
}

// join returns the flight of key fk: a new one that the caller runs and
// lands (first), or the one in progress.
func (sh *shard) join(fk string) (f *flight, first bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if f, ok := sh.flights[fk]; ok {
		return f, false
	}
	f = &flight{done: make(chan struct{})}
	sh.flights[fk] = f
	return f, true
}

// land ends a flight that join started.
func (sh *shard) land(fk string, f *flight) {
	sh.mu.Lock()
	delete(sh.flights, fk)
	sh.mu.Unlock()
	close(f.done)
}

// record writes the delegation of subnet id to node as a new signed
// record, replicates it, and queues the notices it causes.
func (c *coordinator) record(ctx context.Context, sh *shard, id subnet.ID, node peer.ID, url string, addr netip.Addr, own bool) (*pb.SignedRecord, error) {
	r := c.tree.Range(id)
	var rec *pb.SignedRecord
	_, err := c.write(ctx, sh, 1, func(_ int, epoch, seq uint64) (*pb.Entry, error) {
		var err error
		rec, err = signRecord(c.sk, &pb.Record{
			Kind: pb.Record_DELEGATION, Snapshot: c.sid[:], Subnet: rangeToPB(r),
			Org: c.tree.Org(id), Node: []byte(node), Epoch: epoch, Seq: seq,
			DecidedMs: time.Now().UnixMilli(), Url: url, Addr: addrBytes(addr), Own: own,
		})
		if err != nil {
			return nil, err
		}
		v, err := proto.Marshal(rec)
		return &pb.Entry{Kind: pb.Entry_DELEGATION, Key: rangeKey(r), Value: v}, err
	})
	if err != nil {
		return nil, err
	}
	sh.mu.Lock()
	sh.lastSeen[node] = time.Now()
	sh.mu.Unlock()
	c.afterDecision(node, rec)
	return rec, nil
}

// reassign moves subnet id of sh from node from to node to (load
// balancing), unless a decision for it is under way or it is no longer
// delegated to from.
func (c *coordinator) reassign(ctx context.Context, sh *shard, id subnet.ID, from, to peer.ID) (*pb.SignedRecord, error) {
	r := c.tree.Range(id)
	fk := string(rangeKey(r))
	f, first := sh.join(fk)
	if !first {
		return nil, fmt.Errorf("%w: %s is being decided", ErrUnavailable, r)
	}
	defer sh.land(fk, f)
	sr, d, ok, err := c.lookup(sh, r)
	if err != nil {
		f.err = err
		return nil, err
	}
	if !ok || d.Orphaned || d.Node != from {
		f.err = fmt.Errorf("%w: %s is not delegated to %s", ErrNotFound, r, from)
		return nil, f.err
	}
	if to == from {
		f.rec = sr
		return sr, nil
	}
	f.rec, f.err = c.record(ctx, sh, id, to, d.URL, d.Addr, false)
	if f.err == nil {
		c.log.Info("subnet reassigned", "subnet", r.String(), "from", from, "to", to)
	}
	return f.rec, f.err
}

// orphan marks d's subnet orphaned and hands it back to the delegation
// procedure with its node and the silent ones excluded; reason says why
// ("orphaned": silent past the liveness timeout; "convicted": by audits).
func (c *coordinator) orphan(ctx context.Context, sh *shard, d Delegation, silent []peer.ID, reason string) error {
	id, ok := c.tree.Find(d.Subnet)
	if !ok {
		return nil
	}
	_, err := c.write(ctx, sh, 1, func(_ int, epoch, seq uint64) (*pb.Entry, error) {
		rec, err := signRecord(c.sk, &pb.Record{
			Kind: pb.Record_DELEGATION, Snapshot: c.sid[:], Subnet: rangeToPB(d.Subnet),
			Org: d.Org, Node: []byte(d.Node), Epoch: epoch, Seq: seq,
			DecidedMs: time.Now().UnixMilli(), Url: d.URL, Addr: addrBytes(d.Addr), Orphaned: true,
		})
		if err != nil {
			return nil, err
		}
		v, err := proto.Marshal(rec)
		return &pb.Entry{Kind: pb.Entry_DELEGATION, Key: rangeKey(d.Subnet), Value: v}, err
	})
	if err != nil {
		return err
	}
	c.log.Info("subnet orphaned", "subnet", d.Subnet.String(), "peer", d.Node, "reason", reason)
	// Fresh probes: the stored ones may name nodes that died with this one
	// (a failed probe counts as infinite, a stored one does not).
	exclude := append([]peer.ID{d.Node}, silent...)
	_, err = c.decide(sh, DelegateRequest{Subnet: id, Addr: d.Addr, URL: d.URL, From: c.self, Exclude: exclude,
		Reason: reason, Fresh: time.Now()}, false)
	return err
}

func addrBytes(a netip.Addr) []byte {
	if !a.IsValid() {
		return nil
	}
	return a.AsSlice()
}

// afterDecision queues the notices a new delegation causes: the delegated
// node is told, the organisation shard and the block shards above the
// subnet's shard index it, and the record is published in the DHT. Queues are bounded; a full queue drops the notice
// (the heartbeat reconciles assignments, and the org index is refreshed by
// the next decision in the organisation).
func (c *coordinator) afterDecision(node peer.ID, rec *pb.SignedRecord) {
	rtt, r := c.wonRTT(node, rec)
	if node == c.self {
		c.o.noteAssigned(rec)
		c.o.noteWonRTT(r, rtt)
	} else {
		select {
		case c.assignQ <- assignJob{node, rec, rtt}:
		default:
			c.log.Warn("assign queue full; notice dropped", "peer", node)
		}
	}
	select {
	case c.orgQ <- rec:
	default:
		c.log.Warn("organisation index queue full; update dropped")
	}
	select {
	case c.blockQ <- rec:
	default:
		c.log.Warn("block index queue full; update dropped")
	}
	if c.cfg.publish {
		select {
		case c.pubQ <- rec:
		default:
			c.log.Debug("record publish queue full; record not published")
		}
	}
}

// wonRTT returns node's latest successful stored probe of the subnet rec
// delegates (0 when there is none), and the subnet.
func (c *coordinator) wonRTT(node peer.ID, sr *pb.SignedRecord) (time.Duration, subnet.Range) {
	rec, err := recordOf(sr)
	if err != nil {
		return 0, subnet.Range{}
	}
	d := delegationFrom(rec)
	id, ok := c.tree.Find(d.Subnet)
	if !ok {
		return 0, d.Subnet
	}
	var best ProbeResult
	for _, pr := range c.probesOf(c.rangeShard(id).key(c.sid), d.Subnet, 0) {
		if pr.Peer == node && pr.RTT > 0 && pr.At.After(best.At) {
			best = pr
		}
	}
	return best.RTT, d.Subnet
}

// notifier sends queued notices until ctx is done. Each kind has its own
// loop, so that a slow kind cannot hold back another: an organisation
// update to a dead organisation coordinator retries for seconds and a DHT
// put may take 30 s, while a crawler given an orphaned subnet must hear of
// it at once. Assignments go out from a few loops, to several crawlers at
// a time.
func (c *coordinator) notifier(ctx context.Context) {
	var wg sync.WaitGroup
	for range assignWorkers {
		wg.Go(func() { c.assignLoop(ctx) })
	}
	wg.Go(func() { c.indexLoop(ctx) })
	wg.Go(func() { c.publishLoop(ctx) })
	wg.Wait()
}

// assignWorkers is how many ASSIGN notices are in flight at once.
const assignWorkers = 4

func (c *coordinator) assignLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-c.assignQ:
			m := newMsg(pb.Message_ASSIGN)
			m.Assign = &pb.Assign{Record: j.rec, RttMicros: j.rtt.Microseconds()}
			retry(ctx, 3, time.Second, func() error {
				c.o.stats.requests.Add(1)
				_, err := c.o.request(ctx, j.to, coordSpec, m, pb.Message_OK)
				return err
			})
		}
	}
}

// indexLoop sends decisions to their organisation and block shards.
func (c *coordinator) indexLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case rec := <-c.orgQ:
			r, err := openRecord(c.sid, rec)
			if err != nil || r.GetOrg() == "" {
				continue
			}
			m := newMsg(pb.Message_ORG_UPDATE)
			m.OrgUpdate = &pb.OrgUpdate{Snapshot: c.sid[:], Org: r.GetOrg(), Record: rec}
			retry(ctx, 3, time.Second, func() error {
				_, err := c.o.askCoordinator(ctx, orgShard(r.GetOrg()), m, pb.Message_OK)
				return err
			})
		case rec := <-c.blockQ:
			c.indexInBlocks(ctx, rec)
		}
	}
}

// publishLoop puts delegation records into the DHT.
func (c *coordinator) publishLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case rec := <-c.pubQ:
			r, err := openRecord(c.sid, rec)
			if err != nil {
				continue
			}
			rg, _ := rangeFromPB(r.GetSubnet())
			v, err := proto.Marshal(rec)
			if err != nil {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			if err := c.o.dht.PutValue(pctx, DelegationKey(c.sid, rg), v); err != nil {
				c.log.Debug("publishing delegation record failed", "error", err)
			}
			cancel()
		}
	}
}

func retry(ctx context.Context, n int, wait time.Duration, f func() error) {
	for i := range n {
		if f() == nil {
			return
		}
		if i == n-1 {
			return
		}
		t := time.NewTimer(wait + time.Duration(rand.Int64N(int64(wait))))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait *= 2
	}
}

// maintain runs one round of shard upkeep: ownership checks, takeovers,
// replica pushes and liveness.
func (c *coordinator) maintain(ctx context.Context) {
	for _, sh := range c.heldShards() {
		if ctx.Err() != nil {
			return
		}
		peers := c.closestPeers(ctx, sh.key, true)
		closest := peers[0] == c.self
		sh.mu.Lock()
		owned, dirty, prev := sh.owned, sh.dirty, sh.replicas
		hasState := sh.meta.GetEpoch() > 0
		if owned && !closest {
			sh.owned = false
			sh.handover = handoverRounds
			c.log.Info("shard handed over to a closer peer", "shard", sh.ref.String(), "peer", peers[0])
		}
		handover := sh.handover > 0 && !closest
		sh.mu.Unlock()
		switch {
		case handover:
			c.handOver(ctx, sh, peers[0])
			continue
		case !owned && closest && hasState:
			if err := c.claim(ctx, sh, peers); err != nil {
				c.log.Debug("takeover failed", "shard", sh.ref.String(), "error", err)
				continue
			}
			dirty = true
		case !owned:
			continue
		}
		// The replicas that hold the state: those it was pushed to now,
		// and those that held it already. A failed one is left out, so
		// that the next round pushes the whole state to it again.
		var stored []peer.ID
		lost := false
		for _, p := range c.replicaSet(peers) {
			if p == c.self || (!dirty && slices.Contains(prev, p)) {
				stored = append(stored, p)
				continue
			}
			err := c.pushAll(ctx, p, sh)
			if errors.Is(err, ErrStaleEpoch) {
				lost = true
				break
			}
			if err != nil {
				c.log.Debug("replica push failed", "peer", p, "error", err)
				continue
			}
			stored = append(stored, p)
		}
		sh.mu.Lock()
		if lost {
			sh.owned = false // a replica promised a newer claimer
			sh.mu.Unlock()
			continue
		}
		sh.replicas = stored
		sh.dirty = false
		sh.mu.Unlock()
		if sh.ref.kind == pb.ShardRef_RANGE {
			c.checkLiveness(ctx, sh)
		}
	}
}

// handoverRounds bounds the maintenance rounds in which a node that
// coordinated a shard offers its state to the peer that took it over.
const handoverRounds = 20

// handOver pushes sh's whole state to to, the closer peer that took the
// shard over, until it stored or merged it. The closer peer syncs from its
// replica set when it claims, but this node need not be in that set: after
// a partition, each side's coordinator holds decisions the other never saw,
// and a single lost push would lose them for good.
func (c *coordinator) handOver(ctx context.Context, sh *shard, to peer.ID) {
	err := c.pushAll(ctx, to, sh)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	switch {
	case err == nil || errors.Is(err, ErrStaleEpoch): // stored, or merged under its newer epoch
		sh.handover = 0
	default:
		sh.handover--
		if sh.handover == 0 {
			c.log.Warn("handing a shard over failed", "shard", sh.ref.String(), "peer", to, "error", err)
		} else {
			c.log.Debug("handover push failed", "peer", to, "error", err)
		}
	}
}

// checkLiveness orphans subnets whose node has been silent past the
// liveness timeout, or was convicted by audits, and re-delegates them, at
// most 64 per round.
func (c *coordinator) checkLiveness(ctx context.Context, sh *shard) {
	now := time.Now()
	convicted := c.convicted()
	var dead []Delegation
	_ = c.st.scan(sh.key, pb.Entry_DELEGATION, func(e *pb.Entry) bool {
		d, err := c.entryDelegation(e)
		// This node is alive as long as it runs this; it gives its own
		// subnets away only when its audits convicted it (its crawler
		// or its network alters pages).
		if err != nil || d.Orphaned || (d.Node == c.self && !convicted[c.self]) {
			return true
		}
		sh.mu.Lock()
		seen, ok := sh.lastSeen[d.Node]
		sh.mu.Unlock()
		if !ok || seen.Before(d.Decided) {
			seen = d.Decided
		}
		if now.Sub(seen) > c.cfg.liveness || convicted[d.Node] {
			dead = append(dead, d)
		}
		return len(dead) < 64
	})
	// Each re-delegation runs a search with probes (seconds); a dead node
	// may have held dozens of subnets of the shard, so they run side by
	// side, a few at a time, and all of them within one round.
	// Every node found silent is kept out of every one of these decisions:
	// two nodes that died together must not be given each other's
	// subnets (a stored probe of a dead node still looks good).
	var silent []peer.ID
	for _, d := range dead {
		if !slices.Contains(silent, d.Node) {
			silent = append(silent, d.Node)
		}
	}
	sem := make(chan struct{}, orphanWorkers)
	var wg sync.WaitGroup
	for _, d := range dead {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			reason := "orphaned"
			if convicted[d.Node] {
				reason = "convicted"
			}
			if err := c.orphan(ctx, sh, d, silent, reason); err != nil {
				c.log.Debug("re-delegating an orphaned subnet failed", "subnet", d.Subnet.String(), "error", err)
			}
		})
	}
	wg.Wait()
}

// orphanWorkers bounds the re-delegations of orphaned subnets one shard
// runs at once.
const orphanWorkers = 8

// ownerEntries lists the subnets of sh delegated to p.
func (c *coordinator) ownerEntries(sh *shard, p peer.ID) ([]*pb.Range, bool) {
	var out []*pb.Range
	truncated := false
	_ = c.st.scan(sh.key, pb.Entry_DELEGATION, func(e *pb.Entry) bool {
		d, err := c.entryDelegation(e)
		if err != nil || d.Node != p || d.Orphaned {
			return true
		}
		if len(out) >= maxHeartbeatList {
			truncated = true
			return false
		}
		out = append(out, rangeToPB(d.Subnet))
		return true
	})
	return out, truncated
}

// hintAddrs decodes the addresses of a redirect hint, at most 8.
func hintAddrs(h *pb.PeerHint) []ma.Multiaddr {
	var out []ma.Multiaddr
	for _, b := range h.GetAddrs() {
		if len(out) >= 8 {
			break
		}
		if a, err := ma.NewMultiaddrBytes(b); err == nil {
			out = append(out, a)
		}
	}
	return out
}
