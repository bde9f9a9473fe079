package overlay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio/pbio"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

func protocolID(s string) protocol.ID { return protocol.ID(s) }

func randFloat() float64 { return rand.Float64() }

func (o *Overlay) localProbe(ctx context.Context, url string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, probeDeadline-time.Second)
	defer cancel()
	if err := o.waitWindow(ctx); err != nil {
		return 0, err
	}
	rtt, err := o.cfg.prober.Probe(ctx, url)
	if probeRefused(err) {
		// Not a probe that failed: one this node does not run (its
		// egress guard found only special-purpose addresses).
		return 0, fmt.Errorf("%w: %s: %w", ErrForbidden, url, err)
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrProbeFailed, err)
	}
	if rtt < 0 {
		return 0, fmt.Errorf("%w: negative RTT", ErrProbeFailed)
	}
	return rtt, nil
}

// waitWindow returns when the operator's windows allow probing: at once
// when they are open, after waiting when the next opens within the
// configured wait, and ErrUnavailable otherwise.
func (o *Overlay) waitWindow(ctx context.Context) error {
	if o.cfg.probeSched == nil {
		return nil
	}
	now := time.Now()
	next := o.cfg.probeSched.NextOpen(now)
	wait := next.Sub(now)
	if wait <= 0 {
		return nil
	}
	if wait > o.cfg.probeWait {
		return fmt.Errorf("%w: outside the probing windows until %s", ErrUnavailable, next.UTC().Format(time.RFC3339))
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (o *Overlay) handleProbe(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
	if o.cfg.prober == nil {
		return nil, fmt.Errorf("%w: this node does not probe", ErrUnavailable)
	}
	url := req.GetProbe().GetUrl()
	if url == "" || len(url) > maxURLLen {
		return nil, fmt.Errorf("%w: URL of %d bytes", ErrMalformed, len(url))
	}
	if err := o.refuseURL(url); err != nil {
		return nil, err
	}
	if err := o.limit(o.cfg.rateLimits.probe, from, "probe"); err != nil {
		return nil, err
	}
	rtt, err := o.localProbe(ctx, url)
	if err != nil {
		return nil, err
	}
	m := newMsg(pb.Message_PROBE_RESULT)
	m.ProbeResult = &pb.ProbeResult{RttMicros: rtt.Microseconds()}
	return m, nil
}

// addrFromWire decodes a 4- or 16-byte address.
func addrFromWire(b []byte) (netip.Addr, error) {
	if len(b) != 4 && len(b) != 16 {
		return netip.Addr{}, fmt.Errorf("%w: address of %d bytes", ErrMalformed, len(b))
	}
	a, _ := netip.AddrFromSlice(b)
	return a.Unmap(), nil
}

// checkAddrRequest checks the fields a request about a server address
// carries (DELEGATE, SPLIT): the snapshot, the address and the URL's size,
// and that the policy allows both the address and the URL's host (a peer
// may not share this node's policy).
func (o *Overlay) checkAddrRequest(snapshot, addr []byte, url string) (netip.Addr, error) {
	if err := o.coord.checkSnapshot(snapshot); err != nil {
		return netip.Addr{}, err
	}
	a, err := addrFromWire(addr)
	if err != nil {
		return netip.Addr{}, err
	}
	if len(url) > maxURLLen {
		return netip.Addr{}, fmt.Errorf("%w: URL of %d bytes", ErrTooLarge, len(url))
	}
	if err := o.refuse(a, url); err != nil {
		return netip.Addr{}, err
	}
	return a, nil
}

func (o *Overlay) delegationMsg(sr *pb.SignedRecord) *pb.Message {
	m := newMsg(pb.Message_DELEGATION)
	m.Delegation = &pb.Delegation{Record: sr}
	return m
}

func (o *Overlay) noteSeen(sh *shard, from peer.ID) {
	sh.mu.Lock()
	sh.lastSeen[from] = time.Now()
	sh.mu.Unlock()
}

func (o *Overlay) handleResolve(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
	rq := req.GetResolve()
	if err := o.coord.checkSnapshot(rq.GetSnapshot()); err != nil {
		return nil, err
	}
	var (
		id subnet.ID
		a  netip.Addr // when valid: resolve the delegation holding a
	)
	if rq.GetSubnet() != nil {
		r, err := rangeFromPB(rq.GetSubnet())
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		var ok bool
		if id, ok = o.tree.Find(r); !ok {
			return nil, fmt.Errorf("%w: range %s", ErrNotFound, r)
		}
	} else {
		var err error
		if a, err = addrFromWire(rq.GetAddr()); err != nil {
			return nil, err
		}
		if err := o.refuseAddr(a); err != nil {
			return nil, err
		}
		if id = o.tree.SmallestNonUnary(a); id == subnet.None {
			return nil, fmt.Errorf("%w: %v is in no range", ErrNotFound, a)
		}
	}
	sh, err := o.coord.ensureOwner(ctx, o.coord.rangeShard(id))
	if err != nil {
		return nil, err
	}
	var (
		sr *pb.SignedRecord
		ok bool
	)
	if a.IsValid() {
		sr, _, ok, err = o.coord.holding(sh, id, a)
	} else {
		var d Delegation
		sr, d, ok, err = o.coord.lookup(sh, o.tree.Range(id))
		ok = ok && !d.Orphaned
	}
	if err != nil {
		return nil, err
	}
	if !ok {
		return o.delegationMsg(nil), nil
	}
	return o.delegationMsg(sr), nil
}

func (o *Overlay) handleDelegate(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
	rq := req.GetDelegate()
	a, err := o.checkAddrRequest(rq.GetSnapshot(), rq.GetAddr(), rq.GetUrl())
	if err != nil {
		return nil, err
	}
	id := o.tree.SmallestNonUnary(a)
	if rq.GetOwn() && !o.inSubnet(ctx, from, id) {
		seen, _ := ctx.Value(remoteKey{}).(netip.Addr)
		return nil, fmt.Errorf("%w: own-subnet claim for %s from address %v", ErrForbidden, o.tree.Range(id), seen)
	}
	sh, err := o.coord.ensureOwner(ctx, o.coord.rangeShard(id))
	if err != nil {
		return nil, err
	}
	o.noteSeen(sh, from)
	sr, err := o.coord.decide(sh, DelegateRequest{Subnet: id, Addr: a, URL: rq.GetUrl(), From: from, Own: rq.GetOwn()}, false)
	if err != nil {
		return nil, err
	}
	if !rq.GetOwn() {
		// a may lie in a part of the subnet delegated apart.
		if psr, _, ok, err := o.coord.holding(sh, id, a); err == nil && ok {
			sr = psr
		}
	}
	return o.delegationMsg(sr), nil
}

// inSubnet reports whether peer p is known to sit in subnet id: this
// node's own address for itself; for a peer, the IP address of one of the
// live direct connections with it — the source of a connection it dialed
// or the address it answered at for one dialed to it, each proven by the
// handshake. On a loopback test bed QUIC dials leave from 127.0.0.1 rather
// than the node's bound address, so the claim is granted over TCP or once
// the coordinator has dialed the node; the claimer retries with its
// heartbeats.
func (o *Overlay) inSubnet(ctx context.Context, p peer.ID, id subnet.ID) bool {
	in := func(a netip.Addr) bool { return a.IsValid() && o.tree.SmallestNonUnary(a) == id }
	if p == o.h.ID() {
		return in(o.cfg.ownAddr)
	}
	if a, ok := ctx.Value(remoteKey{}).(netip.Addr); ok && in(a) {
		return true
	}
	for _, c := range o.h.Network().ConnsToPeer(p) {
		if a, ok := ipOf(c.RemoteMultiaddr()); ok && in(a) {
			return true
		}
	}
	return false
}

func (o *Overlay) handleRedelegate(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
	rq := req.GetRedelegate()
	if err := o.coord.checkSnapshot(rq.GetSnapshot()); err != nil {
		return nil, err
	}
	r, err := rangeFromPB(rq.GetSubnet())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	id, ok := o.tree.Find(r)
	if !ok {
		return nil, fmt.Errorf("%w: range %s", ErrNotFound, r)
	}
	sh, err := o.coord.ensureOwner(ctx, o.coord.rangeShard(id))
	if err != nil {
		return nil, err
	}
	cur, d, ok, err := o.coord.lookup(sh, r)
	if err != nil {
		return nil, err
	}
	if !ok || d.Node != from {
		return nil, fmt.Errorf("%w: %s is not delegated to the asker", ErrNotFound, r)
	}
	o.noteSeen(sh, from)
	if time.Since(d.Decided) < o.cfg.redelegate {
		return o.delegationMsg(cur), nil // decided recently: probes would say the same
	}
	reason := rq.GetReason()
	if len(reason) > 256 {
		reason = reason[:256]
	}
	if reason == "" {
		reason = "redelegate"
	}
	// Calibration: the asker's fetches got slow, so stored probes of the
	// subnet are stale; the procedure asks afresh.
	sr, err := o.coord.decide(sh, DelegateRequest{Subnet: id, From: from, Reason: reason, Fresh: time.Now()}, true)
	if err != nil {
		return nil, err
	}
	return o.delegationMsg(sr), nil
}

func (o *Overlay) handleHeartbeat(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
	rq := req.GetHeartbeat()
	if err := o.coord.checkSnapshot(rq.GetSnapshot()); err != nil {
		return nil, err
	}
	ref, err := o.coord.shardRefFromPB(rq.GetShard())
	if err != nil {
		return nil, err
	}
	if ref.kind != pb.ShardRef_RANGE {
		return nil, fmt.Errorf("%w: heartbeats go to range shards", ErrMalformed)
	}
	sh, err := o.coord.ensureOwner(ctx, ref)
	if err != nil {
		return nil, err
	}
	o.noteSeen(sh, from)
	o.beats.bump(from)
	// Declared capacity and load are stored (and replicated) at the first
	// heartbeat and then every ten, not on every beat: a write is a
	// replication round, and a decision may weigh a declared load ten
	// beats old.
	sh.mu.Lock()
	last := sh.loadAt[from]
	sh.mu.Unlock()
	if time.Since(last) > 10*o.cfg.heartbeat {
		le := &pb.LoadEntry{Peer: []byte(from), Capacity: rq.GetCapacity(), Load: rq.GetLoad(), Subnets: rq.GetSubnets(), AtMs: time.Now().UnixMilli()}
		v, _ := proto.Marshal(le)
		if _, err := o.coord.write(ctx, sh, 1, func(int, uint64, uint64) (*pb.Entry, error) {
			return &pb.Entry{Kind: pb.Entry_LOAD, Key: []byte(from), Value: v}, nil
		}); err == nil {
			sh.mu.Lock()
			sh.loadAt[from] = time.Now()
			sh.mu.Unlock()
		}
	}
	subnets, truncated := o.coord.ownerEntries(sh, from)
	m := newMsg(pb.Message_HEARTBEAT_ACK)
	m.HeartbeatAck = &pb.HeartbeatAck{Subnets: subnets, Truncated: truncated}
	return m, nil
}

// handleReassign moves a subnet of a shard this node coordinates to
// another node, at the request of the coordinator of the subnet whose
// decision needed the room (load balancing).
func (o *Overlay) handleReassign(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
	rq := req.GetReassign()
	c := o.coord
	if err := c.checkSnapshot(rq.GetSnapshot()); err != nil {
		return nil, err
	}
	r, err := rangeFromPB(rq.GetSubnet())
	if err != nil {
		return nil, fmt.Errorf("%w: subnet: %v", ErrMalformed, err)
	}
	cause, err := rangeFromPB(rq.GetCause())
	if err != nil {
		return nil, fmt.Errorf("%w: cause: %v", ErrMalformed, err)
	}
	node, err1 := peer.IDFromBytes(rq.GetNode())
	to, err2 := peer.IDFromBytes(rq.GetTo())
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("%w: node ids", ErrMalformed)
	}
	id, ok1 := o.tree.Find(r)
	cid, ok2 := o.tree.Find(cause)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("%w: subnet or cause not in this snapshot", ErrNotFound)
	}
	if from != o.h.ID() && !c.plausible(ctx, c.rangeShard(cid).key(o.sid), from) {
		return nil, fmt.Errorf("%w: reassignment not from the coordinator of %s", ErrForbidden, cause)
	}
	sh, err := c.ensureOwner(ctx, c.rangeShard(id))
	if err != nil {
		return nil, err
	}
	sr, err := c.reassign(ctx, sh, id, node, to)
	if err != nil {
		return nil, err
	}
	return o.delegationMsg(sr), nil
}

