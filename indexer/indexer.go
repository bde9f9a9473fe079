package indexer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/indexer/index"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/requests"
	"github.com/micra-net/micra/results"
	"github.com/micra-net/micra/results/pb"
	"github.com/micra-net/micra/subnet"
)

// Indexer is the indexer side of result delivery: it announces itself as a
// designated indexer on results.TopicIndexers, subscribes to the result topics of
// the shards it takes, verifies every batch (signature, schema, sizes,
// snapshot, shard, sequence), stores its records in an index.Store and
// acknowledges it to its node. Its methods are safe for concurrent use.
type Indexer struct {
	o      *overlay.Overlay
	x      index.Store
	db     *badger.DB
	cfg    config
	log    *slog.Logger
	sid    subnet.SnapshotID
	accept map[subnet.SnapshotID]bool
	take   map[uint32]bool // nil: all shards

	// ack sends acknowledgements (o.Ack, or a stand-in in tests).
	ack func(ctx context.Context, p peer.ID, refs []results.BatchRef) error

	queue      chan inbound
	subs       []*pubsub.Subscription
	release    []func() error
	annTopic   *pubsub.Topic
	reannounce chan struct{}

	mu       sync.Mutex
	inflight map[batchKey]bool
	partial  map[[32]byte]*partialBatch
	pbytes   int64

	amu     sync.Mutex
	pending map[peer.ID]*ackQueue

	aud   *auditor      // audits of stored records (audit.go)
	pend  *pendingQueue // crawl requests waiting for a record (pending.go)
	hosts hostRecords   // when each node last delivered each host's records (busy.go)

	// withholding notices (withheld.go)
	owed     *owedQueue // notices owed
	wbud     *auditor   // per-node hourly budgets of notices
	watchBud *auditor   // per-reporter hourly budgets of watches (watch.go)

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error

	stats struct {
		messages, batches, records, duplicates, rejected, conflicts, refused atomic.Uint64
		acks, ackFailures, ackDropped                                        atomic.Uint64
		audits, auditsDropped, flagged                                       atomic.Uint64
		pendingLost, pendingDone, resubmitted, gaveUp                        atomic.Uint64
		withheldSent, withheldTaken, withheldLost                            atomic.Uint64
		watched, watchesRefused                                              atomic.Uint64
	}
}

type inbound struct {
	topic string
	from  peer.ID
	data  []byte
	part  *results.Part // verified by the topic validator, or nil
}

type batchKey struct {
	node peer.ID
	seq  uint64
}

// partialBatch gathers the parts of a multi-part batch.
type partialBatch struct {
	first time.Time
	parts [][]byte
	got   int
	bytes int64
}

type ackQueue struct {
	refs  []results.BatchRef
	since time.Time // when the oldest waiting ref was queued
	next  time.Time // no send before (backoff)
	fails int
	busy  bool
}

// Limits of the acknowledgement queues.
const (
	maxAckRefs      = 512  // overlay's limit of one ACK
	maxAckQueue     = 4096 // refs waiting per node; older ones are dropped (the node republishes)
	maxAckNodes     = 4096 // nodes with waiting refs
	maxAckFails     = 8    // failed sends to one node before its refs are dropped
	ackSenders      = 8    // concurrent ACK streams
	subBuffer       = 32   // messages buffered per subscription and in the work queue (≤ 1 MiB each)
	maxPartial      = 256  // multi-part batches being gathered
	partialLifetime = 10 * time.Minute
)

