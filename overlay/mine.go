package overlay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

// noteAssigned records that a verified delegation record names this node:
// the subnet is added to Owned and its shard to the heartbeat set.
func (o *Overlay) noteAssigned(sr *pb.SignedRecord) {
	rec, err := openRecord(o.sid, sr)
	if err != nil || rec.GetKind() != pb.Record_DELEGATION {
		return
	}
	d := delegationFrom(rec)
	id, part, ok := rangeOrPart(o.tree, d.Subnet)
	if !ok || d.Node != o.h.ID() {
		return
	}
	ref := o.coord.rangeShard(id)
	key := ref.key(o.sid)
	rk := rangeKey(d.Subnet)
	o.mu.Lock()
	old, had := o.owned[string(rk)]
	fresh := !had || newer(rec, &pb.Record{Epoch: old.Epoch, Seq: old.Seq})
	if fresh {
		o.own(d, part)
	}
	if !had {
		o.changes.add(SubnetChange{At: time.Now(), Subnet: d.Subnet, Gained: true, Own: d.Own, Reason: gainedReason(d)})
	}
	_, known := o.mine[key]
	o.mine[key] = ref
	o.mu.Unlock()
	o.cache.put(d, part)
	if !known || fresh {
		err := o.db.Update(func(txn *badger.Txn) error {
			if !known {
				v, _ := proto.Marshal(ref.toPB())
				if err := txn.Set(mineKey(key), v); err != nil {
					return err
				}
			}
			if fresh {
				v, _ := proto.Marshal(sr)
				return txn.Set(ownedKey(rk), v)
			}
			return nil
		})
		if err != nil {
			o.log.Warn("storing a delegation failed", "subnet", d.Subnet, "error", err)
		}
	}
}

