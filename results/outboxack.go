package results

import (
	"context"
	"fmt"
	"slices"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/overlay"
)

// Acknowledgements: an indexer's ack removes the batches it took.

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
			if err := deleteEntry(txn, *c.e); err != nil {
				return err
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
