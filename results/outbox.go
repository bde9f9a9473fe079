package results

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/results/pb"
	"github.com/micra-net/micra/subnet"
)

// Outbox is the node side of result delivery: a crawl.Sink that signs the
// crawler's batches, keeps them in badger until enough designated indexers
// have acknowledged them, and publishes and re-announces them on the result
// topics. Start serves the acknowledgement protocol (AckID) on the
// overlay's host and hands what arrives to HandleAck.
//
// Build it with NewOutbox, then Start it on the overlay. Its methods are
// safe for concurrent use.
type Outbox struct {
	db     *badger.DB
	sk     crypto.PrivKey
	pub    []byte
	self   peer.ID
	sid    subnet.SnapshotID
	cfg    config
	log    *slog.Logger
	rmu    sync.Mutex // one Results at a time
	ackMu  sync.Mutex // one HandleAck at a time: an entry's acks are read, stored and updated together
	closed atomic.Bool
	done   chan struct{} // closed by Close

	mu       sync.Mutex
	entries  map[uint64]*entry
	bytes    int64
	nextSeq  uint64
	space    chan struct{} // closed and replaced whenever bytes shrink
	full     bool          // the cap was hit and Results is waiting
	indexers map[peer.ID]*knownIndexer

	// After Start.
	net     *overlay.Overlay
	h       host.Host
	publish func(ctx context.Context, shard uint32, data []byte) error
	release []func() error
	sub     *pubsub.Subscription
	wake    chan struct{}
	dial    chan peer.ID
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	startOnce, closeOnce sync.Once
	closeErr             error

	stats struct {
		stored, published, republished, acked, removed, paused, reserve atomic.Uint64
	}
}

// entry is one batch in the outbox; its data stays in badger.
type entry struct {
	seq      uint64
	digest   [32]byte
	shard    uint32
	size     int64
	created  time.Time
	acks     []peer.ID
	attempts int
	next     time.Time // next publication; zero: as soon as an indexer takes the shard
	lastPub  time.Time
}

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

var (
	_ crawl.Sink = (*Outbox)(nil)
)

