package overlay

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

// Carrying stored probe results across a snapshot switch. The guided
// search predicts a subnet's nearest node from the probes stored for the
// subnets around it; a switch must not make a network forget them. After
// the switch, every node that coordinated a range shard of the previous
// snapshot (its stored header names it the owner) sends the probe results
// of that shard to the coordinators of the new ranges they fall in: a
// probe of a range goes wherever subnet.Propagate takes the range (the
// same range, both halves of a split, the range it merged into), a probe
// of a part to the part, if a range of the new snapshot holds it. The new
// coordinator checks that the sender plausibly coordinated the old range's
// shard and that old and new ranges nest, and stores what it does not
// know newer. Once every shard is carried, or the carry time is over, the
// node drops the shards of other snapshots from its store.

// carriedProbesMax bounds the probe results one CARRY_PROBES carries.
const carriedProbesMax = maxEntriesPerMsg

// carryProbes runs the carry once (heartbeatAll calls it until done).
func (o *Overlay) carryProbes(ctx context.Context) {
	prev := o.cfg.prev
	if prev == nil || o.probesCarried.Load() {
		return
	}
	metas, err := o.coord.st.allMetas()
	if err != nil {
		return
	}
	giveUp := time.Now().After(o.cfg.prevAt.Add(maxCarryTime * o.cfg.liveness))
	done, carried := true, 0
	for key, m := range metas {
		if m.GetShard().GetKind() != pb.ShardRef_RANGE || !bytes.Equal(m.GetOwner(), []byte(o.h.ID())) {
			continue
		}
		anchor, err := rangeFromPB(m.GetShard().GetAnchor())
		if err != nil {
			continue
		}
		if _, ok := prev.Find(anchor); !ok || (shardRef{kind: pb.ShardRef_RANGE, anchor: anchor}).key(prev.ID()) != key {
			continue // a shard of this snapshot, or of an older one
		}
		n, err := o.carryShardProbes(ctx, key)
		carried += n
		if err != nil {
			done = false
			o.log.Debug("carrying stored probes failed; tried again", "shard", anchor.String(), "error", err)
		}
	}
	if !done && !giveUp {
		return
	}
	o.probesCarried.Store(true)
	dropped := 0
	for key, m := range metas {
		ref, err := o.coord.shardRefFromPB(m.GetShard())
		if err == nil && ref.key(o.sid) == key {
			continue
		}
		if err := o.coord.st.dropShard(key); err != nil {
			o.log.Warn("dropping a shard of another snapshot failed", "error", err)
			continue
		}
		dropped++
	}
	o.log.Info("stored probes carried into the new snapshot", "probes", carried, "complete", done, "shards_dropped", dropped)
}

