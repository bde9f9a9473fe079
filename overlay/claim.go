// Shard ownership: claims under an epoch, replication of writes to a
// majority, and the sync of state on a takeover.

package overlay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-msgio/pbio"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/overlay/pb"
)

// ensureOwner returns the shard when this node is (or becomes, by claiming)
// its coordinator, and a notCoordinatorError naming a closer peer
// otherwise.
//
// It answers from the routing table's view (view), without a DHT lookup in
// the common case. A claim is confirmed by the claim round itself: the
// replicas it asks for their promise are the peers nearest the key but this
// node, whose routing tables are complete near the key, and each refuses,
// naming the peer, when it knows a live one nearer than this node (a peer
// that joined a moment ago, which this node has not met yet; handleSync).
// A lookup before every claim would cost some twenty DHT queries, two
// thirds of a delegation's messages where shards are new.
//
// A lookup stays the fallback where views genuinely disagree, at most once
// per maintenance interval and key: when the claim finds no majority of its
// replica set (a peer of the view is gone, or the replicas know many peers
// nearer the key), and when this node is a replica whose view's
// coordinator is not connected (a coordinator gone silent stays in the
// routing table until a query to it fails, and the requester, which failed
// to reach it, came here). A node that has not completed its Bootstrap self
// lookup yet looks up before it claims, as before: its routing table does
// not hold its neighbourhood yet, so its view picks the wrong replicas, and
// in a network that is forming theirs may not know better.
func (c *coordinator) ensureOwner(ctx context.Context, ref shardRef) (*shard, error) {
	sh, err := c.shard(ref)
	if err != nil {
		return nil, err
	}
	peers := c.view(sh.key)
	sh.mu.Lock()
	owned := sh.owned
	sh.mu.Unlock()
	if peers[0] == c.self && owned {
		return sh, nil
	}
	fresh := c.age(sh.key) < c.cfg.maintain
	switch {
	case fresh:
	case peers[0] == c.self && !c.o.joined.Load(),
		peers[0] != c.self && slices.Contains(c.replicaSet(peers), c.self) && !c.connected(peers[:1]):
		peers = c.closestPeers(ctx, sh.key, true)
		fresh = true
	}
	if peers[0] != c.self {
		return nil, c.notCloser(sh, peers[0])
	}
	if owned {
		return sh, nil
	}
	err = c.claim(ctx, sh, peers)
	if errors.Is(err, ErrUnavailable) && !fresh {
		// No majority of the view's replica set answered: some of it is
		// gone. Look the key up and claim again with the live set.
		if peers = c.closestPeers(ctx, sh.key, true); peers[0] != c.self {
			return nil, c.notCloser(sh, peers[0])
		}
		err = c.claim(ctx, sh, peers)
	}
	if err != nil {
		return nil, err
	}
	return sh, nil
}

