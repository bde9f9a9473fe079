package overlay

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

// The delegation API: resolving, delegating and re-delegating the subnet
// of an address through its shard's coordinator, with the cache in front.

// Resolve returns the delegation holding a: the most specific part of a's
// smallest non-unary range delegated apart that holds a (Split), else the
// range's own; false when neither is delegated. Delegations resolved
// before come from the cache without a network round trip. An address the
// Egress policy refuses is refused (ErrForbidden) without asking anyone.
func (o *Overlay) Resolve(ctx context.Context, a netip.Addr) (Delegation, bool, error) {
	if err := o.refuseAddr(a); err != nil {
		return Delegation{}, false, fmt.Errorf("resolve: %w", err)
	}
	id := o.tree.SmallestNonUnary(a)
	if id == subnet.None {
		return Delegation{}, false, fmt.Errorf("resolve %v: invalid address", a)
	}
	a = a.Unmap()
	if d, ok := o.cache.holding(o.tree.Range(id), a); ok {
		o.stats.cacheHits.Add(1)
		return d, true, nil
	}
	o.stats.cacheMisses.Add(1)
	req := newMsg(pb.Message_RESOLVE)
	req.Resolve = &pb.Resolve{Snapshot: o.sid[:], Addr: a.AsSlice()}
	return o.resolveReq(ctx, id, a, req)
}

// Cached returns the delegation holding a (as Resolve) when this node knows
// it without asking anyone: a subnet or part delegated to this node, or one
// resolved, delegated or announced recently (the cache); the more specific
// of the two.
// It never touches the network; false means "not known here".
func (o *Overlay) Cached(a netip.Addr) (Delegation, bool) {
	id := o.tree.SmallestNonUnary(a)
	if id == subnet.None {
		return Delegation{}, false
	}
	a = a.Unmap()
	r := o.tree.Range(id)
	o.mu.Lock()
	own, mine := mostSpecific(r, a, o.ownedParts > 0, func(r subnet.Range) (Delegation, bool) {
		d, ok := o.owned[string(rangeKey(r))]
		return d, ok
	})
	o.mu.Unlock()
	if d, ok := o.cache.holding(r, a); ok && (!mine || own.Subnet.ContainsRange(d.Subnet)) {
		return d, true
	}
	return own, mine
}

// Lookup returns the delegation of exactly the range id, asking the
// coordinator of its shard.
func (o *Overlay) Lookup(ctx context.Context, id subnet.ID) (Delegation, bool, error) {
	r := o.tree.Range(id)
	if d, ok := o.cache.get(r); ok {
		o.stats.cacheHits.Add(1)
		return d, true, nil
	}
	req := newMsg(pb.Message_RESOLVE)
	req.Resolve = &pb.Resolve{Snapshot: o.sid[:], Subnet: rangeToPB(r)}
	return o.resolveReq(ctx, id, netip.Addr{}, req)
}

// resolveReq asks the coordinator of range id: about address a (its
// delegation, a part or id's own), or about exactly id when a is invalid.
func (o *Overlay) resolveReq(ctx context.Context, id subnet.ID, a netip.Addr, req *pb.Message) (Delegation, bool, error) {
	resp, err := o.askCoordinator(ctx, o.coord.rangeShard(id), req, pb.Message_DELEGATION)
	if err != nil {
		return Delegation{}, false, err
	}
	sr := resp.GetDelegation().GetRecord()
	if sr == nil {
		return Delegation{}, false, nil
	}
	var d Delegation
	if a.IsValid() {
		d, err = o.checkHolding(sr, id, a)
	} else {
		d, err = o.checkDelegation(sr, o.tree.Range(id))
	}
	if err != nil {
		return Delegation{}, false, err
	}
	if d.Orphaned {
		return Delegation{}, false, nil
	}
	o.cache.put(d, d.Subnet != o.tree.Range(id))
	return d, true, nil
}

// openDelegation verifies a received delegation record.
func (o *Overlay) openDelegation(sr *pb.SignedRecord) (Delegation, error) {
	rec, err := openRecord(o.sid, sr)
	if err != nil {
		return Delegation{}, err
	}
	if rec.GetKind() != pb.Record_DELEGATION {
		return Delegation{}, fmt.Errorf("%w: not a delegation", ErrBadRecord)
	}
	return delegationFrom(rec), nil
}

// checkDelegation verifies a delegation record received for subnet r.
func (o *Overlay) checkDelegation(sr *pb.SignedRecord, r subnet.Range) (Delegation, error) {
	d, err := o.openDelegation(sr)
	if err != nil {
		return Delegation{}, err
	}
	if d.Subnet != r {
		return Delegation{}, fmt.Errorf("%w: record for %s, asked about %s", ErrBadRecord, d.Subnet, r)
	}
	return d, nil
}