// NewOutbox opens the outbox kept in db under Prefix for the node whose key
// is sk, running subnet snapshot sid. Batches stored before a restart are
// loaded and will be published once Start runs. The caller owns db and
// closes it after Close.
func NewOutbox(db *badger.DB, sk crypto.PrivKey, sid subnet.SnapshotID, opts ...Option) (*Outbox, error) {
	if db == nil || sk == nil {
		return nil, errors.New("results: outbox needs a database and a key")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.reserve == 0 {
		cfg.reserve = cfg.outboxCap / 16
	}
	self, err := peer.IDFromPrivateKey(sk)
	if err != nil {
		return nil, fmt.Errorf("results: node id: %w", err)
	}
	pub, err := publicKeyField(sk)
	if err != nil {
		return nil, fmt.Errorf("results: public key: %w", err)
	}
	ob := &Outbox{
		db: db, sk: sk, pub: pub, self: self, sid: sid, cfg: cfg, log: cfg.log,
		done:     make(chan struct{}),
		entries:  map[uint64]*entry{},
		space:    make(chan struct{}),
		indexers: map[peer.ID]*knownIndexer{},
		wake:     make(chan struct{}, 1),
		dial:     make(chan peer.ID, 64),
	}
	if err := ob.load(); err != nil {
		return nil, err
	}
	if err := ob.reseal(); err != nil {
		return nil, err
	}
	if len(ob.entries) > 0 {
		ob.log.Info("results outbox opened", "batches", len(ob.entries), "bytes", ob.bytes, "indexers", len(ob.indexers))
	}
	return ob, nil
}

// checkSchema writes the schema version into an empty namespace, or checks
// it.
func checkSchema(txn *badger.Txn) error {
	item, err := txn.Get(schemaKey())
	if errors.Is(err, badger.ErrKeyNotFound) {
		return txn.Set(schemaKey(), []byte{schemaVersion})
	}
	if err != nil {
		return err
	}
	v, err := item.ValueCopy(nil)
	if err != nil {
		return err
	}
	if len(v) != 1 || v[0] != schemaVersion {
		return fmt.Errorf("results: unsupported schema version %x under %s", v, Prefix)
	}
	return nil
}

// load reads the sequence counter, the outbox entries, their
// acknowledgements and the known indexers.
func (ob *Outbox) load() error {
	return ob.db.Update(func(txn *badger.Txn) error {
		if err := checkSchema(txn); err != nil {
			return err
		}
		item, err := txn.Get(seqKey())
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
			// Start from the clock rather than 1, so that a node whose
			// database was wiped but whose key was kept never reuses a
			// sequence number an indexer still remembers (that would be
			// refused as a conflict).
			ob.nextSeq = uint64(max(ob.cfg.now().UnixMicro(), 1))
			if err := txn.Set(seqKey(), binary.BigEndian.AppendUint64(nil, ob.nextSeq)); err != nil {
				return err
			}
		case err != nil:
			return err
		default:
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			if len(v) != 8 {
				return fmt.Errorf("results: corrupt sequence counter %x", v)
			}
			ob.nextSeq = binary.BigEndian.Uint64(v)
		}

		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false})
		defer it.Close()
		for it.Seek(outPrefix()); it.ValidForPrefix(outPrefix()); it.Next() {
			seq, ok := parseSeqKey(outPrefix(), it.Item().Key())
			if !ok {
				continue
			}
			var st pb.Stored
			if err := it.Item().Value(func(v []byte) error { return proto.Unmarshal(v, &st) }); err != nil {
				return fmt.Errorf("results: outbox entry %d: %w", seq, err)
			}
			var h pb.Header
			if err := proto.Unmarshal(st.GetHeader(), &h); err != nil {
				return fmt.Errorf("results: outbox entry %d: %w", seq, err)
			}
			e := &entry{seq: seq, shard: h.GetShard(), created: time.UnixMilli(h.GetCreatedMs()),
				size: int64(h.GetSize()) + it.Item().ValueSize()}
			e.digest = sha256Sum(st.GetHeader())
			ob.entries[seq] = e
			ob.bytes += e.size
		}
		for it.Seek(ackPrefix()); it.ValidForPrefix(ackPrefix()); it.Next() {
			seq, p, ok := parseAckKey(it.Item().Key())
			if e := ob.entries[seq]; ok && e != nil {
				e.acks = append(e.acks, p)
			}
		}
		now := ob.cfg.now()
		for it.Seek(ixPrefix()); it.ValidForPrefix(ixPrefix()); it.Next() {
			p, ok := parseIxKey(it.Item().Key())
			if !ok {
				continue
			}
			var ki pb.KnownIndexer
			if err := it.Item().Value(func(v []byte) error { return proto.Unmarshal(v, &ki) }); err != nil || ki.GetAnnounce() == nil {
				continue
			}
			k := newKnown(ki.GetAnnounce(), time.UnixMilli(ki.GetSeenMs()))
			if now.Sub(k.expires) < ob.cfg.forgetIdx && ob.trusts(p) && string(k.ann.GetSnapshot()) == string(ob.sid[:]) {
				ob.indexers[p] = k
			}
		}
		return nil
	})
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

// Start attaches the outbox to the overlay: it joins the result topics and
// the indexer topic, learns indexers from their announcements, connects to
// them, and publishes the stored batches. It may be called once.
func (ob *Outbox) Start(o *overlay.Overlay) error {
	if o == nil {
		return errors.New("results: nil overlay")
	}
	err := ErrClosed
	ob.startOnce.Do(func() { err = ob.start(o) })
	return err
}