// notCloser gives sh up to p, a peer nearer its key (its state goes to p,
// as when maintenance notices p first), and returns the refusal naming p.
func (c *coordinator) notCloser(sh *shard, p peer.ID) error {
	sh.mu.Lock()
	if sh.owned {
		sh.owned = false
		sh.handover = handoverRounds
	}
	sh.mu.Unlock()
	return &notCoordinatorError{closer: c.addrInfo(p)}
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
	v := c.syncReplicas(ctx, sh, set, ask, epoch)
	if nearer := v.nearer; nearer != nil {
		// This node's view missed a peer nearer the key: it is not the
		// coordinator. The requester goes to that peer, and this node
		// meets it, so that its routing table learns it (learn).
		c.learn(sh.key, *nearer)
		return fmt.Errorf("claiming %s: %w", sh.ref, &notCoordinatorError{closer: *nearer})
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if v.higher >= epoch {
		sh.meta.Promised = max(sh.meta.GetPromised(), v.higher)
		_ = c.st.saveMeta(sh.key, sh.meta)
		return fmt.Errorf("claiming %s: %w", sh.ref, &staleEpochError{got: epoch, current: v.higher})
	}
	if v.ok < majority(len(set)) {
		return fmt.Errorf("claiming %s: %w: %d of %d replicas answered (%s)", sh.ref, ErrUnavailable, v.ok, len(set),
			strings.Join(v.silent, "; "))
	}
	if sh.meta.GetPromised() > epoch {
		return fmt.Errorf("claiming %s: %w", sh.ref, &staleEpochError{got: epoch, current: sh.meta.GetPromised()})
	}
	sh.meta.Epoch = epoch
	sh.meta.Owner = []byte(c.self)
	sh.meta.Seq = max(sh.meta.GetSeq(), v.maxSeq)
	if err := c.st.saveMeta(sh.key, sh.meta); err != nil {
		return err
	}
	sh.owned = true
	sh.handover = 0
	sh.pending = nil // written under an older epoch: the push of the whole state carries them
	if sh.meta.GetSeq() == 0 {
		// A shard new to the network: neither this node nor any replica
		// that answered holds an entry, so those replicas hold the whole
		// state already and the next maintenance round pushes nothing to
		// them (a push per replica and new shard, most of them
		// organisation shards of one entry).
		sh.dirty = false
		sh.replicas = v.answered
	} else {
		sh.dirty = true // the merged state goes to the replicas on the next push
		sh.replicas = nil
	}
	if sh.ref.kind == pb.ShardRef_ORG {
		sh.orgDirty = true // the new epoch's record supersedes the old coordinator's
	}
	c.restartLiveness(sh)
	// The replica set confirmed this node's view of the key's nearest
	// peers: maintenance takes it as a lookup's (maintainView).
	c.confirmed(sh.key, peers)
	c.log.Info("shard claimed", "shard", sh.ref.String(), "epoch", epoch, "replicas", len(set)-1)
	return nil
}

// claimVotes are the answers of the peers a claim of a shard asked for its
// state (syncReplicas).
type claimVotes struct {
	ok       int            // this node and the replicas of the set that promised and sent their state
	maxSeq   uint64         // the highest entry sequence number received
	higher   uint64         // the highest epoch a peer had promised instead
	nearer   *peer.AddrInfo // the nearest live peer a replica knows nearer the key than this node
	answered []peer.ID      // replicas of the set that promised and sent their state
	silent   []string       // why the other replicas of the set did not, for the error
}

// syncReplicas asks the peers ask, at once, for sh's state under a
// promise for epoch (syncFrom), and counts their answers; set is the
// replica set whose majority the claim needs.
func (c *coordinator) syncReplicas(ctx context.Context, sh *shard, set, ask []peer.ID, epoch uint64) claimVotes {
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
	v := claimVotes{ok: 1} // self
	for r := range results {
		var nc *notCoordinatorError
		switch {
		case r.err == nil:
			if slices.Contains(set, r.p) {
				v.ok++
				v.answered = append(v.answered, r.p)
			}
			v.maxSeq = max(v.maxSeq, r.seq)
		case errors.As(r.err, &nc) && nc.closer.ID != c.self && closer(nc.closer.ID, c.self, sh.key):
			if v.nearer == nil || closer(nc.closer.ID, v.nearer.ID, sh.key) {
				v.nearer = &nc.closer
			}
		case r.stale > 0:
			v.higher = max(v.higher, r.stale)
		default:
			c.log.Debug("shard sync failed", "peer", r.p, "shard", sh.ref.String(), "error", r.err)
			if slices.Contains(set, r.p) {
				v.silent = append(v.silent, fmt.Sprintf("%s: %v", r.p.ShortString(), r.err))
			}
		}
	}
	return v
}

// restartLiveness gives each node a delegation of sh names, at the
// takeover, half a liveness timeout to find this node; sh.mu is held.
// Crawlers' heartbeats went to the previous coordinator. A live crawler
// beats within a heartbeat and a request's deadline (its request here is
// what often causes the takeover); a crawler that left with the previous
// coordinator has been silent since before the takeover, and a full
// timeout from it would keep its subnets uncrawled for the time the
// takeover took on top of the timeout.
func (c *coordinator) restartLiveness(sh *shard) {
	seen := time.Now().Add(-c.cfg.liveness / 2)
	_ = c.st.scan(sh.key, pb.Entry_DELEGATION, func(e *pb.Entry) bool {
		if d, err := c.entryDelegation(e); err == nil && sh.lastSeen[d.Node].Before(seen) {
			sh.lastSeen[d.Node] = seen
		}
		return true
	})
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
			switch m.GetError().GetCode() {
			case pb.Error_STALE_EPOCH:
				return 0, m.GetError().GetEpoch(), codeToError(m.GetError())
			case pb.Error_NOT_COORDINATOR:
				if h := m.GetError().GetHint(); h != nil {
					if id, err := peer.IDFromBytes(h.GetId()); err == nil {
						return 0, 0, &notCoordinatorError{closer: peer.AddrInfo{ID: id, Addrs: hintAddrs(h)}}
					}
				}
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
			if _, err := c.checkedDelegation(e); err != nil {
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
		case pb.Entry_WITHHELD:
			if err := checkWithheldEntry(e); err != nil {
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

// entryDelegation opens a DELEGATION or ORG entry's record, read from this
// node's store (see checkedDelegation).
func (c *coordinator) entryDelegation(e *pb.Entry) (Delegation, error) {
	return c.decodeDelegation(e, false)
}

// checkedDelegation is entryDelegation for an entry from a peer: the
// record's signature is verified too. Entries in this node's store were
// checked so on their way in (checkEntries) or signed here, and the
// heartbeats' and maintenance's scans of a shard do not verify them again
// (an ed25519 verification per delegation per heartbeat).
func (c *coordinator) checkedDelegation(e *pb.Entry) (Delegation, error) {
	return c.decodeDelegation(e, true)
}

func (c *coordinator) decodeDelegation(e *pb.Entry, verify bool) (Delegation, error) {
	var sr pb.SignedRecord
	if err := proto.Unmarshal(e.GetValue(), &sr); err != nil {
		return Delegation{}, fmt.Errorf("%w: %v", ErrBadRecord, err)
	}
	var r *pb.Record
	var err error
	if verify {
		r, err = openRecord(c.sid, &sr)
	} else {
		r, err = recordOf(&sr)
	}
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
//
// Measurements (PROBE and LOAD entries: a probe's RTT, a crawler's declared
// load) are stored at once but not replicated on their own: they wait in
// sh.pending for the shard's next write, whose REPLICATE carries them
// (nearly always the decision they were taken for, a second or two later),
// or for the next maintenance round (flushPending). A decision's probes
// were a write and two REPLICATEs each, half of a delegation's replication
// messages. What is acknowledged stays as durable as before: a decision's
// record is replicated to a majority before it is answered, with the
// probes it was decided on. A coordinator that dies in between loses at
// most a maintenance round of measurements, which the next decision takes
// again.
//
// Other writes are replicated in batches (commit), on the overlay's
// lifetime: a writer waits for the batch that carries its entries whatever
// ctx says, since that batch is other writers' too, and the replication
// deadline bounds the wait.
func (c *coordinator) write(_ context.Context, sh *shard, n int, mk func(i int, epoch, seq uint64) (*pb.Entry, error)) ([]*pb.Entry, error) {
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
	if measurements(entries) {
		sh.pending = append(sh.pending, entries...)
		sh.mu.Unlock()
		return entries, nil
	}
	cm := &commit{entries: entries, epoch: epoch, lead: make(chan struct{}), done: make(chan struct{})}
	sh.queue = append(sh.queue, cm)
	if !sh.committing {
		sh.committing = true
		close(cm.lead)
	}
	sh.mu.Unlock()
	select {
	case <-cm.lead:
		c.commitQueue(sh)
	case <-cm.done:
	}
	<-cm.done
	if cm.err != nil {
		return nil, cm.err
	}
	return entries, nil
}

// commit is a write waiting for its replication (write). Writes to one
// shard are replicated one batch at a time: a write that comes while a
// batch is in flight waits in the shard's queue, and the next batch
// carries every write queued meanwhile in one REPLICATE per replica (a
// group commit). Decisions of one shard and index entries of a block shard
// often come together: at 20 nodes about half of them did. Each write is
// still answered only once a majority stored it.
type commit struct {
	entries []*pb.Entry
	epoch   uint64
	lead    chan struct{} // closed when this write is to replicate the queue
	done    chan struct{} // closed when err is set: its entries were replicated, or not
	err     error
}

// commitQueue replicates sh's queued writes of one epoch, and the pending
// measurements, in one batch, answers them, and hands the queue to the
// next write queued meanwhile, if any. It runs on the overlay's lifetime,
// not the caller's: the batch is every queued writer's.
func (c *coordinator) commitQueue(sh *shard) {
	sh.mu.Lock()
	batch := sh.queue
	i := 1
	for i < len(batch) && batch[i].epoch == batch[0].epoch {
		i++
	}
	// Writes of a later epoch (ownership lost and claimed again) wait for
	// the next batch.
	batch, sh.queue = batch[:i], batch[i:]
	entries := sh.pending
	sh.pending = nil
	for _, cm := range batch {
		entries = append(entries, cm.entries...)
	}
	sh.mu.Unlock()
	ctx, cancel := context.WithTimeout(c.o.ctx, replicateSpec.deadline)
	err := c.replicate(ctx, sh, batch[0].epoch, entries)
	cancel()
	for _, cm := range batch {
		cm.err = err
		close(cm.done)
	}
	sh.mu.Lock()
	if len(sh.queue) > 0 {
		close(sh.queue[0].lead)
	} else {
		sh.committing = false
	}
	sh.mu.Unlock()
}

// measurements reports whether entries are all PROBE or LOAD entries,
// whose replication waits for the shard's next write (write).
func measurements(entries []*pb.Entry) bool {
	for _, e := range entries {
		if k := e.GetKind(); k != pb.Entry_PROBE && k != pb.Entry_LOAD {
			return false
		}
	}
	return len(entries) > 0
}

// flushPending replicates the measurements sh's writes left pending, if
// any: a maintenance round's share of write.
func (c *coordinator) flushPending(ctx context.Context, sh *shard) {
	sh.mu.Lock()
	batch, epoch := sh.pending, sh.meta.GetEpoch()
	sh.pending = nil
	owned := sh.owned
	sh.mu.Unlock()
	if len(batch) == 0 || !owned {
		return
	}
	if err := c.replicate(ctx, sh, epoch, batch); err != nil {
		c.log.Debug("replicating measurements failed", "shard", sh.ref.String(), "error", err)
	}
}

// replicate pushes entries under epoch to the replica set and waits for a
// majority (self included).
func (c *coordinator) replicate(ctx context.Context, sh *shard, epoch uint64, entries []*pb.Entry) error {
	// The cached list, never a lookup: the claim confirmed it, and
	// maintenance looks the key up after a failed push (recheck), a change
	// of the view's replica set or closestTTL (maintainView).
	set := c.replicaSet(c.cached(sh.key))
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
	// No node judges itself: a coordinator's audit tally of itself is not
	// its to write (an honest one never does: it recuses itself, see
	// handleAudit), so a convicted node that takes its shard over cannot
	// clear its record there; nor can it lift its exclusion from a
	// subnet it withheld (withhold.go).
	entries = slices.DeleteFunc(slices.Clone(entries), func(e *pb.Entry) bool {
		return (e.GetKind() == pb.Entry_AUDIT && string(e.GetKey()) == string(from)) ||
			(e.GetKind() == pb.Entry_WITHHELD && len(e.GetKey()) > 32 && string(e.GetKey()[32:]) == string(from))
	})
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
	// The claim's confirmation (ensureOwner): a replica that knows a live
	// peer nearer the key than the asker refuses the promise and names
	// the peer, which the asker hands the request to. It refuses before it
	// promises, so that a claimant whose view missed the coordinator does
	// not depose it. The confirmation is worth something only from a
	// replica near the key, whose routing table holds every peer there: a
	// node that knows 2×replication peers nearer the key than itself is not
	// one (the asker's view is young or wrong) and refuses without a hint,
	// which the asker counts as a replica that did not answer.
	key := ref.key(c.sid)
	if p, ok := c.nearerLive(key, from); ok {
		return &notCoordinatorError{closer: p}
	}
	if !c.ranked(key, c.self, c.view(key)) {
		return fmt.Errorf("%w: this node is not among the peers closest to the shard", ErrNotCoordinator)
	}
	if !c.plausible(ctx, key, from) {
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

func majority(n int) int { return n/2 + 1 }