// New starts the indexer on o, storing into x; db is the database x
// and o use (the replay table lives under Prefix). It joins the topics of
// the shards it takes (results.Topic) with a validator that refuses what
// results.OpenEnvelope refuses, so that forged and tampered messages are neither
// delivered nor relayed. It announces itself at
// once and then every AnnounceEvery. The caller owns o, x and db and closes
// them after Close.
func New(o *overlay.Overlay, x index.Store, db *badger.DB, opts ...Option) (ix *Indexer, err error) {
	if o == nil || x == nil || db == nil {
		return nil, errors.New("indexer: needs an overlay, an index and a database")
	}
	ix, err = newIndexer(x, db, o.Tree().ID(), opts...)
	if err != nil {
		return nil, err
	}
	ix.o = o
	ix.ack = func(ctx context.Context, p peer.ID, refs []results.BatchRef) error {
		return results.SendAck(ctx, o.Host(), p, refs)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, ix.Close())
		}
	}()
	if ix.cfg.searchOnly {
		ix.log.Info("indexer started to serve search only")
		return ix, nil
	}
	ps := o.PubSub()
	for s := range ix.cfg.shards {
		if ix.take != nil && !ix.take[s] {
			continue
		}
		name := results.Topic(s, ix.cfg.shards)
		t, rel, err := results.JoinTopic(ps, name, func() { ix.stats.rejected.Add(1) }, ix.cfg.results()...)
		if err != nil {
			return nil, fmt.Errorf("indexer: joining %s: %w", name, err)
		}
		ix.release = append(ix.release, rel)
		sub, err := t.Subscribe(pubsub.WithBufferSize(subBuffer))
		if err != nil {
			return nil, fmt.Errorf("indexer: subscribing to %s: %w", name, err)
		}
		ix.subs = append(ix.subs, sub)
	}
	t, rel, err := results.JoinTopic(ps, results.TopicIndexers, nil, ix.cfg.results()...)
	if err != nil {
		return nil, fmt.Errorf("indexer: joining %s: %w", results.TopicIndexers, err)
	}
	ix.release = append(ix.release, rel)
	ix.annTopic = t
	for _, sub := range ix.subs {
		ix.wg.Go(func() { ix.read(sub) })
	}
	for range ix.cfg.workers {
		ix.wg.Go(ix.worker)
	}
	if ix.cfg.auditShare > 0 {
		for range auditWorkers {
			ix.wg.Go(ix.auditWorker)
		}
		ix.wg.Go(ix.spreadLoop)
	}
	if ix.cfg.attempts > 1 {
		ix.wg.Go(ix.pendingLoop)
		if ix.cfg.withheldPerHour > 0 {
			ix.wg.Go(ix.withheldLoop)
			remove, err := requests.ServeWatches(o.Host(), ix.takeWatches, ix.cfg.requests()...)
			if err != nil {
				return nil, fmt.Errorf("indexer: serving watches: %w", err)
			}
			ix.release = append(ix.release, func() error { remove(); return nil })
		}
	}
	ix.wg.Go(ix.acker)
	ix.wg.Go(ix.announcer)
	ix.log.Info("indexer started", "shards", ix.cfg.shards, "takes", ix.takeList())
	return ix, nil
}

// newIndexer builds the network-free core: verification, reassembly,
// replay table, storing and the ack queues.
func newIndexer(x index.Store, db *badger.DB, sid subnet.SnapshotID, opts ...Option) (*Indexer, error) {
	cfg, err := newConfig(opts...)
	if err != nil {
		return nil, err
	}
	ix := &Indexer{
		x: x, db: db, cfg: cfg, log: cfg.log, sid: sid,
		accept:     map[subnet.SnapshotID]bool{sid: true},
		queue:      make(chan inbound, subBuffer),
		reannounce: make(chan struct{}, 1),
		inflight:   map[batchKey]bool{},
		partial:    map[[32]byte]*partialBatch{},
		pending:    map[peer.ID]*ackQueue{},
		wbud:       &auditor{budgets: map[peer.ID]*auditBudget{}},
		watchBud:   &auditor{budgets: map[peer.ID]*auditBudget{}},
		pend:       newRetryQueue[pb.PendingCrawl](db, pendingPrefix(), maxPending),
		owed:       newRetryQueue[pb.WithheldOwed](db, withheldPrefix(), maxOwed),
	}
	for _, s := range cfg.snapshots {
		ix.accept[s] = true
	}
	if len(cfg.take) > 0 {
		ix.take = map[uint32]bool{}
		for _, s := range cfg.take {
			ix.take[s] = true
		}
	}
	if err := db.Update(results.CheckSchema); err != nil {
		return nil, err
	}
	if ix.aud, err = newAuditor(); err != nil {
		return nil, err
	}
	if err := ix.loadAudits(); err != nil {
		return nil, fmt.Errorf("indexer: loading audit tallies: %w", err)
	}
	if err := ix.pend.load(); err != nil {
		return nil, fmt.Errorf("indexer: loading pending crawl requests: %w", err)
	}
	if err := ix.owed.load(); err != nil {
		return nil, fmt.Errorf("indexer: loading withholding notices: %w", err)
	}
	ix.ctx, ix.cancel = context.WithCancel(context.Background())
	return ix, nil
}