func (ob *Outbox) start(o *overlay.Overlay) (err error) {
	if ob.closed.Load() {
		return ErrClosed
	}
	ob.net, ob.h = o, o.Host()
	ob.ctx, ob.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			ob.cancel()
			for _, r := range ob.release {
				_ = r()
			}
			ob.release = nil
		}
	}()
	ps := o.PubSub()
	topics := make([]*pubsub.Topic, ob.cfg.shards)
	for s := range ob.cfg.shards {
		t, rel, err := joinTopic(ps, Topic(s, ob.cfg.shards), resultValidator(&ob.cfg, nil))
		if err != nil {
			return fmt.Errorf("results: joining %s: %w", Topic(s, ob.cfg.shards), err)
		}
		ob.release = append(ob.release, rel)
		topics[s] = t
	}
	ob.publish = func(ctx context.Context, shard uint32, data []byte) error { return topics[shard].Publish(ctx, data) }
	t, rel, err := joinTopic(ps, TopicIndexers, announceValidator(&ob.cfg))
	if err != nil {
		return fmt.Errorf("results: joining %s: %w", TopicIndexers, err)
	}
	ob.release = append(ob.release, rel)
	removeAcks := serveAcks(ob.h, ob.log, ob.HandleAck)
	ob.release = append(ob.release, func() error { removeAcks(); return nil })
	if ob.sub, err = t.Subscribe(pubsub.WithBufferSize(64)); err != nil {
		return fmt.Errorf("results: subscribing to %s: %w", TopicIndexers, err)
	}
	ob.mu.Lock()
	for p := range ob.indexers {
		select {
		case ob.dial <- p:
		default:
		}
	}
	ob.mu.Unlock()
	ob.wg.Go(ob.readAnnouncements)
	ob.wg.Go(ob.publisher)
	if ob.cfg.connectIndex {
		ob.wg.Go(ob.dialer)
	}
	ob.poke()
	return nil
}

// Close stops publishing and waits for the outbox's goroutines. Stored
// batches stay in the database for the next start. A Results call waiting
// for room returns ErrClosed, so close the crawler first: its last batch
// then still reaches the outbox. Close does not close the database and is
// safe to call more than once.
func (ob *Outbox) Close() error {
	ob.closeOnce.Do(func() {
		ob.closed.Store(true)
		close(ob.done)
		if ob.cancel != nil {
			ob.cancel()
		}
		ob.wg.Wait()
		if ob.sub != nil {
			ob.sub.Cancel()
		}
		var errs []error
		for _, r := range ob.release {
			errs = append(errs, r())
		}
		if ob.h != nil && ob.cfg.connectIndex {
			ob.mu.Lock()
			for p := range ob.indexers {
				ob.h.ConnManager().Unprotect(p, protectTag)
			}
			ob.mu.Unlock()
		}
		ob.closeErr = errors.Join(errs...)
	})
	return ob.closeErr
}

const protectTag = "micra-results"

// Forward implements crawl.Sink: it passes the URLs to the Forwarder.
func (ob *Outbox) Forward(ctx context.Context, reqs []crawl.Request) error {
	if ob.cfg.forward == nil {
		return errors.New("results: no forwarder configured")
	}
	return ob.cfg.forward(ctx, reqs)
}

// Results implements crawl.Sink. It splits the batch by result shard,
// signs each part and stores them durably, then returns; publishing is
// asynchronous. When the outbox is at its cap, Results waits for room (the
// crawler pauses meanwhile); when ctx ends while waiting, it stores the
// batch in the reserve above the cap if it fits, and otherwise fails with
// ErrOutboxFull, which makes the crawler retry the batch.
func (ob *Outbox) Results(ctx context.Context, b crawl.Batch) error {
	if ob.closed.Load() {
		return ErrClosed
	}
	if b.Records == 0 || len(b.Data) == 0 {
		return nil
	}
	ob.rmu.Lock()
	defer ob.rmu.Unlock()
	ss, need, err := ob.sealBatch(b)
	if err != nil {
		return err
	}
	if err := ob.waitRoom(ctx, need); err != nil {
		return err
	}
	if err := ob.store(ss); err != nil {
		return err
	}
	ob.poke()
	return nil
}

