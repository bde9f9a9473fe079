package overlay

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

// Block shards. The bottom-up search climbs above its shard's anchor: at a
// range x above it, the paper asks the nodes of the delegated ranges among
// x's children and their children, which other shards hold. A block shard
// (one per such x, keyed like a range shard under its own tag) indexes what
// that step needs: every range coordinator sends each decision, with its
// stored probe results, to the blocks it belongs to (see blocksOf), as it
// sends it to the organisation's shard. A search then learns a level in one
// request, and the guided search predicts from the probes of neighbouring
// shards ("sharing probe results across shards").
const (
	maxBlockEntries = 8192 // decisions a block shard indexes; later new subnets are refused
	maxBlockReply   = 128  // entries one BLOCK_ENTRIES answer carries, nearest first
	maxBlockProbes  = 64   // probe results per indexed decision
)

// probesOf returns the stored probe results of subnet r in the shard with
// key, at most max (0: no bound).
func (c *coordinator) probesOf(key [32]byte, r subnet.Range, maxN int) []ProbeResult {
	prefix := string(rangeKey(r))
	var out []ProbeResult
	_ = c.st.scanPrefix(key, pb.Entry_PROBE, []byte(prefix), func(en *pb.Entry) bool {
		if len(en.GetKey()) < len(prefix) || string(en.GetKey()[:len(prefix)]) != prefix {
			return true
		}
		if pr, ok := probeResult(en); ok && pr.Subnet == r {
			out = append(out, pr)
		}
		return maxN == 0 || len(out) < maxN
	})
	return out
}

// probeResult decodes a stored PROBE entry.
func probeResult(en *pb.Entry) (ProbeResult, bool) {
	var pe pb.ProbeEntry
	if proto.Unmarshal(en.GetValue(), &pe) != nil {
		return ProbeResult{}, false
	}
	return probeFromPB(&pe)
}

// probeFromPB checks and converts a ProbeEntry.
func probeFromPB(pe *pb.ProbeEntry) (ProbeResult, bool) {
	p, err := peer.IDFromBytes(pe.GetPeer())
	if err != nil {
		return ProbeResult{}, false
	}
	r, err := rangeFromPB(pe.GetSubnet())
	if err != nil {
		return ProbeResult{}, false
	}
	rtt := time.Duration(pe.GetRttMicros()) * time.Microsecond
	if pe.GetRttMicros() < 0 {
		rtt = -1
	}
	return ProbeResult{Subnet: r, Peer: p, RTT: rtt, At: time.UnixMilli(pe.GetAtMs())}, true
}

func peerRTTs(ps []ProbeResult) []*pb.PeerRTT {
	out := make([]*pb.PeerRTT, 0, len(ps))
	for _, p := range ps {
		us := p.RTT.Microseconds()
		if p.RTT < 0 {
			us = -1
		}
		out = append(out, &pb.PeerRTT{Peer: []byte(p.Peer), RttMicros: us})
	}
	return out
}

// fromPeerRTTs decodes and checks probe results received for subnet r.
func fromPeerRTTs(in []*pb.PeerRTT, r subnet.Range, at time.Time) ([]ProbeResult, error) {
	if len(in) > maxBlockProbes {
		return nil, fmt.Errorf("%w: %d probe results", ErrTooLarge, len(in))
	}
	out := make([]ProbeResult, 0, len(in))
	for _, x := range in {
		p, err := peer.IDFromBytes(x.GetPeer())
		if err != nil {
			return nil, fmt.Errorf("%w: probe peer: %v", ErrMalformed, err)
		}
		us := x.GetRttMicros()
		if us < -1 || us > int64(time.Hour/time.Microsecond) {
			return nil, fmt.Errorf("%w: probe RTT %d µs", ErrMalformed, us)
		}
		rtt := time.Duration(us) * time.Microsecond
		if us < 0 {
			rtt = -1
		}
		out = append(out, ProbeResult{Subnet: r, Peer: p, RTT: rtt, At: at})
	}
	return out, nil
}

// indexInBlocks sends a decision to the block shards it belongs to.
func (c *coordinator) indexInBlocks(ctx context.Context, rec *pb.SignedRecord) {
	r, err := openRecord(c.sid, rec)
	if err != nil {
		return
	}
	d := delegationFrom(r)
	id, ok := c.tree.Find(d.Subnet)
	if !ok {
		return
	}
	probes := c.probesOf(c.rangeShard(id).key(c.sid), d.Subnet, maxBlockProbes)
	for _, x := range c.blocksOf(id) {
		m := newMsg(pb.Message_BLOCK_UPDATE)
		m.BlockUpdate = &pb.BlockUpdate{Snapshot: c.sid[:], Block: rangeToPB(c.tree.Range(x)), Record: rec, Probes: peerRTTs(probes)}
		retry(ctx, 3, time.Second, func() error {
			_, err := c.o.askCoordinator(ctx, c.blockShard(x), m, pb.Message_OK)
			if err != nil {
				c.log.Debug("block index update failed", "block", c.tree.Range(x).String(), "error", err)
			}
			return err
		})
	}
}

