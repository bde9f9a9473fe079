package results

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/results/pb"
)

// Storing batches: sealed and signed per result shard, kept in badger under
// the outbox's cap until acknowledged.

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
	seq, sid := ob.nextSeq, ob.sid
	ob.mu.Unlock()
	for _, g := range groups {
		s, err := seal(ob.sk, ob.pub, batchMeta{node: ob.self, seq: seq, snapshot: sid, created: now,
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
	ob.mu.Lock()
	entries := make(map[uint64]entry, len(ob.entries))
	for seq, e := range ob.entries {
		entries[seq] = *e
	}
	sid := ob.sid
	ob.mu.Unlock()
	err := ob.db.View(func(txn *badger.Txn) error {
		for seq, e := range entries {
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
			if h.GetShards() != ob.cfg.shards || string(h.GetSnapshot()) != string(sid[:]) ||
				min(h.GetSize(), uint64(h.GetPartSize())) > uint64(ob.cfg.partSize()) {
				stale = append(stale, old{e, &h})
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
			return deleteEntry(txn, o.e)
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

// deleteEntry deletes a batch's keys: its header, its data and its
// acknowledgements.
func deleteEntry(txn *badger.Txn, e entry) error {
	keys := [][]byte{outKey(e.seq), dataKey(e.seq)}
	for _, p := range e.acks {
		keys = append(keys, ackKey(e.seq, p))
	}
	for _, k := range keys {
		if err := txn.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