func (ix *Indexer) takeList() []uint32 {
	if ix.take == nil {
		return nil
	}
	out := make([]uint32, 0, len(ix.take))
	for s := range ix.take {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Close stops reading, waits for the batches being stored and the
// acknowledgements being sent, and leaves the topics. It does not close
// the overlay, the index or the database. Safe to call more than once.
func (ix *Indexer) Close() error {
	ix.closeOnce.Do(func() {
		ix.cancel()
		for _, s := range ix.subs {
			s.Cancel()
		}
		ix.wg.Wait()
		var errs []error
		for _, r := range ix.release {
			errs = append(errs, r())
		}
		ix.closeErr = errors.Join(errs...)
		ix.log.Info("indexer stopped")
	})
	return ix.closeErr
}

// read moves messages of one subscription to the workers. A full queue
// holds the subscription back; pubsub then drops messages for it, which
// the nodes' re-announcements make up for.
func (ix *Indexer) read(sub *pubsub.Subscription) {
	for {
		m, err := sub.Next(ix.ctx)
		if err != nil {
			return
		}
		in := inbound{topic: sub.Topic(), from: m.GetFrom(), data: m.GetData()}
		if p, ok := m.ValidatorData.(*results.Part); ok {
			in.part = p
		}
		select {
		case ix.queue <- in:
		case <-ix.ctx.Done():
			return
		}
	}
}

func (ix *Indexer) worker() {
	for {
		select {
		case <-ix.ctx.Done():
			return
		case in := <-ix.queue:
			_ = ix.ingest(ix.ctx, in)
		}
	}
}

// ingest verifies one result message and, once its batch is complete,
// stores and acknowledges it. Every outcome is counted and logged here;
// the error is for tests.
func (ix *Indexer) ingest(ctx context.Context, in inbound) error {
	ix.stats.messages.Add(1)
	now := ix.cfg.now()
	p := in.part
	if p == nil {
		var err error
		if p, err = results.OpenEnvelope(in.data, ix.cfg.limit, now); err != nil {
			ix.stats.rejected.Add(1)
			ix.log.Debug("result message rejected", "peer", in.from, "error", err)
			return err
		}
	}
	h := p.Header
	if err := ix.takes(in.topic, h); err != nil {
		ix.stats.refused.Add(1)
		ix.log.Debug("result batch refused", "peer", in.from, "node", p.Node, "seq", h.GetSeq(), "error", err)
		return err
	}
	if done, err := ix.checkSeen(p.Node, h, p.Digest); done || err != nil {
		return err
	}
	data := p.Data
	if p.Parts() > 1 {
		if data = ix.assemble(p, now); data == nil {
			return nil
		}
	}
	return ix.store(ctx, p.Node, h, p.Digest, p.Signed, data, now)
}

// takes checks that the batch belongs to this indexer: snapshot, shard
// layout, shard, and the topic it came on (topic "" skips that check).
func (ix *Indexer) takes(topic string, h *pb.Header) error {
	var sid subnet.SnapshotID
	copy(sid[:], h.GetSnapshot())
	switch {
	case !ix.accept[sid]:
		return fmt.Errorf("%w: snapshot %x", results.ErrRefused, sid[:6])
	case h.GetShards() != ix.cfg.shards:
		return fmt.Errorf("%w: %d shards, this indexer splits into %d", results.ErrRefused, h.GetShards(), ix.cfg.shards)
	case topic != "" && topic != results.Topic(h.GetShard(), h.GetShards()):
		return fmt.Errorf("%w: shard %d on topic %s", results.ErrRefused, h.GetShard(), topic)
	case ix.take != nil && !ix.take[h.GetShard()]:
		return fmt.Errorf("%w: shard %d not taken", results.ErrRefused, h.GetShard())
	}
	return nil
}

// checkSeen consults the replay table: a batch stored before with the same
// digest is acknowledged again (done); with another digest it is a
// conflict, refused and logged.
func (ix *Indexer) checkSeen(node peer.ID, h *pb.Header, digest [32]byte) (done bool, err error) {
	prev, ok, err := ix.seen(node, h.GetSeq())
	if err != nil {
		ix.log.Warn("reading the replay table failed", "error", err)
		return true, err
	}
	if !ok {
		return false, nil
	}
	if prev == digest {
		ix.stats.duplicates.Add(1)
		ix.queueAck(node, results.BatchRef{Node: node, Seq: h.GetSeq(), Digest: digest})
		return true, nil
	}
	ix.stats.conflicts.Add(1)
	// The header is signed by the node: it really sent two batches under
	// one sequence number (a forgery with its key, or a reused counter).
	ix.log.Warn("result batch conflicts with a stored batch: refused", "node", node, "seq", h.GetSeq(),
		"digest", fmt.Sprintf("%x", digest[:8]), "stored", fmt.Sprintf("%x", prev[:8]))
	return true, fmt.Errorf("%w: %s seq %d", results.ErrConflict, node, h.GetSeq())
}

func (ix *Indexer) seen(node peer.ID, seq uint64) (d [32]byte, ok bool, err error) {
	err = ix.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(seenKey(node, seq))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			if len(v) != len(d) {
				return fmt.Errorf("corrupt replay entry of %d bytes", len(v))
			}
			copy(d[:], v)
			ok = true
			return nil
		})
	})
	return d, ok, err
}