// loadMine restores, after a restart, the shards this node heartbeats and
// the delegations naming it (verified again; the first heartbeats drop
// those its coordinators no longer hold).
func (o *Overlay) loadMine() error {
	var stale [][]byte
	carry := map[string][]byte{} // delegations of the previous snapshot to carry, by their new key
	err := o.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: minePrefix()})
		defer it.Close()
		for it.Seek(minePrefix()); it.ValidForPrefix(minePrefix()); it.Next() {
			var p pb.ShardRef
			if err := it.Item().Value(func(v []byte) error { return proto.Unmarshal(v, &p) }); err != nil {
				return err
			}
			if ref, err := o.coord.shardRefFromPB(&p); err == nil {
				o.mine[ref.key(o.sid)] = ref
			}
		}
		it2 := txn.NewIterator(badger.IteratorOptions{Prefix: ownedPrefix()})
		defer it2.Close()
		for it2.Seek(ownedPrefix()); it2.ValidForPrefix(ownedPrefix()); it2.Next() {
			var sr pb.SignedRecord
			if err := it2.Item().Value(func(v []byte) error { return proto.Unmarshal(v, &sr) }); err != nil {
				return err
			}
			rec, err := openRecord(o.sid, &sr)
			var d Delegation
			if err == nil {
				d = delegationFrom(rec)
			}
			_, part, inTree := rangeOrPart(o.tree, d.Subnet)
			if err != nil || rec.GetKind() != pb.Record_DELEGATION || d.Node != o.h.ID() || !inTree {
				stale = append(stale, it2.Item().KeyCopy(nil)) // another snapshot, or not ours
				if o.cfg.prev != nil {
					if pd, _, perr := o.previousDelegation(&sr); perr == nil && pd.Node == o.h.ID() && !pd.Orphaned {
						v, _ := proto.Marshal(&sr)
						carry[string(carryKey(rangeKey(pd.Subnet)))] = v
					}
				}
				continue
			}
			o.own(d, part)
		}
		return nil
	})
	if err != nil || len(stale) == 0 {
		return err
	}
	return o.db.Update(func(txn *badger.Txn) error {
		for k, v := range carry {
			if err := txn.Set([]byte(k), v); err != nil {
				return err
			}
		}
		for _, k := range stale {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

// heartbeatAll sends one heartbeat to the coordinator of every shard in
// which this node holds delegations, and reconciles Owned with the answers.
func (o *Overlay) heartbeatAll(ctx context.Context) {
	if o.ownArmed.Load() && !o.ownDone.Load() {
		if _, err := o.ClaimOwn(ctx); err != nil {
			o.log.Debug("claiming the own subnet failed", "error", err)
		}
	}
	o.startCarries(ctx)
	o.mu.Lock()
	refs := make([]shardRef, 0, len(o.mine))
	for _, r := range o.mine {
		refs = append(refs, r)
	}
	subnets := uint32(len(o.owned))
	o.mu.Unlock()
	capacity, load := o.cfg.load()
	// Shards are beaten in parallel (at most 8 at once), so one slow or
	// departed coordinator does not delay the others past their timeout.
	parallel(ctx, 8, refs, func(ref shardRef) { o.heartbeat(ctx, ref, capacity, load, subnets) })
}

func (o *Overlay) heartbeat(ctx context.Context, ref shardRef, capacity, load uint64, subnets uint32) {
	req := newMsg(pb.Message_HEARTBEAT)
	req.Heartbeat = &pb.Heartbeat{Snapshot: o.sid[:], Shard: ref.toPB(), Capacity: capacity, Load: load, Subnets: subnets}
	hctx, cancel := context.WithTimeout(ctx, max(2*o.cfg.heartbeat, time.Second))
	resp, coord, err := o.askCoordinatorFrom(hctx, coordSpec, ref, req, pb.Message_HEARTBEAT_ACK)
	cancel()
	if err != nil {
		o.log.Debug("heartbeat failed", "shard", ref.String(), "error", err)
		return
	}
	o.beats.bump(coord)
	ack := resp.GetHeartbeatAck()
	if len(ack.GetSubnets()) > maxHeartbeatList {
		return
	}
	held := map[string]subnet.Range{}
	for _, r := range ack.GetSubnets() {
		if rg, err := rangeFromPB(r); err == nil {
			held[string(rangeKey(rg))] = rg
		}
	}
	key := ref.key(o.sid)
	var dropped [][]byte // owned records to delete
	var unknown []Delegation
	o.mu.Lock()
	adopt := o.notHeld(key, held)
	kept := false                   // a subnet of the shard is still held, or too recent to judge
	for k := range o.ownedIn[key] { // disown below deletes from it: allowed while ranging
		d := o.owned[k]
		_, part, _ := rangeOrPart(o.tree, d.Subnet)
		if _, listed := held[k]; !listed && !ack.GetTruncated() && time.Since(d.Decided) > o.cfg.heartbeat {
			o.disown(k, part)
			dropped = append(dropped, ownedKey([]byte(k)))
			o.cache.invalidate(d.Subnet)
			why := reasonLost
			if d.Own {
				why = reasonOwnLost
			}
			o.changes.add(SubnetChange{At: time.Now(), Subnet: d.Subnet, Own: d.Own, Reason: why})
			if d.Own {
				// The coordinator does not know our claim (a takeover
				// that missed it, or a reassignment): claim it again.
				o.ownDone.Store(false)
			} else if d.Addr.IsValid() && !part {
				// A part is not asked for again: its sites fall back
				// to the range's delegation, which splits it again
				// when they are far from it.
				unknown = append(unknown, d)
			}
			continue
		}
		kept = true
	}
	// The shard leaves the heartbeat set only when nothing in it is held:
	// an answer computed before a decision landed must not stop the
	// heartbeats that keep that decision alive.
	empty := len(held) == 0 && !ack.GetTruncated() && !kept
	if empty {
		delete(o.mine, key)
		delete(o.unheld, key)
	}
	o.mu.Unlock()
	if empty {
		dropped = append(dropped, mineKey(key))
	}
	if len(dropped) > 0 {
		err := o.db.Update(func(txn *badger.Txn) error {
			for _, k := range dropped {
				if err := txn.Delete(k); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, badger.ErrKeyNotFound) {
			o.log.Debug("dropping delegations failed", "error", err)
		}
	}
	for _, d := range unknown {
		select {
		case o.askQ <- d:
		default:
			o.log.Debug("ask-again queue full; dropped subnet left undelegated", "subnet", d.Subnet.String())
		}
	}
	for _, r := range adopt {
		if err := o.adopt(ctx, ref, coord, r); err != nil {
			o.log.Debug("taking up a subnet the coordinator lists failed", "subnet", r.String(), "error", err)
		}
	}
}

// maxAdopt bounds the subnets one heartbeat takes up (adopt); more wait for
// the next heartbeats.
const maxAdopt = 16

// notHeld notes the subnets of listed (an ack's list for the shard with
// key, by range key) that this node does not hold, and returns those of
// them the shard's previous ack listed too, at most maxAdopt: an
// assignment whose ASSIGN is still on its way is not yet one to take up.
// o.mu is held.
func (o *Overlay) notHeld(key [32]byte, listed map[string]subnet.Range) []subnet.Range {
	prev := o.unheld[key]
	var now []string
	var out []subnet.Range
	for k, r := range listed {
		if _, ok := o.owned[k]; ok || len(now) == maxAdopt {
			continue
		}
		now = append(now, k)
		if slices.Contains(prev, k) {
			out = append(out, r)
		}
	}
	if len(now) == 0 {
		delete(o.unheld, key)
	} else {
		o.unheld[key] = now
	}
	return out
}

// adopt takes up subnet r of shard ref, which coordinator coord's
// heartbeat ack lists as this node's in two acks running though this node
// does not hold it: its ASSIGN was lost (the coordinator's notice queue
// was full, three tries failed, or this node did not yet count the writer
// among the shard's plausible coordinators while the shard changed hands).
// Without it, the subnet would stay delegated to a node that never crawls
// it, and never be orphaned while that node heartbeats the shard. The
// record comes from coord, which must be a plausible coordinator of the
// shard (as an ASSIGN's writer must), and must name this node, exactly r,
// and not be orphaned.
func (o *Overlay) adopt(ctx context.Context, ref shardRef, coord peer.ID, r subnet.Range) error {
	id, part, ok := rangeOrPart(o.tree, r)
	if !ok {
		return fmt.Errorf("%w: subnet %s", ErrNotFound, r)
	}
	if o.coord.rangeShard(id).key(o.sid) != ref.key(o.sid) {
		return fmt.Errorf("%w: subnet %s is not in shard %s", ErrBadRecord, r, ref.String())
	}
	if !o.coord.plausible(ctx, ref.key(o.sid), coord) {
		return fmt.Errorf("%w: %s is not among the peers closest to the shard", ErrForbidden, coord)
	}
	req := newMsg(pb.Message_RESOLVE)
	req.Resolve = &pb.Resolve{Snapshot: o.sid[:]}
	if part {
		req.Resolve.Addr = r.Start.AsSlice() // parts are found by an address in them
	} else {
		req.Resolve.Subnet = rangeToPB(r)
	}
	rctx, cancel := context.WithTimeout(ctx, max(2*o.cfg.heartbeat, time.Second))
	defer cancel()
	resp, err := o.askPeer(rctx, coordSpec, coord, req, pb.Message_DELEGATION, 0) // coord may be this node
	if err != nil {
		return err
	}
	sr := resp.GetDelegation().GetRecord()
	if sr == nil {
		return nil // no longer delegated
	}
	d, err := o.checkDelegation(sr, r)
	if err != nil {
		return err
	}
	if d.Node != o.h.ID() || d.Orphaned {
		return nil // decided again since the ack
	}
	o.noteAssigned(sr)
	o.stats.adopted.Add(1)
	o.log.Info("took up a subnet its coordinator lists as this node's", "subnet", r.String(), "coordinator", coord)
	return nil
}

// own records d, a part when part is set, as delegated to this node.
// o.mu is held.
func (o *Overlay) own(d Delegation, part bool) {
	k := string(rangeKey(d.Subnet))
	if _, had := o.owned[k]; !had && part {
		o.ownedParts++
	}
	o.owned[k] = d
	if key, ok := o.ownedShard(d.Subnet); ok {
		if o.ownedIn[key] == nil {
			o.ownedIn[key] = map[string]struct{}{}
		}
		o.ownedIn[key][k] = struct{}{}
	}
}

// disown forgets the delegation of range key k, a part when part is set.
// o.mu is held.
func (o *Overlay) disown(k string, part bool) {
	d, had := o.owned[k]
	if had && part {
		o.ownedParts--
	}
	delete(o.owned, k)
	delete(o.wonRTT, k)
	if key, ok := o.ownedShard(d.Subnet); had && ok {
		delete(o.ownedIn[key], k)
		if len(o.ownedIn[key]) == 0 {
			delete(o.ownedIn, key)
		}
	}
}

// ownedShard returns the key of the shard holding subnet r (a range or a
// part of one).
func (o *Overlay) ownedShard(r subnet.Range) ([32]byte, bool) {
	id, _, ok := rangeOrPart(o.tree, r)
	if !ok {
		return [32]byte{}, false
	}
	return o.coord.rangeShard(id).key(o.sid), true
}

// maxWonRTT bounds an RTT an assignment may report: longer is not a probe
// any node would win with.
const maxWonRTT = time.Minute

// noteWonRTT keeps rtt as the winning probe of subnet r, which this node
// holds; 0 or an RTT out of bounds is ignored.
func (o *Overlay) noteWonRTT(r subnet.Range, rtt time.Duration) {
	if rtt <= 0 || rtt > maxWonRTT {
		return
	}
	k := string(rangeKey(r))
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.owned[k]; ok {
		o.wonRTT[k] = rtt
	}
}

// WonRTT returns the probe from this node with which it won subnet r, as
// the deciding coordinator stored it, when r is delegated to this node
// and the coordinator had one (not for own claims, nor for decisions made
// from other subnets' probes). It is kept in memory only.
func (o *Overlay) WonRTT(r subnet.Range) (time.Duration, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	d, ok := o.wonRTT[string(rangeKey(r))]
	return d, ok
}

// maxAskAgain bounds the dropped subnets waiting to be asked about again;
// more are left undelegated until a URL of theirs is delegated anew.
const maxAskAgain = 256

// askAgainLoop asks the coordinators again, one at a time, for the subnets
// the heartbeats dropped because their coordinator did not list them as
// this node's (the heartbeats queue them, so that a slow delegation never
// delays a heartbeat): one moved elsewhere answers with its owner, and one
// the coordinator never saw is decided afresh rather than left
// undelegated. A coordinator that took over from another whose view of the
// closest peers differed does not have that one's decisions when it was not
// among the peers it trusts to write the shard (coordinator.plausible); the
// nodes it delegated to bring them back this way, through the delegation
// procedure, without any trust in the stale coordinator. It runs until the
// overlay closes.
func (o *Overlay) askAgainLoop() {
	for {
		select {
		case <-o.ctx.Done():
			return
		case d := <-o.askQ:
			nd, err := o.Delegate(o.ctx, d.URL, d.Addr)
			if err != nil {
				o.log.Debug("asking again for a dropped subnet failed", "subnet", d.Subnet.String(), "error", err)
				continue
			}
			o.log.Debug("dropped subnet asked again", "subnet", d.Subnet.String(), "node", nd.Node)
		}
	}
}