// openBlockEntry decodes a BLOCK entry's value; verify checks the record's
// signature (entries from peers; this node's store holds checked ones).
func (c *coordinator) openBlockEntry(v []byte, verify bool) (IndexedDelegation, error) {
	var be pb.BlockEntry
	if err := proto.Unmarshal(v, &be); err != nil {
		return IndexedDelegation{}, fmt.Errorf("%w: block entry: %v", ErrMalformed, err)
	}
	var rec *pb.Record
	var err error
	if verify {
		rec, err = openRecord(c.sid, be.GetRecord())
	} else {
		rec, err = recordOf(be.GetRecord())
	}
	if err != nil {
		return IndexedDelegation{}, err
	}
	if rec.GetKind() != pb.Record_DELEGATION {
		return IndexedDelegation{}, fmt.Errorf("%w: not a delegation", ErrBadRecord)
	}
	d := delegationFrom(rec)
	ps, err := fromPeerRTTs(be.GetProbes(), d.Subnet, d.Decided)
	if err != nil {
		return IndexedDelegation{}, err
	}
	return IndexedDelegation{Delegation: d, Probes: ps}, nil
}

// recordOf decodes a signed record from this node's own store without
// checking its signature again.
func recordOf(sr *pb.SignedRecord) (*pb.Record, error) {
	var r pb.Record
	if err := proto.Unmarshal(sr.GetRecord(), &r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRecord, err)
	}
	if _, err := rangeFromPB(r.GetSubnet()); err != nil {
		return nil, fmt.Errorf("%w: subnet: %v", ErrBadRecord, err)
	}
	return &r, nil
}

// blockRef decodes the block shard a BLOCK_UPDATE or BLOCK_QUERY names,
// by its anchor block, in snapshot, which must be this node's.
func (c *coordinator) blockRef(snapshot []byte, block *pb.Range) (shardRef, error) {
	if err := c.checkSnapshot(snapshot); err != nil {
		return shardRef{}, err
	}
	return c.shardRefFromPB(&pb.ShardRef{Kind: pb.ShardRef_BLOCK, Anchor: block})
}

func (o *Overlay) handleBlockUpdate(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
	rq := req.GetBlockUpdate()
	c := o.coord
	ref, err := c.blockRef(rq.GetSnapshot(), rq.GetBlock())
	if err != nil {
		return nil, err
	}
	x, _ := o.tree.Find(ref.anchor)
	rec, err := openRecord(o.sid, rq.GetRecord())
	if err != nil {
		return nil, err
	}
	d := delegationFrom(rec)
	id, ok := o.tree.Find(d.Subnet)
	if rec.GetKind() != pb.Record_DELEGATION || !ok || !slices.Contains(c.blocksOf(id), x) {
		return nil, fmt.Errorf("%w: record does not belong to block %s", ErrBadRecord, ref.anchor)
	}
	if _, err := fromPeerRTTs(rq.GetProbes(), d.Subnet, d.Decided); err != nil {
		return nil, err
	}
	// Only the subnet's coordinator (the record's writer, plausibly close
	// to the subnet's shard) indexes it.
	if d.Writer != from || !c.plausible(ctx, c.rangeShard(id).key(o.sid), from) {
		return nil, fmt.Errorf("%w: block update not from the subnet's coordinator", ErrForbidden)
	}
	sh, err := c.ensureOwner(ctx, ref)
	if err != nil {
		return nil, err
	}
	old, err := c.st.getEntry(sh.key, pb.Entry_BLOCK, rangeKey(d.Subnet))
	if err != nil {
		return nil, err
	}
	if old != nil {
		if od, err := c.openBlockEntry(old.GetValue(), false); err == nil && (od.Epoch > d.Epoch || (od.Epoch == d.Epoch && od.Seq >= d.Seq)) {
			return newMsg(pb.Message_OK), nil
		}
	} else if n, err := c.st.count(sh.key, pb.Entry_BLOCK, maxBlockEntries); err != nil || n >= maxBlockEntries {
		return nil, fmt.Errorf("%w: block %s indexes %d decisions", ErrTooLarge, ref.anchor, n)
	}
	v, err := proto.Marshal(&pb.BlockEntry{Record: rq.GetRecord(), Probes: rq.GetProbes()})
	if err != nil {
		return nil, err
	}
	if _, err := c.write(ctx, sh, 1, func(int, uint64, uint64) (*pb.Entry, error) {
		return &pb.Entry{Kind: pb.Entry_BLOCK, Key: rangeKey(d.Subnet), Value: v}, nil
	}); err != nil {
		return nil, err
	}
	return newMsg(pb.Message_OK), nil
}