// assemble adds a verified part to its batch and returns the batch data
// once every part is there. Incomplete batches are bounded in number and
// bytes, and dropped after partialLifetime: the node sends them again.
func (ix *Indexer) assemble(p *results.Part, now time.Time) []byte {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for d, pt := range ix.partial {
		if now.Sub(pt.first) > partialLifetime {
			ix.pbytes -= pt.bytes
			delete(ix.partial, d)
		}
	}
	b := ix.partial[p.Digest]
	if b == nil {
		for len(ix.partial) >= maxPartial || (len(ix.partial) > 0 && ix.pbytes+int64(p.Header.GetSize()) > ix.cfg.reassembly) {
			var oldest [32]byte
			var ot time.Time
			for d, pt := range ix.partial {
				if ot.IsZero() || pt.first.Before(ot) {
					oldest, ot = d, pt.first
				}
			}
			ix.pbytes -= ix.partial[oldest].bytes
			delete(ix.partial, oldest)
		}
		b = &partialBatch{first: now, parts: make([][]byte, p.Parts())}
		ix.partial[p.Digest] = b
	}
	if b.parts[p.Index] != nil {
		return nil
	}
	b.parts[p.Index] = p.Data
	b.got++
	b.bytes += int64(len(p.Data))
	ix.pbytes += int64(len(p.Data))
	if b.got < len(b.parts) {
		return nil
	}
	delete(ix.partial, p.Digest)
	ix.pbytes -= b.bytes
	data := make([]byte, 0, p.Header.GetSize())
	for _, part := range b.parts {
		data = append(data, part...)
	}
	return data
}

