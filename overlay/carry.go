package overlay

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

// Carrying delegations across a snapshot switch (IPMicra thesis 7.5.3).
//
// A node switches snapshots by starting a new overlay on the new tree with
// Previous (the old tree and the release's activation time) on the same
// host and database. Its delegations of the old snapshot are still in the
// database (the signed records naming it); each is carried to where
// subnet.Propagate takes it: the same range (unchanged), the largest new
// ranges inside it (split), or the bigger new range its addresses fell into
// (merged). The node asks the coordinator of each new range with CARRY and
// the old record as evidence; the coordinator checks that the record is
// signed by a peer plausibly coordinating the old range's shard, that it
// names the asker, and that Propagate carries the old range to the new one,
// then records the delegation with the range it came from. Where two old
// delegations land on one new range (a merge), Propagate's preference
// decides, whatever order they arrive in: the case, then the larger share
// of the new range, then the old range that starts first. A delegation
// that lands nowhere (its range was removed) is dropped; its sites are
// delegated afresh when next met.
//
// So that no subnet is decided twice, a coordinator makes no fresh decision
// (DELEGATE, SPLIT, REDELEGATE, orphans) for one liveness timeout after the
// activation: a node that has not carried its delegations by then has
// stopped heartbeating, and its subnets would be orphaned anyway. Own-subnet
// claims go on: the paper gives a joining node its own subnet, and a carry
// that finds one refuses to replace it.

// carrying reports whether this node is in the window after a switch in
// which coordinators record carried delegations only.
func (o *Overlay) carrying() bool { return time.Now().Before(o.CarriedBy()) }

// errCarrying refuses fresh decisions during the carry window.
func (o *Overlay) errCarrying() error {
	return fmt.Errorf("%w: switching snapshots, carried delegations first until %s", ErrUnavailable,
		o.CarriedBy().UTC().Format(time.RFC3339))
}

// previousDelegation opens a record of the previous snapshot: a delegation
// of one of its ranges (parts are not carried: calibration splits again).
func (o *Overlay) previousDelegation(sr *pb.SignedRecord) (Delegation, subnet.ID, error) {
	prev := o.cfg.prev
	rec, err := openRecord(prev.ID(), sr)
	if err != nil {
		return Delegation{}, subnet.None, err
	}
	if rec.GetKind() != pb.Record_DELEGATION {
		return Delegation{}, subnet.None, fmt.Errorf("%w: not a delegation", ErrBadRecord)
	}
	d := delegationFrom(rec)
	id, ok := prev.Find(d.Subnet)
	if !ok {
		return Delegation{}, subnet.None, fmt.Errorf("%w: %s is not a range of the previous snapshot", ErrBadRecord, d.Subnet)
	}
	return d, id, nil
}

// carriedTo returns where Propagate takes old range r held by node.
func (o *Overlay) carriedTo(r subnet.Range, node peer.ID) []subnet.Carried {
	carried, _ := subnet.Propagate(o.cfg.prev, o.tree, []subnet.Delegation{{Range: r, Owner: string(node)}})
	return carried
}

func (o *Overlay) handleCarry(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
	rq := req.GetCarry()
	c := o.coord
	if err := c.checkSnapshot(rq.GetSnapshot()); err != nil {
		return nil, err
	}
	if o.cfg.prev == nil {
		return nil, fmt.Errorf("%w: this node knows no previous snapshot", ErrUnavailable)
	}
	nr, err := rangeFromPB(rq.GetSubnet())
	if err != nil || rq.GetRecord() == nil {
		return nil, fmt.Errorf("%w: carry of %v without a valid range or record", ErrMalformed, err)
	}
	nid, ok := o.tree.Find(nr)
	if !ok {
		return nil, fmt.Errorf("%w: range %s", ErrNotFound, nr)
	}
	old, oid, err := o.previousDelegation(rq.GetRecord())
	if err != nil {
		return nil, err
	}
	if old.Node != from || old.Orphaned {
		return nil, fmt.Errorf("%w: the record of %s names another node, or none", ErrForbidden, old.Subnet)
	}
	prev := o.cfg.prev
	oldKey := shardRef{kind: pb.ShardRef_RANGE, anchor: prev.Range(anchorIn(prev, o.cfg.anchorDepth, oid))}.key(prev.ID())
	if old.Writer != o.h.ID() && !c.plausible(ctx, oldKey, old.Writer) {
		return nil, fmt.Errorf("%w: %s did not coordinate %s's shard", ErrForbidden, old.Writer, old.Subnet)
	}
	var cand subnet.Carried
	for _, cr := range o.carriedTo(old.Subnet, from) {
		if cr.Range == nr {
			cand = cr
		}
	}
	if cand.Case == 0 {
		return nil, fmt.Errorf("%w: %s does not carry to %s", ErrForbidden, old.Subnet, nr)
	}
	sh, err := c.ensureOwner(ctx, c.rangeShard(nid))
	if err != nil {
		return nil, err
	}
	o.noteSeen(sh, from)
	sr, err := c.carry(ctx, sh, nid, cand, old)
	if err != nil {
		return nil, err
	}
	return o.delegationMsg(sr), nil
}