// handleAssign records a delegation to this node announced by the
// coordinator that decided it. The record must be validly signed, name this
// node, and come from its writer.
func (o *Overlay) handleAssign(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
	sr := req.GetAssign().GetRecord()
	rec, err := openRecord(o.sid, sr)
	if err != nil {
		return nil, err
	}
	d := delegationFrom(rec)
	if rec.GetKind() != pb.Record_DELEGATION || d.Node != o.h.ID() || d.Writer != from {
		return nil, fmt.Errorf("%w: assignment not for this node or not from its writer", ErrBadRecord)
	}
	id, _, ok := rangeOrPart(o.tree, d.Subnet)
	if !ok {
		return nil, fmt.Errorf("%w: subnet %s", ErrNotFound, d.Subnet)
	}
	// Any key signs a well-formed record: the writer must also be a
	// plausible coordinator of the subnet's shard, or any peer could make
	// this node crawl any subnet (a far-future decision time would even
	// survive the heartbeats' reconciliation).
	if !o.coord.plausible(ctx, o.coord.rangeShard(id).key(o.sid), from) {
		return nil, fmt.Errorf("%w: %s is not among the peers closest to the subnet's shard", ErrForbidden, from)
	}
	o.noteAssigned(sr)
	o.noteWonRTT(d.Subnet, time.Duration(req.GetAssign().GetRttMicros())*time.Microsecond)
	return newMsg(pb.Message_OK), nil
}