// store decodes a complete, verified batch, stores its records, remembers
// its (node, seq, digest) and queues its acknowledgement.
func (ix *Indexer) store(ctx context.Context, node peer.ID, h *pb.Header, digest [32]byte, auth results.SignedHeader, data []byte, now time.Time) error {
	key := batchKey{node, h.GetSeq()}
	ix.mu.Lock()
	if ix.inflight[key] {
		ix.mu.Unlock()
		return nil // another worker has this batch
	}
	ix.inflight[key] = true
	ix.mu.Unlock()
	defer func() {
		ix.mu.Lock()
		delete(ix.inflight, key)
		ix.mu.Unlock()
	}()
	if done, err := ix.checkSeen(node, h, digest); done || err != nil {
		return err
	}
	recs, err := ix.decode(h, data)
	if err != nil {
		ix.stats.rejected.Add(1)
		// Signed by the node: its batch is broken, not forged in transit.
		ix.log.Warn("result batch rejected", "node", node, "seq", h.GetSeq(), "error", err)
		return err
	}
	res, err := ix.x.Put(ctx, index.Source{Node: node.String(), Seq: h.GetSeq(), Received: now}, recs)
	if err != nil {
		if ctx.Err() == nil {
			ix.log.Warn("storing result batch failed", "node", node, "seq", h.GetSeq(), "error", err)
		}
		return err
	}
	if err := ix.db.Update(func(txn *badger.Txn) error {
		return txn.SetEntry(badger.NewEntry(seenKey(node, h.GetSeq()), digest[:]).WithTTL(ix.cfg.replay))
	}); err != nil {
		// The records are stored: acknowledge anyway. A replay would be
		// stored again, which the index makes harmless.
		ix.log.Warn("recording stored batch failed", "node", node, "seq", h.GetSeq(), "error", err)
	}
	ix.stats.batches.Add(1)
	ix.stats.records.Add(uint64(len(recs)))
	if ix.cfg.onStored != nil {
		ix.cfg.onStored(node, h.GetSeq(), len(recs))
	}
	if ix.log.Enabled(ctx, slog.LevelDebug) {
		ix.log.Debug("result batch stored", "node", node, "seq", h.GetSeq(), "records", len(recs), "added", res.Added, "rejected", res.Rejected)
	}
	ix.queueAck(node, results.BatchRef{Node: node, Seq: h.GetSeq(), Digest: digest})
	ix.hosts.note(node, recs, ix.cfg.now())
	ix.satisfied(recs)
	ix.sampleAudits(node, digest, auth, data, recs)
	return nil
}

// decode decompresses a batch (crawl.DecodeBatch caps the decoded size)
// and checks it against its header: record count and, when sharded, that
// every record belongs to the header's shard.
func (ix *Indexer) decode(h *pb.Header, data []byte) ([]crawl.Record, error) {
	recs, err := crawl.DecodeBatch(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", results.ErrMalformed, err)
	}
	if len(recs) != int(h.GetRecords()) {
		return nil, fmt.Errorf("%w: %d records, header says %d", results.ErrMalformed, len(recs), h.GetRecords())
	}
	if h.GetShards() > 1 {
		for i := range recs {
			if s := results.RecordShard(&recs[i], h.GetShards()); s != h.GetShard() {
				return nil, fmt.Errorf("%w: record %q belongs to shard %d, not %d", results.ErrMalformed, recs[i].URL, s, h.GetShard())
			}
		}
	}
	return recs, nil
}

// queueAck queues an acknowledgement to node.
func (ix *Indexer) queueAck(node peer.ID, ref results.BatchRef) {
	ix.amu.Lock()
	defer ix.amu.Unlock()
	q := ix.pending[node]
	if q == nil {
		if len(ix.pending) >= maxAckNodes {
			ix.stats.ackDropped.Add(1)
			return
		}
		q = &ackQueue{}
		ix.pending[node] = q
	}
	if slices.Contains(q.refs, ref) {
		return
	}
	if len(q.refs) == 0 {
		q.since = ix.cfg.now()
	}
	if len(q.refs) >= maxAckQueue {
		q.refs = q.refs[1:]
		ix.stats.ackDropped.Add(1)
	}
	q.refs = append(q.refs, ref)
}