// sealBatch cuts a crawler batch by shard and into batches that fit
// maxParts messages, and signs each with the next sequence numbers. It
// returns them and the bytes they take in the outbox. Callers hold rmu.
func (ob *Outbox) sealBatch(b crawl.Batch) ([]*sealed, int64, error) {
	groups, err := splitShards(b, ob.cfg.shards)
	if err != nil {
		return nil, 0, err
	}
	if groups, err = fitParts(groups, min(maxParts*ob.cfg.partSize(), maxBatchData)); err != nil {
		return nil, 0, err
	}
	now := ob.cfg.now()
	ss := make([]*sealed, 0, len(groups))
	var need int64
	ob.mu.Lock()
	seq := ob.nextSeq
	ob.mu.Unlock()
	for _, g := range groups {
		s, err := seal(ob.sk, ob.pub, batchMeta{node: ob.self, seq: seq, snapshot: ob.sid, created: now,
			shard: g.shard, shards: ob.cfg.shards, batch: g.batch}, ob.cfg.partSize())
		if err != nil {
			return nil, 0, err
		}
		seq++
		if s.stored, err = proto.Marshal(&pb.Stored{Header: s.hdrRaw, Signature: s.sig, PublicKey: s.pub}); err != nil {
			return nil, 0, err
		}
		ss = append(ss, s)
		need += s.size()
	}
	return ss, need, nil
}