// carryShardProbes sends the probe results of one old shard to the
// coordinators of the new shards and returns how many were taken.
func (o *Overlay) carryShardProbes(ctx context.Context, key [32]byte) (int, error) {
	type group struct {
		ref    shardRef
		probes []*pb.CarriedProbe
	}
	groups := map[[32]byte]*group{}
	err := o.coord.st.scan(key, pb.Entry_PROBE, func(en *pb.Entry) bool {
		pr, ok := probeResult(en)
		if !ok {
			return true
		}
		for _, to := range o.probeTargets(pr.Subnet) {
			nid, _, _ := rangeOrPart(o.tree, to)
			ref := o.coord.rangeShard(nid)
			g := groups[ref.key(o.sid)]
			if g == nil {
				g = &group{ref: ref}
				groups[ref.key(o.sid)] = g
			}
			pe := &pb.ProbeEntry{Subnet: rangeToPB(to), Peer: []byte(pr.Peer), RttMicros: pr.RTT.Microseconds(), AtMs: pr.At.UnixMilli()}
			if pr.RTT < 0 {
				pe.RttMicros = -1
			}
			g.probes = append(g.probes, &pb.CarriedProbe{From: rangeToPB(pr.Subnet), Probe: pe})
		}
		return true
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, g := range groups {
		for i := 0; i < len(g.probes); i += carriedProbesMax {
			batch := g.probes[i:min(i+carriedProbesMax, len(g.probes))]
			req := newMsg(pb.Message_CARRY_PROBES)
			req.CarryProbes = &pb.CarryProbes{Snapshot: o.sid[:], Probes: batch}
			cctx, cancel := context.WithTimeout(ctx, coordDeadline)
			_, err := o.askCoordinator(cctx, g.ref, req, pb.Message_OK)
			cancel()
			if err != nil {
				return n, err
			}
			n += len(batch)
		}
	}
	return n, nil
}

// probeTargets returns where a probe result of r (a range or a part of
// the previous snapshot) goes in this one.
func (o *Overlay) probeTargets(r subnet.Range) []subnet.Range {
	if _, ok := o.cfg.prev.Find(r); ok {
		var out []subnet.Range
		for _, cr := range o.carriedTo(r, "") {
			out = append(out, cr.Range)
		}
		return out
	}
	if _, part, ok := rangeOrPart(o.tree, r); ok && part {
		return []subnet.Range{r}
	}
	return nil
}

func (o *Overlay) handleCarryProbes(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
	rq := req.GetCarryProbes()
	c := o.coord
	if err := c.checkSnapshot(rq.GetSnapshot()); err != nil {
		return nil, err
	}
	prev := o.cfg.prev
	if prev == nil {
		return nil, fmt.Errorf("%w: this node knows no previous snapshot", ErrUnavailable)
	}
	if len(rq.GetProbes()) == 0 || len(rq.GetProbes()) > carriedProbesMax {
		return nil, fmt.Errorf("%w: %d carried probes (1 to %d)", ErrMalformed, len(rq.GetProbes()), carriedProbesMax)
	}
	var sh *shard
	entries := make([]*pb.Entry, 0, len(rq.GetProbes()))
	checked := map[[32]byte]bool{} // old shards the sender plausibly coordinated
	for _, cp := range rq.GetProbes() {
		old, err := rangeFromPB(cp.GetFrom())
		if err != nil || cp.GetProbe() == nil {
			return nil, fmt.Errorf("%w: carried probe without a valid range: %v", ErrMalformed, err)
		}
		pr, ok := probeFromPB(cp.GetProbe())
		if !ok {
			return nil, fmt.Errorf("%w: carried probe of %s", ErrMalformed, old)
		}
		oid, _, ok := rangeOrPart(prev, old)
		nid, _, nok := rangeOrPart(o.tree, pr.Subnet)
		if !ok || !nok || !(old.ContainsRange(pr.Subnet) || pr.Subnet.ContainsRange(old)) {
			return nil, fmt.Errorf("%w: a probe of %s does not carry to %s", ErrForbidden, old, pr.Subnet)
		}
		ref := c.rangeShard(nid)
		if sh == nil {
			if sh, err = c.ensureOwner(ctx, ref); err != nil {
				return nil, err
			}
		} else if ref.key(o.sid) != sh.key {
			return nil, fmt.Errorf("%w: carried probes of two shards", ErrMalformed)
		}
		oldKey := shardRef{kind: pb.ShardRef_RANGE, anchor: prev.Range(anchorIn(prev, o.cfg.anchorDepth, oid))}.key(prev.ID())
		if !checked[oldKey] {
			if from != o.h.ID() && !c.plausible(ctx, oldKey, from) {
				return nil, fmt.Errorf("%w: %s did not coordinate %s's shard", ErrForbidden, from, old)
			}
			checked[oldKey] = true
		}
		key := append(rangeKey(pr.Subnet), []byte(pr.Peer)...)
		if len(key) > maxEntryKey {
			continue
		}
		if cur, err := c.st.getEntry(sh.key, pb.Entry_PROBE, key); err != nil {
			return nil, err
		} else if cur != nil {
			if known, ok := probeResult(cur); ok && !known.At.Before(pr.At) {
				continue // this shard knows as recent a probe
			}
		}
		v, err := proto.Marshal(cp.GetProbe())
		if err != nil {
			return nil, err
		}
		entries = append(entries, &pb.Entry{Kind: pb.Entry_PROBE, Key: key, Value: v})
	}
	if len(entries) > 0 {
		if _, err := c.write(ctx, sh, len(entries), func(i int, _, _ uint64) (*pb.Entry, error) { return entries[i], nil }); err != nil {
			return nil, err
		}
	}
	return newMsg(pb.Message_OK), nil
}