// acker sends the queued acknowledgements: to each node after AckDelay,
// or at once when a full ACK is waiting, with a backoff on failure.
func (ix *Indexer) acker() {
	tick := time.NewTicker(max(ix.cfg.ackDelay/2, 10*time.Millisecond))
	defer tick.Stop()
	sem := make(chan struct{}, ackSenders)
	for {
		select {
		case <-ix.ctx.Done():
			return
		case <-tick.C:
		}
		now := ix.cfg.now()
		ix.amu.Lock()
		for node, q := range ix.pending {
			if q.busy || len(q.refs) == 0 || now.Before(q.next) || (len(q.refs) < maxAckRefs && now.Sub(q.since) < ix.cfg.ackDelay) {
				if len(q.refs) == 0 && !q.busy {
					delete(ix.pending, node)
				}
				continue
			}
			select {
			case sem <- struct{}{}:
			default:
				continue
			}
			n := min(len(q.refs), maxAckRefs)
			refs := slices.Clone(q.refs[:n])
			q.refs = q.refs[n:]
			q.busy = true
			ix.wg.Go(func() {
				defer func() { <-sem }()
				ix.sendAcks(node, q, refs)
			})
		}
		ix.amu.Unlock()
	}
}

func (ix *Indexer) sendAcks(node peer.ID, q *ackQueue, refs []results.BatchRef) {
	ctx, cancel := context.WithTimeout(ix.ctx, 15*time.Second)
	err := ix.ack(ctx, node, refs)
	cancel()
	ix.amu.Lock()
	defer ix.amu.Unlock()
	q.busy = false
	if err == nil {
		ix.stats.acks.Add(uint64(len(refs)))
		q.fails = 0
		if len(q.refs) > 0 {
			q.since = time.Time{} // send the rest at once
		}
		return
	}
	ix.stats.ackFailures.Add(1)
	if ix.ctx.Err() != nil {
		return
	}
	q.fails++
	if q.fails >= maxAckFails {
		ix.log.Debug("acknowledgements dropped: node unreachable", "node", node, "batches", len(refs)+len(q.refs), "error", err)
		ix.stats.ackDropped.Add(uint64(len(refs) + len(q.refs)))
		delete(ix.pending, node)
		return
	}
	ix.log.Debug("acknowledgement failed; retrying", "node", node, "error", err, "attempt", q.fails)
	q.refs = append(refs, q.refs...)
	if len(q.refs) > maxAckQueue {
		q.refs = q.refs[len(q.refs)-maxAckQueue:]
	}
	q.next = ix.cfg.now().Add(min(200*time.Millisecond<<q.fails, 30*time.Second))
	if errors.Is(err, overlay.ErrUnavailable) {
		// Most likely the node has not heard our announcement yet.
		select {
		case ix.reannounce <- struct{}{}:
		default:
		}
	}
}

// announcer announces this indexer at once, twice more within seconds (a
// new peer's pubsub mesh forms in a heartbeat or two), then every
// AnnounceEvery, and when a node refuses an acknowledgement.
func (ix *Indexer) announcer() {
	early := []time.Duration{0, min(time.Second, ix.cfg.announce), min(3*time.Second, ix.cfg.announce)}
	timer := time.NewTimer(0)
	defer timer.Stop()
	var last time.Time
	for i := 0; ; i++ {
		select {
		case <-ix.ctx.Done():
			return
		case <-timer.C:
		case <-ix.reannounce:
			if time.Since(last) < min(2*time.Second, ix.cfg.announce) {
				continue
			}
		}
		last = time.Now()
		ix.publishAnnounce()
		if i+1 < len(early) {
			timer.Reset(early[i+1])
		} else {
			timer.Reset(ix.cfg.announce)
		}
	}
}

func (ix *Indexer) publishAnnounce() {
	b, err := results.IndexerAnnouncement(ix.sid, ix.cfg.shards, ix.takeList(), ix.o.Host().Addrs(), 3*ix.cfg.announce, ix.cfg.now())
	if err != nil {
		return
	}
	if err := ix.annTopic.Publish(ix.ctx, b); err != nil && ix.ctx.Err() == nil {
		ix.log.Debug("indexer announcement failed", "error", err)
	}
}