// carry records cand (old's delegation carried to range id) unless the
// range is held by its own-subnet claimer, decided afresh, or carried from
// a delegation Propagate prefers. Carries of one range run one at a time.
func (c *coordinator) carry(ctx context.Context, sh *shard, id subnet.ID, cand subnet.Carried, old Delegation) (*pb.SignedRecord, error) {
	r := c.tree.Range(id)
	fk := string(rangeKey(r))
	var f *flight
	for {
		var first bool
		if f, first = sh.join(fk); first {
			break
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	defer sh.land(fk, f)
	node := old.Node
	sr, cur, ok, err := c.lookup(sh, r)
	if err != nil {
		f.err = err
		return nil, err
	}
	if ok && !cur.Orphaned {
		if cur.Node == node {
			f.rec = sr
			return sr, nil
		}
		if !cur.CarriedFrom.Valid() {
			f.err = fmt.Errorf("%w: %s is held by %s (not carried)", ErrForbidden, r, cur.Node)
			return nil, f.err
		}
		held := subnet.Carried{Delegation: subnet.Delegation{Range: r, Owner: string(cur.Node)}, From: cur.CarriedFrom}
		for _, cr := range c.o.carriedTo(cur.CarriedFrom, cur.Node) {
			if cr.Range == r {
				held.Case = cr.Case
			}
		}
		if !cand.Beats(held) {
			f.err = fmt.Errorf("%w: %s is carried from %s to %s", ErrForbidden, r, cur.CarriedFrom, cur.Node)
			return nil, f.err
		}
		c.log.Info("carried delegation replaced by a preferred one", "subnet", r.String(), "from", cur.CarriedFrom.String(), "node", cur.Node, "by", cand.From.String())
	}
	url, addr := old.URL, old.Addr
	if !r.Contains(addr) {
		url, addr = "", netip.Addr{}
	}
	own := old.Own && cand.Case == subnet.Unchanged
	f.rec, f.err = c.recordRange(ctx, sh, r, c.tree.Org(id), node, url, addr, own, cand.From)
	return f.rec, f.err
}

// pendingCarries lists the signed records of the previous snapshot that
// name this node and are not carried yet, by their database key.
func (o *Overlay) pendingCarries() (map[string]*pb.SignedRecord, error) {
	out := map[string]*pb.SignedRecord{}
	if o.cfg.prev == nil {
		return out, nil
	}
	err := o.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: carryPrefix()})
		defer it.Close()
		for it.Seek(carryPrefix()); it.ValidForPrefix(carryPrefix()); it.Next() {
			var sr pb.SignedRecord
			if err := it.Item().Value(func(v []byte) error { return proto.Unmarshal(v, &sr) }); err != nil {
				return err
			}
			out[string(it.Item().KeyCopy(nil))] = &sr
		}
		return nil
	})
	return out, err
}

// maxCarryTime bounds how long after the activation a node keeps trying
// to carry its delegations, in liveness timeouts: by then coordinators
// decide afresh, and a carry that still fails is stale.
const maxCarryTime = 3

// carryWorkers is how many carries one node has in flight at once.
const carryWorkers = 8

