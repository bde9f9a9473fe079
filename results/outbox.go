package results

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/internal/check"
	"github.com/micra-net/micra/internal/kv"
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

	life                 sync.Mutex // Start, Switch and Close, one at a time
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
	if err := check.Apply(&cfg, opts); err != nil {
		return nil, err
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

// errSchema: the namespace was written by a build with another layout.
var errSchema = errors.New("results: unsupported schema version")

// CheckSchema writes the schema version into an empty namespace, or checks
// it.
func CheckSchema(txn *badger.Txn) error {
	return kv.Schema(txn, schemaKey(), []byte{schemaVersion}, errSchema)
}

// load reads the sequence counter, the outbox entries, their
// acknowledgements and the known indexers.
func (ob *Outbox) load() error {
	return ob.db.Update(func(txn *badger.Txn) error {
		if err := CheckSchema(txn); err != nil {
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

// Start attaches the outbox to the overlay: it joins the result topics and
// the indexer topic, learns indexers from their announcements, connects to
// them, and publishes the stored batches. It may be called once.
func (ob *Outbox) Start(o *overlay.Overlay) error {
	if o == nil {
		return errors.New("results: nil overlay")
	}
	err := ErrClosed
	ob.startOnce.Do(func() {
		ob.life.Lock()
		defer ob.life.Unlock()
		err = ob.start(o)
	})
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
	removeAcks := ServeAcks(ob.h, ob.log, ob.HandleAck)
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

// Switch moves the started outbox to o, the overlay of the snapshot sid
// (a node switching snapshots closes its overlay and starts one on the
// new snapshot): it leaves the old overlay's topics and acknowledgement
// protocol, signs its stored batches again under sid, and starts on o.
// Indexers known from announcements stay known until their announcements
// expire; only announcements for sid are taken from now on. A batch that
// Results seals while Switch runs may keep the old snapshot until the next
// start; indexers accept both during a change (indexer.AcceptSnapshots).
func (ob *Outbox) Switch(o *overlay.Overlay, sid subnet.SnapshotID) error {
	if o == nil {
		return errors.New("results: nil overlay")
	}
	ob.life.Lock()
	defer ob.life.Unlock()
	if ob.closed.Load() {
		return ErrClosed
	}
	if ob.net == nil {
		return errors.New("results: Switch before Start")
	}
	if err := ob.detach(); err != nil {
		// The old overlay is closed already: its topics say so.
		ob.log.Debug("results outbox: leaving the old overlay", "error", err)
	}
	ob.ackMu.Lock()
	ob.mu.Lock()
	ob.sid = sid
	ob.mu.Unlock()
	err := ob.reseal()
	ob.ackMu.Unlock()
	if err != nil {
		// The batches keep their old signatures: indexers taking both
		// snapshots still take them, and the next start seals them again.
		ob.log.Warn("results outbox: batches not signed again for the new snapshot", "error", err)
	}
	return ob.start(o)
}

// detach stops the goroutines Start began and leaves the overlay's topics
// and protocol; the caller holds life.
func (ob *Outbox) detach() error {
	if ob.cancel != nil {
		ob.cancel()
	}
	ob.wg.Wait()
	if ob.sub != nil {
		ob.sub.Cancel()
		ob.sub = nil
	}
	var errs []error
	for _, r := range ob.release {
		errs = append(errs, r())
	}
	ob.release = nil
	return errors.Join(errs...)
}

// Close stops publishing and waits for the outbox's goroutines. Stored
// batches stay in the database for the next start. A Results call waiting
// for room returns ErrClosed, so close the crawler first: its last batch
// then still reaches the outbox. Close does not close the database and is
// safe to call more than once.
func (ob *Outbox) Close() error {
	ob.closeOnce.Do(func() {
		ob.life.Lock()
		defer ob.life.Unlock()
		ob.closed.Store(true)
		close(ob.done)
		err := ob.detach()
		if ob.h != nil && ob.cfg.connectIndex {
			ob.mu.Lock()
			for p := range ob.indexers {
				ob.h.ConnManager().Unprotect(p, protectTag)
			}
			ob.mu.Unlock()
		}
		ob.closeErr = err
	})
	return ob.closeErr
}

const protectTag = "micra-results"

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

func sha256Sum(b []byte) [32]byte { return sha256.Sum256(b) }