// reseal signs again, under this outbox's snapshot, shard count and
// message limit, the stored batches made under others (the node was
// reconfigured or upgraded): indexers would refuse them as they are. Each
// is replaced by its new batches in one transaction.
func (ob *Outbox) reseal() error {
	type old struct {
		e entry
		h *pb.Header
	}
	var stale []old
	err := ob.db.View(func(txn *badger.Txn) error {
		for seq, e := range ob.entries {
			item, err := txn.Get(outKey(seq))
			if err != nil {
				return err
			}
			var st pb.Stored
			var h pb.Header
			if err := item.Value(func(v []byte) error { return proto.Unmarshal(v, &st) }); err != nil {
				return err
			}
			if err := proto.Unmarshal(st.GetHeader(), &h); err != nil {
				return err
			}
			if h.GetShards() != ob.cfg.shards || string(h.GetSnapshot()) != string(ob.sid[:]) ||
				min(h.GetSize(), uint64(h.GetPartSize())) > uint64(ob.cfg.partSize()) {
				stale = append(stale, old{*e, &h})
			}
		}
		return nil
	})
	if err != nil || len(stale) == 0 {
		return err
	}
	slices.SortFunc(stale, func(a, b old) int { return cmp.Compare(a.e.seq, b.e.seq) })
	for _, o := range stale {
		var data []byte
		if err := ob.db.View(func(txn *badger.Txn) error {
			item, err := txn.Get(dataKey(o.e.seq))
			if err != nil {
				return err
			}
			data, err = item.ValueCopy(nil)
			return err
		}); err != nil {
			return err
		}
		b := crawl.Batch{Data: data, Records: int(o.h.GetRecords()), RawBytes: int(o.h.GetRawBytes())}
		if o.h.GetOldestMs() > 0 {
			b.Oldest = time.UnixMilli(o.h.GetOldestMs())
		}
		ss, _, err := ob.sealBatch(b)
		if err != nil {
			return fmt.Errorf("results: resealing batch %d: %w", o.e.seq, err)
		}
		if err := ob.db.Update(func(txn *badger.Txn) error {
			for _, s := range ss {
				for _, kv := range [][2][]byte{{outKey(s.hdr.Seq), s.stored}, {dataKey(s.hdr.Seq), s.data}} {
					if err := txn.Set(kv[0], kv[1]); err != nil {
						return err
					}
				}
			}
			if err := txn.Set(seqKey(), binary.BigEndian.AppendUint64(nil, ss[len(ss)-1].hdr.Seq+1)); err != nil {
				return err
			}
			for _, k := range [][]byte{outKey(o.e.seq), dataKey(o.e.seq)} {
				if err := txn.Delete(k); err != nil {
					return err
				}
			}
			for _, p := range o.e.acks {
				if err := txn.Delete(ackKey(o.e.seq, p)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return fmt.Errorf("results: resealing batch %d: %w", o.e.seq, err)
		}
		ob.mu.Lock()
		delete(ob.entries, o.e.seq)
		ob.bytes -= o.e.size
		ob.mu.Unlock()
		for _, s := range ss {
			ob.add(s)
		}
	}
	ob.log.Info("results outbox: batches signed again for the current configuration", "batches", len(stale))
	return nil
}

// waitRoom waits until need more bytes fit under the cap.
func (ob *Outbox) waitRoom(ctx context.Context, need int64) error {
	for {
		ob.mu.Lock()
		if ob.bytes == 0 || ob.bytes+need <= ob.cfg.outboxCap {
			if ob.full {
				ob.full = false
				ob.log.Info("results outbox has room again; crawling resumes", "bytes", ob.bytes, "cap", ob.cfg.outboxCap)
			}
			ob.mu.Unlock()
			return nil
		}
		if !ob.full {
			ob.full = true
			ob.stats.paused.Add(1)
			ob.log.Warn("results outbox full: crawling paused until indexers acknowledge stored batches",
				"bytes", ob.bytes, "cap", ob.cfg.outboxCap, "batches", len(ob.entries), "indexers", ob.liveIndexersLocked(ob.cfg.now()))
		}
		ch := ob.space
		ob.mu.Unlock()
		select {
		case <-ch:
		case <-ob.done:
			return ErrClosed
		case <-ctx.Done():
			ob.mu.Lock()
			fits := ob.bytes+need <= ob.cfg.outboxCap+ob.cfg.reserve
			ob.mu.Unlock()
			if fits {
				ob.stats.reserve.Add(1)
				ob.log.Warn("results outbox over its cap: batch kept in the shutdown reserve", "bytes", ob.bytes, "cap", ob.cfg.outboxCap)
				return nil
			}
			return fmt.Errorf("%w (%d bytes, cap %d): %w", ErrOutboxFull, ob.bytes, ob.cfg.outboxCap, ctx.Err())
		}
	}
}

// store writes sealed batches and the advanced sequence counter in one
// transaction, or one transaction per batch when they do not fit one.
func (ob *Outbox) store(ss []*sealed) error {
	write := func(txn *badger.Txn, s *sealed) error {
		if err := txn.Set(outKey(s.hdr.Seq), s.stored); err != nil {
			return err
		}
		if err := txn.Set(dataKey(s.hdr.Seq), s.data); err != nil {
			return err
		}
		return txn.Set(seqKey(), binary.BigEndian.AppendUint64(nil, s.hdr.Seq+1))
	}
	err := ob.db.Update(func(txn *badger.Txn) error {
		for _, s := range ss {
			if err := write(txn, s); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, badger.ErrTxnTooBig) {
		for _, s := range ss {
			if err = ob.db.Update(func(txn *badger.Txn) error { return write(txn, s) }); err != nil {
				break
			}
			ob.add(s)
		}
		if err != nil {
			return fmt.Errorf("storing result batch: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("storing result batch: %w", err)
	}
	for _, s := range ss {
		ob.add(s)
	}
	return nil
}

// add records a stored batch in memory.
func (ob *Outbox) add(s *sealed) {
	e := &entry{seq: s.hdr.Seq, digest: s.digest, shard: s.hdr.Shard, created: time.UnixMilli(s.hdr.CreatedMs), size: s.size()}
	ob.mu.Lock()
	ob.entries[e.seq] = e
	ob.bytes += e.size
	ob.nextSeq = max(ob.nextSeq, e.seq+1)
	ob.mu.Unlock()
	ob.stats.stored.Add(1)
}

// HandleAck records the acknowledgements
// of a known indexer and removes batches acknowledged by enough indexers.
// References to unknown batches, other nodes' batches or with another
// digest are ignored; acknowledgements from a peer that is not a known
// (and trusted) indexer fail with ErrNotIndexer, which overlay reports to
// the peer as unavailable.
func (ob *Outbox) HandleAck(ctx context.Context, from peer.ID, refs []BatchRef) error {
	if ob.closed.Load() {
		return ErrClosed
	}
	ob.ackMu.Lock()
	defer ob.ackMu.Unlock()
	ob.mu.Lock()
	_, known := ob.indexers[from]
	ob.mu.Unlock()
	if !known && !(ob.cfg.trusted != nil && ob.cfg.trusted[from]) {
		return fmt.Errorf("%w: %w: %s", overlay.ErrUnavailable, ErrNotIndexer, from)
	}
	type change struct {
		e    *entry
		done bool
	}
	var changes []change
	ob.mu.Lock()
	for _, r := range refs {
		e := ob.entries[r.Seq]
		if r.Node != ob.self || e == nil || e.digest != r.Digest || slices.Contains(e.acks, from) {
			continue
		}
		if slices.ContainsFunc(changes, func(c change) bool { return c.e == e }) {
			continue
		}
		changes = append(changes, change{e, len(e.acks)+1 >= ob.cfg.acks})
	}
	ob.mu.Unlock()
	if len(changes) == 0 {
		return nil
	}
	err := ob.db.Update(func(txn *badger.Txn) error {
		for _, c := range changes {
			if !c.done {
				if err := txn.Set(ackKey(c.e.seq, from), nil); err != nil {
					return err
				}
				continue
			}
			for _, k := range [][]byte{outKey(c.e.seq), dataKey(c.e.seq)} {
				if err := txn.Delete(k); err != nil {
					return err
				}
			}
			for _, p := range c.e.acks {
				if err := txn.Delete(ackKey(c.e.seq, p)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("recording acknowledgements: %w", err)
	}
	ob.mu.Lock()
	freed := false
	for _, c := range changes {
		ob.stats.acked.Add(1)
		if !c.done {
			c.e.acks = append(c.e.acks, from)
			continue
		}
		if ob.entries[c.e.seq] == c.e {
			delete(ob.entries, c.e.seq)
			ob.bytes -= c.e.size
			freed = true
			ob.stats.removed.Add(1)
		}
	}
	if freed {
		close(ob.space)
		ob.space = make(chan struct{})
	}
	ob.mu.Unlock()
	if freed {
		ob.poke() // a window slot is free
	}
	return nil
}

// poke wakes the publisher.
func (ob *Outbox) poke() {
	select {
	case ob.wake <- struct{}{}:
	default:
	}
}

// liveIndexersLocked counts the indexers whose announcement holds at now.
func (ob *Outbox) liveIndexersLocked(now time.Time) int {
	n := 0
	for _, k := range ob.indexers {
		if now.Before(k.expires) {
			n++
		}
	}
	return n
}

// servedLocked reports whether a live indexer takes shard.
func (ob *Outbox) servedLocked(shard uint32, now time.Time) bool {
	for _, k := range ob.indexers {
		if now.Before(k.expires) && k.takes(shard, ob.cfg.shards) {
			return true
		}
	}
	return false
}

// backoff is the wait before the attempts-th re-announcement, with ±10 %
// jitter so that nodes restarted together spread out.
func (ob *Outbox) backoff(attempts int) time.Duration {
	d := ob.cfg.retryBase << min(max(attempts-1, 0), 20)
	if d > ob.cfg.retryMax || d <= 0 {
		d = ob.cfg.retryMax
	}
	return time.Duration(float64(d) * (0.9 + 0.2*rand.Float64()))
}

// publisher publishes due batches: new ones at once, unacknowledged ones
// again after their backoff, only for shards a live indexer takes, within
// the window and gap of Pace.
func (ob *Outbox) publisher() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		e, wait := ob.nextDue()
		if e != nil {
			ob.publishEntry(*e)
			if ob.cfg.gap > 0 {
				wait = ob.cfg.gap
			} else {
				continue
			}
		}
		timer.Reset(wait)
		select {
		case <-ob.ctx.Done():
			return
		case <-ob.wake:
		case <-timer.C:
		}
	}
}

// nextDue returns the batch to publish now, or nil and how long to wait
// before looking again.
func (ob *Outbox) nextDue() (*entry, time.Duration) {
	now := ob.cfg.now()
	ob.mu.Lock()
	defer ob.mu.Unlock()
	inflight := 0
	for _, e := range ob.entries {
		if !e.lastPub.IsZero() && now.Sub(e.lastPub) < ob.cfg.ackWait {
			inflight++
		}
	}
	var best *entry
	wait := time.Hour
	for _, e := range ob.entries {
		if !ob.servedLocked(e.shard, now) {
			continue // waits for an indexer of its shard
		}
		if e.next.After(now) {
			wait = min(wait, e.next.Sub(now))
			continue
		}
		if best == nil || e.next.Before(best.next) || (e.next.Equal(best.next) && e.seq < best.seq) {
			best = e
		}
	}
	if best != nil && inflight >= ob.cfg.window {
		// Wait for an acknowledgement (a poke) or the oldest slot to expire.
		for _, e := range ob.entries {
			if !e.lastPub.IsZero() && now.Sub(e.lastPub) < ob.cfg.ackWait {
				wait = min(wait, ob.cfg.ackWait-now.Sub(e.lastPub))
			}
		}
		return nil, max(wait, time.Millisecond)
	}
	if best == nil {
		return nil, wait
	}
	best.attempts++
	best.lastPub = now
	best.next = now.Add(ob.backoff(best.attempts))
	c := *best
	c.acks = nil
	return &c, wait
}

// publishEntry reads a batch from badger and publishes its parts. e is a
// copy taken under the lock.
func (ob *Outbox) publishEntry(e entry) {
	var st pb.Stored
	var data []byte
	err := ob.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(outKey(e.seq))
		if err != nil {
			return err
		}
		if err := item.Value(func(v []byte) error { return proto.Unmarshal(v, &st) }); err != nil {
			return err
		}
		if item, err = txn.Get(dataKey(e.seq)); err != nil {
			return err
		}
		data, err = item.ValueCopy(nil)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return // acknowledged meanwhile
	}
	if err != nil {
		ob.log.Warn("reading result batch failed", "seq", e.seq, "error", err)
		return
	}
	var h pb.Header
	if err := proto.Unmarshal(st.GetHeader(), &h); err != nil {
		ob.log.Warn("reading result batch failed", "seq", e.seq, "error", err)
		return
	}
	s := &sealed{hdr: &h, hdrRaw: st.GetHeader(), sig: st.GetSignature(), pub: st.GetPublicKey(), data: data}
	msgs, err := s.envelopes()
	if err != nil {
		ob.log.Warn("encoding result batch failed", "seq", e.seq, "error", err)
		return
	}
	ctx, cancel := context.WithTimeout(ob.ctx, 30*time.Second)
	defer cancel()
	for i, m := range msgs {
		if i > 0 && ob.cfg.gap > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(ob.cfg.gap):
			}
		}
		if err := ob.publish(ctx, e.shard, m); err != nil {
			ob.log.Debug("publishing result batch failed", "seq", e.seq, "error", err)
			return
		}
	}
	if e.attempts > 1 {
		ob.stats.republished.Add(1)
	} else {
		ob.stats.published.Add(1)
	}
	if ob.log.Enabled(ctx, slog.LevelDebug) {
		ob.log.Debug("result batch published", "seq", e.seq, "shard", e.shard, "parts", len(msgs), "attempt", e.attempts)
	}
}

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

// OutboxStats are the outbox's counters and state.
type OutboxStats struct {
	Batches  int   // batches stored and not yet acknowledged enough
	Bytes    int64 // their size
	Cap      int64
	Full     bool // Results is waiting for room
	Indexers int  // indexers whose announcement holds

	Stored, Published, Republished uint64 // batches since NewOutbox
	Acks, Removed                  uint64 // acknowledgements counted, batches removed
	Paused, Reserve                uint64 // times the cap paused Results; batches kept in the reserve
}

// Stats returns the outbox's counters.
func (ob *Outbox) Stats() OutboxStats {
	ob.mu.Lock()
	s := OutboxStats{Batches: len(ob.entries), Bytes: ob.bytes, Cap: ob.cfg.outboxCap, Full: ob.full,
		Indexers: ob.liveIndexersLocked(ob.cfg.now())}
	ob.mu.Unlock()
	s.Stored, s.Published, s.Republished = ob.stats.stored.Load(), ob.stats.published.Load(), ob.stats.republished.Load()
	s.Acks, s.Removed = ob.stats.acked.Load(), ob.stats.removed.Load()
	s.Paused, s.Reserve = ob.stats.paused.Load(), ob.stats.reserve.Load()
	return s
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

func sha256Sum(b []byte) [32]byte { return sha256.Sum256(b) }