func (o *Overlay) handleBlockQuery(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
	rq := req.GetBlockQuery()
	c := o.coord
	ref, err := c.blockRef(rq.GetSnapshot(), rq.GetBlock())
	if err != nil {
		return nil, err
	}
	near, err := rangeFromPB(rq.GetNear())
	if err != nil {
		return nil, fmt.Errorf("%w: near: %v", ErrMalformed, err)
	}
	if !ref.anchor.ContainsRange(near) {
		return nil, fmt.Errorf("%w: %s is not inside block %s", ErrMalformed, near, ref.anchor)
	}
	sh, err := c.ensureOwner(ctx, ref)
	if err != nil {
		return nil, err
	}
	type item struct {
		e    *pb.Entry
		dist [2]uint64
	}
	var items []item
	err = c.st.scan(sh.key, pb.Entry_BLOCK, func(e *pb.Entry) bool {
		if len(e.GetKey()) == 32 {
			a, _ := netip.AddrFromSlice(e.GetKey()[:16])
			items = append(items, item{e, addrDist(a.Unmap(), near.Start)})
		}
		return len(items) < maxBlockEntries
	})
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(items, func(a, b item) int {
		if a.dist[0] != b.dist[0] {
			return cmp.Compare(a.dist[0], b.dist[0])
		}
		return cmp.Compare(a.dist[1], b.dist[1])
	})
	m := newMsg(pb.Message_BLOCK_ENTRIES)
	m.BlockEntries = &pb.BlockEntries{}
	size := 0
	for _, it := range items {
		if len(m.BlockEntries.Entries) >= maxBlockReply || size+len(it.e.GetValue()) > maxCoordMsg/2 {
			m.BlockEntries.Truncated = true
			break
		}
		var be pb.BlockEntry
		if proto.Unmarshal(it.e.GetValue(), &be) != nil {
			continue
		}
		size += len(it.e.GetValue()) + 8
		m.BlockEntries.Entries = append(m.BlockEntries.Entries, &be)
	}
	return m, nil
}

// Block returns the index of decisions under range x, nearest in address
// to range near first (see DelegationEnv.Block), from x's block shard.
// Records are verified; orphaned delegations are left out.
func (o *Overlay) Block(ctx context.Context, x, near subnet.ID) ([]IndexedDelegation, error) {
	xr, nr := o.tree.Range(x), o.tree.Range(near)
	if !xr.ContainsRange(nr) {
		return nil, fmt.Errorf("block %s: %s is not inside it", xr, nr)
	}
	req := newMsg(pb.Message_BLOCK_QUERY)
	req.BlockQuery = &pb.BlockQuery{Snapshot: o.sid[:], Block: rangeToPB(xr), Near: rangeToPB(nr)}
	resp, err := o.askCoordinator(ctx, o.coord.blockShard(x), req, pb.Message_BLOCK_ENTRIES)
	if err != nil {
		return nil, err
	}
	ents := resp.GetBlockEntries().GetEntries()
	if len(ents) > maxBlockReply {
		return nil, fmt.Errorf("%w: %d block entries", ErrTooLarge, len(ents))
	}
	out := make([]IndexedDelegation, 0, len(ents))
	for _, be := range ents {
		v, err := proto.Marshal(be)
		if err != nil {
			continue
		}
		ix, err := o.coord.openBlockEntry(v, true)
		if err != nil || ix.Orphaned || !xr.ContainsRange(ix.Subnet) {
			continue
		}
		out = append(out, ix)
	}
	return out, nil
}

// addrDist returns |a − b| of two addresses as a 128-bit number (high,
// low).
func addrDist(a, b netip.Addr) [2]uint64 {
	x, y := a.As16(), b.As16()
	hi := func(v [16]byte) (uint64, uint64) {
		var h, l uint64
		for i := range 8 {
			h = h<<8 | uint64(v[i])
			l = l<<8 | uint64(v[8+i])
		}
		return h, l
	}
	xh, xl := hi(x)
	yh, yl := hi(y)
	if xh < yh || (xh == yh && xl < yl) {
		xh, xl, yh, yl = yh, yl, xh, xl
	}
	l := xl - yl
	h := xh - yh
	if xl < yl {
		h--
	}
	return [2]uint64{h, l}
}