func (o *Overlay) handleOrgUpdate(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
	rq := req.GetOrgUpdate()
	if err := o.coord.checkSnapshot(rq.GetSnapshot()); err != nil {
		return nil, err
	}
	rec, err := openRecord(o.sid, rq.GetRecord())
	if err != nil {
		return nil, err
	}
	d := delegationFrom(rec)
	id, ok := o.tree.Find(d.Subnet)
	if rec.GetKind() != pb.Record_DELEGATION || !ok || o.tree.Org(id) != rq.GetOrg() || d.Org != rq.GetOrg() || rq.GetOrg() == "" {
		return nil, fmt.Errorf("%w: record does not belong to organisation shard", ErrBadRecord)
	}
	// Only the subnet's coordinator (the record's writer, plausibly close
	// to the subnet's shard) updates the index.
	if d.Writer != from || !o.coord.plausible(ctx, o.coord.rangeShard(id).key(o.sid), from) {
		return nil, fmt.Errorf("%w: organisation update not from the subnet's coordinator", ErrBadRecord)
	}
	sh, err := o.coord.ensureOwner(ctx, orgShard(rq.GetOrg()))
	if err != nil {
		return nil, err
	}
	old, err := o.coord.st.getEntry(sh.key, pb.Entry_ORG, rangeKey(d.Subnet))
	if err != nil {
		return nil, err
	}
	if old != nil {
		if od, err := o.coord.entryDelegation(old); err == nil && (od.Epoch > d.Epoch || (od.Epoch == d.Epoch && od.Seq >= d.Seq)) {
			return newMsg(pb.Message_OK), nil
		}
	}
	v, err := proto.Marshal(rq.GetRecord())
	if err != nil {
		return nil, err
	}
	if _, err := o.coord.write(ctx, sh, 1, func(int, uint64, uint64) (*pb.Entry, error) {
		return &pb.Entry{Kind: pb.Entry_ORG, Key: rangeKey(d.Subnet), Value: v}, nil
	}); err != nil {
		return nil, err
	}
	o.coord.orgChanged(sh)
	return newMsg(pb.Message_OK), nil
}