// Stats are the indexer's counters since New.
type Stats struct {
	Messages   uint64 `json:"messages"`    // result messages read
	Batches    uint64 `json:"batches"`     // batches stored
	Records    uint64 `json:"records"`     // records in them (the index's own Stats say how many were new)
	Duplicates uint64 `json:"duplicates"`  // batches stored before and acknowledged again (replays)
	Rejected   uint64 `json:"rejected"`    // messages or batches that failed verification
	Conflicts  uint64 `json:"conflicts"`   // signed batches reusing a stored (node, seq) with another digest
	Refused    uint64 `json:"refused"`     // valid batches of another snapshot, shard layout or shard
	Acks       uint64 `json:"acks"`        // batch acknowledgements delivered
	AckFails   uint64 `json:"ack_fails"`   // ACK requests that failed
	AckDropped uint64 `json:"ack_dropped"` // acknowledgements given up
	Audits     uint64 `json:"audits"`      // audits of stored records asked for (see Audited)
	AuditsLost uint64 `json:"audits_lost"` // sampled records not audited: the audit queue was full
	Flagged    uint64 `json:"flagged"`     // nodes flagged since start: a coordinator convicted them
	Pending    int    `json:"pending"`     // crawl requests waiting for a record of their page
	Answered   uint64 `json:"answered"`    // crawl requests a record answered since start
	Resent     uint64 `json:"resent"`      // crawl requests submitted again: no record came in time
	GaveUp     uint64 `json:"gave_up"`     // crawl requests given up after every attempt
	// Withholding notices (withheld.go): owed now, sent since start, and
	// those that took a subnet back; Unkept: not kept, the table full.
	WithheldOwed   int    `json:"withheld_owed"`
	WithheldSent   uint64 `json:"withheld_sent"`
	WithheldTaken  uint64 `json:"withheld_taken_back"`
	WithheldUnkept uint64 `json:"withheld_unkept"`
	// Watched counts links nodes reported handed on, with their owners'
	// receipts, kept as pending requests (watch.go); WatchesRefused those
	// not kept (another shard's, a refused host, beyond the budget).
	Watched        uint64 `json:"watched"`
	WatchesRefused uint64 `json:"watches_refused"`
}

// Stats returns the indexer's counters.
func (ix *Indexer) Stats() Stats {
	s := &ix.stats
	return Stats{Messages: s.messages.Load(), Batches: s.batches.Load(), Records: s.records.Load(),
		Duplicates: s.duplicates.Load(), Rejected: s.rejected.Load(), Conflicts: s.conflicts.Load(), Refused: s.refused.Load(),
		Acks: s.acks.Load(), AckFails: s.ackFailures.Load(), AckDropped: s.ackDropped.Load(),
		Audits: s.audits.Load(), AuditsLost: s.auditsDropped.Load(), Flagged: s.flagged.Load(),
		Pending: ix.Pending(), Answered: s.pendingDone.Load(), Resent: s.resubmitted.Load(), GaveUp: s.gaveUp.Load(),
		WithheldOwed: ix.Owed(), WithheldSent: s.withheldSent.Load(), WithheldTaken: s.withheldTaken.Load(), WithheldUnkept: s.withheldLost.Load(),
		Watched: s.watched.Load(), WatchesRefused: s.watchesRefused.Load()}
}

// Index returns the index the indexer stores into.
func (ix *Indexer) Index() index.Store { return ix.x }

// requests.Submit sends crawl requests into the overlay with this indexer's
// Resolve and LocalCrawl options (see the package function requests.Submit).
//
// The indexer keeps each request until a record of its page arrives and
// submits it again when none has come (CrawlPatience), so that a page
// queued at a node that then dies for good is crawled by the subnet's next
// owner. A request refused for a special-purpose address (see
// requests.Submit; the overlay's egress policy, or a coordinator's) is not
// kept: it would be refused again.
func (ix *Indexer) Submit(ctx context.Context, reqs []crawl.Request) (requests.SubmitResult, error) {
	ix.keepPending(ix.allowedHosts(reqs))
	res, err := requests.Submit(ctx, ix.o, reqs, ix.cfg.requests()...)
	ix.noteHolders(res)
	ix.noteRefusals(res)
	var refused []string
	for _, f := range res.Failed {
		if errors.Is(f.Err, egress.ErrSpecialPurpose) || errors.Is(f.Err, overlay.ErrForbidden) {
			refused = append(refused, f.Link)
		}
	}
	ix.forgetPending(refused)
	return res, err
}