// Delegate returns the node crawling the subnet of a (the address url's
// host resolved to), running the delegation procedure on the subnet's
// coordinator when the subnet is not yet delegated. Concurrent calls for one
// subnet from any nodes yield one decision. When a lies in a part of the
// subnet delegated apart (Split), the part's delegation is returned. An
// address or URL host the Egress policy refuses is refused (ErrForbidden)
// without asking anyone.
func (o *Overlay) Delegate(ctx context.Context, url string, a netip.Addr) (Delegation, error) {
	if err := o.refuse(a, url); err != nil {
		return Delegation{}, fmt.Errorf("delegate: %w", err)
	}
	id := o.tree.SmallestNonUnary(a)
	if id == subnet.None {
		return Delegation{}, fmt.Errorf("delegate %v: invalid address", a)
	}
	if len(url) > maxURLLen {
		return Delegation{}, fmt.Errorf("delegate: %w: URL of %d bytes", ErrTooLarge, len(url))
	}
	a = a.Unmap()
	if d, ok := o.cache.holding(o.tree.Range(id), a); ok {
		o.stats.cacheHits.Add(1)
		return d, nil
	}
	req := newMsg(pb.Message_DELEGATE)
	req.Delegate = &pb.Delegate{Snapshot: o.sid[:], Addr: a.AsSlice(), Url: url}
	resp, err := o.askCoordinator(ctx, o.coord.rangeShard(id), req, pb.Message_DELEGATION)
	if err != nil {
		return Delegation{}, err
	}
	d, err := o.checkHolding(resp.GetDelegation().GetRecord(), id, a)
	if err != nil {
		return Delegation{}, err
	}
	o.cache.put(d, d.Subnet != o.tree.Range(id))
	if d.Node == o.h.ID() {
		o.noteAssigned(resp.GetDelegation().GetRecord())
	}
	return d, nil
}

// Redelegate asks the coordinator to run the delegation procedure again for
// subnet r, which must be delegated to this node (calibration: its fetches
// got slow). It returns the new delegation.
func (o *Overlay) Redelegate(ctx context.Context, r subnet.Range, reason string) (Delegation, error) {
	id, ok := o.tree.Find(r)
	if !ok {
		return Delegation{}, fmt.Errorf("redelegate %s: %w", r, ErrNotFound)
	}
	if len(reason) > 256 {
		reason = reason[:256]
	}
	req := newMsg(pb.Message_REDELEGATE)
	req.Redelegate = &pb.Redelegate{Snapshot: o.sid[:], Subnet: rangeToPB(r), Reason: reason}
	resp, err := o.askCoordinator(ctx, o.coord.rangeShard(id), req, pb.Message_DELEGATION)
	if err != nil {
		return Delegation{}, err
	}
	d, err := o.checkDelegation(resp.GetDelegation().GetRecord(), r)
	if err != nil {
		return Delegation{}, err
	}
	o.cache.invalidate(r)
	o.cache.put(d, false)
	return d, nil
}

// Recalibrate asks for a new decision for the subnet of server address a,
// with fresh probes, because this node's fetches from it got slow (IPMicra
// thesis 7.6.2; crawl.Calibrator signals it). It does nothing, returning
// ErrNotFound, when the subnet is not delegated to this node. The
// coordinator answers with the current delegation when the subnet was
// decided less than the RedelegateInterval ago.
func (o *Overlay) Recalibrate(ctx context.Context, a netip.Addr, reason string) (Delegation, error) {
	id := o.tree.SmallestNonUnary(a)
	if id == subnet.None {
		return Delegation{}, fmt.Errorf("recalibrate %v: invalid address", a)
	}
	r := o.tree.Range(id)
	o.mu.Lock()
	_, mine := o.owned[string(rangeKey(r))]
	o.mu.Unlock()
	if !mine {
		return Delegation{}, fmt.Errorf("recalibrate %s: %w: not delegated to this node", r, ErrNotFound)
	}
	if reason == "" {
		reason = "calibration"
	}
	return o.Redelegate(ctx, r, reason)
}

// reassign asks the coordinator of subnet t to move it from node from to
// node to, for the decision of subnet cause (load balancing).
func (o *Overlay) reassign(ctx context.Context, t subnet.ID, from, to peer.ID, cause subnet.ID) (Delegation, error) {
	req := newMsg(pb.Message_REASSIGN)
	req.Reassign = &pb.Reassign{Snapshot: o.sid[:], Subnet: rangeToPB(o.tree.Range(t)), Node: []byte(from), To: []byte(to),
		Cause: rangeToPB(o.tree.Range(cause))}
	resp, err := o.askCoordinator(ctx, o.coord.rangeShard(t), req, pb.Message_DELEGATION)
	if err != nil {
		return Delegation{}, err
	}
	d, err := o.checkDelegation(resp.GetDelegation().GetRecord(), o.tree.Range(t))
	if err != nil {
		return Delegation{}, err
	}
	o.cache.put(d, false)
	return d, nil
}

// Invalidate drops the cached delegation of r and of the parts delegated
// apart inside it (for example after its node refused a crawl request), so that
// Resolve asks r's coordinator again for any address in r.
func (o *Overlay) Invalidate(r subnet.Range) { o.cache.invalidate(r) }

// Owned returns the subnets delegated to this node, as last told by its
// coordinators.
func (o *Overlay) Owned() []Delegation {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := slices.AppendSeq(make([]Delegation, 0, len(o.owned)), maps.Values(o.owned))
	slices.SortFunc(out, func(a, b Delegation) int { return a.Subnet.Start.Compare(b.Subnet.Start) })
	return out
}

// Coordinator returns the peer this node currently takes as the coordinator
// of the shard holding subnet id (a DHT lookup when not cached).
func (o *Overlay) Coordinator(ctx context.Context, id subnet.ID) peer.ID {
	return o.coord.closestPeers(ctx, o.coord.rangeShard(id).key(o.sid), false)[0]
}

// Judges reports whether p coordinates or replicates the shard of the
// subnet of address a: one of the peers that judge withholding notices
// about it (a deputy is a replica).
func (o *Overlay) Judges(ctx context.Context, a netip.Addr, p peer.ID) bool {
	c := o.coord
	key := c.rangeShard(o.tree.SmallestNonUnary(a)).key(o.sid)
	return slices.Contains(c.replicaSet(c.closestPeers(ctx, key, false)), p)
}