// startCarries starts a pass of carries (carryAll, then carryProbes) in
// the background unless one is running or there is nothing to carry
// (heartbeatAll calls it every heartbeat). The heartbeats never wait for
// it: a carry waits for a coordinator that has just switched and may take
// a coordinator deadline, and a node whose heartbeats waited on a few of
// them in turn fell silent past the liveness timeout and lost the very
// subnets it was carrying.
func (o *Overlay) startCarries(ctx context.Context) {
	if o.cfg.prev == nil || !o.carryBusy.CompareAndSwap(false, true) {
		return
	}
	o.wg.Go(func() {
		defer o.carryBusy.Store(false)
		o.carryAll(ctx)
		o.carryProbes(ctx)
	})
}

// carryAll carries this node's pending delegations of the previous
// snapshot, carryWorkers at a time: each to every new range Propagate
// takes it to, until every one is recorded for this node or refused.
func (o *Overlay) carryAll(ctx context.Context) {
	pending, err := o.pendingCarries()
	if err != nil || len(pending) == 0 {
		return
	}
	giveUp := time.Now().After(o.cfg.prevAt.Add(maxCarryTime * o.cfg.liveness))
	keys := slices.Sorted(maps.Keys(pending))
	parallel(ctx, carryWorkers, keys, func(key string) {
		sr := pending[key]
		old, _, err := o.previousDelegation(sr)
		settled := err != nil || old.Node != o.h.ID()
		if !settled {
			settled = o.carryOne(ctx, sr, old) || giveUp
		}
		if settled {
			if err := o.db.Update(func(txn *badger.Txn) error { return txn.Delete([]byte(key)) }); err != nil {
				o.log.Warn("carried delegation not removed", "error", err)
			}
		}
	})
}

// carryOne carries one old delegation and reports whether it is settled:
// every new range recorded for this node, or refused, or none.
func (o *Overlay) carryOne(ctx context.Context, sr *pb.SignedRecord, old Delegation) bool {
	targets := o.carriedTo(old.Subnet, o.h.ID())
	if len(targets) == 0 {
		o.log.Info("delegation removed by the new snapshot", "subnet", old.Subnet.String())
		return true
	}
	settled := true
	for _, cr := range targets {
		if d, ok := o.ownedRange(cr.Range); ok && d.Node == o.h.ID() {
			continue
		}
		nid, _ := o.tree.Find(cr.Range)
		req := newMsg(pb.Message_CARRY)
		req.Carry = &pb.Carry{Snapshot: o.sid[:], Record: sr, Subnet: rangeToPB(cr.Range)}
		cctx, cancel := context.WithTimeout(ctx, coordDeadline)
		resp, err := o.askCoordinator(cctx, o.coord.rangeShard(nid), req, pb.Message_DELEGATION)
		cancel()
		switch {
		case errors.Is(err, ErrForbidden), errors.Is(err, ErrNotFound):
			o.log.Info("delegation not carried", "subnet", old.Subnet.String(), "to", cr.Range.String(), "error", err)
		case err != nil:
			settled = false
		default:
			nsr := resp.GetDelegation().GetRecord()
			if d, err := o.checkDelegation(nsr, cr.Range); err == nil && d.Node == o.h.ID() {
				o.noteAssigned(nsr)
				o.log.Info("delegation carried", "from", old.Subnet.String(), "to", cr.Range.String(), "case", cr.Case.String())
			} else if err != nil {
				settled = false
			}
		}
	}
	return settled
}

// ownedRange returns this node's delegation of r, if it holds one.
func (o *Overlay) ownedRange(r subnet.Range) (Delegation, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	d, ok := o.owned[string(rangeKey(r))]
	return d, ok
}

// CarriedBy returns when the carry window after the switch ends: the
// activation plus one liveness timeout, after which coordinators decide
// afresh and a delegation of the previous snapshot that was not carried
// is not this node's. The zero time without a previous snapshot.
func (o *Overlay) CarriedBy() time.Time {
	if o.cfg.prev == nil {
		return time.Time{}
	}
	return o.cfg.prevAt.Add(o.cfg.liveness)
}