func (o *Overlay) handleOrgQuery(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
	rq := req.GetOrgQuery()
	if err := o.coord.checkSnapshot(rq.GetSnapshot()); err != nil {
		return nil, err
	}
	ref, err := o.coord.shardRefFromPB(&pb.ShardRef{Kind: pb.ShardRef_ORG, Org: rq.GetOrg()})
	if err != nil {
		return nil, err
	}
	sh, err := o.coord.ensureOwner(ctx, ref)
	if err != nil {
		return nil, err
	}
	m := newMsg(pb.Message_ORG_ENTRIES)
	m.OrgEntries = &pb.OrgEntries{}
	err = o.coord.st.scan(sh.key, pb.Entry_ORG, func(e *pb.Entry) bool {
		if len(m.OrgEntries.Records) >= maxOrgEntries {
			m.OrgEntries.Truncated = true
			return false
		}
		var sr pb.SignedRecord
		if proto.Unmarshal(e.GetValue(), &sr) == nil {
			m.OrgEntries.Records = append(m.OrgEntries.Records, &sr)
		}
		return true
	})
	return m, err
}

// serveReplicate handles REPLICATE (one answer) and SYNC (a stream of
// SYNC_STATE frames).
func (o *Overlay) serveReplicate() network.StreamHandler {
	return o.serve(replicateSpec, map[pb.Message_Type]handler{
		pb.Message_REPLICATE: o.coord.handleReplicate,
		pb.Message_SYNC: func(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
			w, ok := ctx.Value(writerKey{}).(pbio.Writer)
			if !ok {
				return nil, errors.New("no stream writer")
			}
			if err := o.coord.handleSync(ctx, from, req, w); err != nil {
				return nil, err
			}
			return nil, nil
		},
	})
}

