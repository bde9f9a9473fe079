package results

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/dgraph-io/badger/v4"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/results/pb"
)

// Publishing: each stored batch goes out on its result topic, again with
// back-off until enough indexers acknowledged it.

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