// writerKey carries the stream's frame writer to streaming handlers.
type writerKey struct{}

// dispatchTable is the one table of the request/response protocols'
// handlers, by protocol and message type: the streams serve it, and so
// does handleLocal for requests a node addresses to itself. (Replication
// has its own stream handler: its frames are a sequence, not one request.)
func (o *Overlay) dispatchTable() map[protocol.ID]map[pb.Message_Type]handler {
	return map[protocol.ID]map[pb.Message_Type]handler{
		ProbeID: {pb.Message_PROBE: o.handleProbe},
		CoordinateID: {
			pb.Message_RESOLVE:      o.handleResolve,
			pb.Message_DELEGATE:     o.handleDelegate,
			pb.Message_HEARTBEAT:    o.handleHeartbeat,
			pb.Message_REDELEGATE:   o.handleRedelegate,
			pb.Message_ASSIGN:       o.handleAssign,
			pb.Message_ORG_UPDATE:   o.handleOrgUpdate,
			pb.Message_ORG_QUERY:    o.handleOrgQuery,
			pb.Message_REASSIGN:     o.handleReassign,
			pb.Message_BLOCK_UPDATE: o.handleBlockUpdate,
			pb.Message_BLOCK_QUERY:  o.handleBlockQuery,
			pb.Message_SPLIT:        o.handleSplit,
			pb.Message_CARRY:        o.handleCarry,
			pb.Message_CARRY_PROBES: o.handleCarryProbes,
		},
		AuditID: {
			pb.Message_AUDIT:    o.handleAudit,
			pb.Message_REFETCH:  o.handleRefetch,
			pb.Message_WITHHELD: o.handleWithheld,
		},
		ReleaseID: {
			pb.Message_RELEASE_QUERY: o.handleReleaseQuery,
			pb.Message_CHUNK_QUERY:   o.handleChunkQuery,
		},
		AnnounceID: {pb.Message_ANNOUNCE: o.handleAnnounce},
	}
}

// handleLocal serves a coordinate or audit request addressed to this node
// without a stream, from the dispatch table.
func (o *Overlay) handleLocal(ctx context.Context, req *pb.Message) (*pb.Message, error) {
	h, ok := o.handlers[CoordinateID][req.GetType()]
	if !ok {
		h, ok = o.handlers[AuditID][req.GetType()]
	}
	if !ok {
		return nil, fmt.Errorf("%w: %v", ErrUnexpectedType, req.GetType())
	}
	resp, err := h(ctx, o.h.ID(), req)
	if err != nil {
		return errorMsg(err), err
	}
	return resp, nil
}
