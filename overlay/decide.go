// Decisions in a held shard: lookups, the delegation procedure's runs (one
// per subnet at a time), records, reassignments and orphans.

package overlay

import (
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

// flight is one in-progress decision that concurrent requests for the same
// subnet wait on.
type flight struct {
	done chan struct{}
	rec  *pb.SignedRecord
	err  error
}

// lookup returns the delegation entry of subnet r in sh, if any.
func (c *coordinator) lookup(sh *shard, r subnet.Range) (*pb.SignedRecord, Delegation, bool, error) {
	e, err := c.st.getEntry(sh.key, pb.Entry_DELEGATION, rangeKey(r))
	if err != nil || e == nil {
		return nil, Delegation{}, false, err
	}
	var sr pb.SignedRecord
	if err := proto.Unmarshal(e.GetValue(), &sr); err != nil {
		return nil, Delegation{}, false, err
	}
	d, err := c.entryDelegation(e)
	if err != nil {
		return nil, Delegation{}, false, err
	}
	return &sr, d, true, nil
}

// decide returns sh's delegation of subnet id, running the delegation
// procedure when there is none (or it is orphaned, or redo is set). Decisions
// for one subnet are made once: concurrent callers wait for the first.
//
// An own-subnet claim (req.Own, paper III.D) is decided here without the
// procedure: the joining node takes its own subnet, unless another node
// holds it by its own claim (the first claimer keeps it).
func (c *coordinator) decide(sh *shard, req DelegateRequest, redo bool) (*pb.SignedRecord, error) {
	r := c.tree.Range(req.Subnet)
	// Nodes convicted by audits take no part; their own-subnet claims
	// are decided like any subnet (and settled once it is delegated).
	conv := c.convicted()
	if req.Own && conv[req.From] {
		req.Own = false
	}
	// Nor do nodes that withheld the subnet (withhold.go), until their
	// exclusion ends.
	withheld := c.withheldFrom(sh, r, time.Now())
	if req.Own && slices.Contains(withheld, req.From) {
		req.Own = false
	}
	settled := func(d Delegation, ok bool) bool {
		if !ok || d.Orphaned || redo {
			return false
		}
		return !req.Own || d.Node == req.From || d.Own
	}
	sr, d, ok, err := c.lookup(sh, r)
	if err != nil {
		return nil, err
	}
	if settled(d, ok) {
		return sr, nil
	}
	if !req.Own && c.o.carrying() {
		return nil, c.o.errCarrying()
	}
	fk := string(rangeKey(r))
	f, first := sh.join(fk)
	if !first {
		<-f.done
		return f.rec, f.err
	}
	defer sh.land(fk, f)
	// Re-check under the flight: a decision may have landed meanwhile.
	sr, d, ok, err = c.lookup(sh, r)
	if err == nil && settled(d, ok) {
		f.rec = sr
		return sr, nil
	}
	if ok && (d.Orphaned || redo) && req.Addr == (netip.Addr{}) {
		req.Addr, req.URL = d.Addr, d.URL
	}
	// An orphaned or re-decided range of a special-purpose address,
	// delegated before the policy refused it, keeps its record and is
	// not decided again: no probe goes to it.
	if req.Addr.IsValid() {
		if f.err = c.o.refuse(req.Addr, req.URL); f.err != nil {
			return nil, f.err
		}
	}
	for p := range conv {
		req.Exclude = append(req.Exclude, p)
	}
	req.Exclude = append(req.Exclude, withheld...)
	// The procedure runs on the overlay's lifetime, not the first
	// requester's: the others wait on the same decision.
	ctx, cancel := context.WithTimeout(c.o.ctx, coordDeadline)
	defer cancel()
	node := req.From
	for try := 0; !req.Own; try++ {
		node, err = c.cfg.delegator.Delegate(ctx, req, &env{c: c, sh: sh, subnet: req.Subnet})
		if err != nil {
			f.err = fmt.Errorf("delegation procedure: %w", err)
			return nil, f.err
		}
		// A node may win on a stored probe and be gone since: a
		// subnet goes only to a node this one reaches (its notice
		// needs the connection anyway).
		if node == "" || slices.Contains(req.Exclude, node) || c.reachable(ctx, node) {
			break
		}
		if try == maxUnreachableWinners {
			f.err = fmt.Errorf("delegation procedure: %w: the %d nodes chosen could not be reached", ErrNoCandidate, try+1)
			return nil, f.err
		}
		c.log.Debug("the chosen node is unreachable; deciding without it", "subnet", r.String(), "peer", node)
		req.Exclude = append(req.Exclude, node)
	}
	if node == "" || slices.Contains(req.Exclude, node) {
		f.err = fmt.Errorf("delegation procedure: %w", ErrNoCandidate)
		return nil, f.err
	}
	f.rec, f.err = c.record(ctx, sh, req.Subnet, node, req.URL, req.Addr, req.Own)
	return f.rec, f.err
}

// maxUnreachableWinners bounds the decisions one delegation runs again
// because the node chosen could not be reached.
const maxUnreachableWinners = 3

// reachDeadline bounds the dial to a chosen node that is not connected.
const reachDeadline = 5 * time.Second

// reachable reports whether p is this node or can be connected to within
// reachDeadline (a limited, relayed connection counts).
func (c *coordinator) reachable(ctx context.Context, p peer.ID) bool {
	if p == c.self {
		return true
	}
	return c.o.connect(ctx, p, reachDeadline) == nil
}

// join returns the flight of key fk: a new one that the caller runs and
// lands (first), or the one in progress.
func (sh *shard) join(fk string) (f *flight, first bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if f, ok := sh.flights[fk]; ok {
		return f, false
	}
	f = &flight{done: make(chan struct{})}
	sh.flights[fk] = f
	return f, true
}

// land ends a flight that join started.
func (sh *shard) land(fk string, f *flight) {
	sh.mu.Lock()
	delete(sh.flights, fk)
	sh.mu.Unlock()
	close(f.done)
}

// record writes the delegation of subnet id to node as a new signed
// record, replicates it, and queues the notices it causes.
func (c *coordinator) record(ctx context.Context, sh *shard, id subnet.ID, node peer.ID, url string, addr netip.Addr, own bool) (*pb.SignedRecord, error) {
	return c.recordRange(ctx, sh, c.tree.Range(id), c.tree.Org(id), node, url, addr, own, subnet.Range{})
}

// recordRange is record for r, a range of the tree or a part of one, in
// organisation org; from, when valid, is the range of the previous
// snapshot the delegation was carried from.
func (c *coordinator) recordRange(ctx context.Context, sh *shard, r subnet.Range, org string, node peer.ID, url string, addr netip.Addr, own bool, from subnet.Range) (*pb.SignedRecord, error) {
	var carried *pb.Range
	if from.Valid() {
		carried = rangeToPB(from)
	}
	var rec *pb.SignedRecord
	_, err := c.write(ctx, sh, 1, func(_ int, epoch, seq uint64) (*pb.Entry, error) {
		var err error
		rec, err = signRecord(c.sk, &pb.Record{
			Kind: pb.Record_DELEGATION, Snapshot: c.sid[:], Subnet: rangeToPB(r),
			Org: org, Node: []byte(node), Epoch: epoch, Seq: seq,
			DecidedMs: time.Now().UnixMilli(), Url: url, Addr: addrBytes(addr), Own: own, CarriedFrom: carried,
		})
		if err != nil {
			return nil, err
		}
		v, err := proto.Marshal(rec)
		return &pb.Entry{Kind: pb.Entry_DELEGATION, Key: rangeKey(r), Value: v}, err
	})
	if err != nil {
		return nil, err
	}
	// The node's liveness is not touched: the decision's time is the new
	// subnet's grace (checkLiveness), and only heartbeats say a node is
	// alive (reachable accepts an open connection, which outlives a node
	// that left by the transport's idle timeout; marked seen here, every
	// subnet it held in the shard would get a new timeout).
	c.afterDecision(node, rec)
	return rec, nil
}

// reassign moves subnet id of sh from node from to node to (load
// balancing), unless a decision for it is under way or it is no longer
// delegated to from.
func (c *coordinator) reassign(ctx context.Context, sh *shard, id subnet.ID, from, to peer.ID) (*pb.SignedRecord, error) {
	r := c.tree.Range(id)
	fk := string(rangeKey(r))
	f, first := sh.join(fk)
	if !first {
		return nil, fmt.Errorf("%w: %s is being decided", ErrUnavailable, r)
	}
	defer sh.land(fk, f)
	sr, d, ok, err := c.lookup(sh, r)
	if err != nil {
		f.err = err
		return nil, err
	}
	if !ok || d.Orphaned || d.Node != from {
		f.err = fmt.Errorf("%w: %s is not delegated to %s", ErrNotFound, r, from)
		return nil, f.err
	}
	if to == from {
		f.rec = sr
		return sr, nil
	}
	if slices.Contains(c.withheldFrom(sh, r, time.Now()), to) {
		f.err = fmt.Errorf("%w: %s withheld %s", ErrForbidden, to, r)
		return nil, f.err
	}
	f.rec, f.err = c.record(ctx, sh, id, to, d.URL, d.Addr, false)
	if f.err == nil {
		c.log.Info("subnet reassigned", "subnet", r.String(), "from", from, "to", to)
	}
	return f.rec, f.err
}

// orphan marks d's subnet orphaned and hands it back to the delegation
// procedure with its node and the silent ones excluded; reason says why
// ("orphaned": silent past the liveness timeout; "convicted": by audits;
// "withheld": it left crawl requests unanswered, withhold.go; "refused":
// it would not take them).
func (c *coordinator) orphan(ctx context.Context, sh *shard, d Delegation, silent []peer.ID, reason string) error {
	id, part, ok := rangeOrPart(c.tree, d.Subnet)
	if !ok {
		return nil
	}
	_, err := c.write(ctx, sh, 1, func(_ int, epoch, seq uint64) (*pb.Entry, error) {
		rec, err := signRecord(c.sk, &pb.Record{
			Kind: pb.Record_DELEGATION, Snapshot: c.sid[:], Subnet: rangeToPB(d.Subnet),
			Org: d.Org, Node: []byte(d.Node), Epoch: epoch, Seq: seq,
			DecidedMs: time.Now().UnixMilli(), Url: d.URL, Addr: addrBytes(d.Addr), Orphaned: true,
		})
		if err != nil {
			return nil, err
		}
		v, err := proto.Marshal(rec)
		return &pb.Entry{Kind: pb.Entry_DELEGATION, Key: rangeKey(d.Subnet), Value: v}, err
	})
	if err != nil {
		return err
	}
	c.log.Info("subnet orphaned", "subnet", d.Subnet.String(), "peer", d.Node, "reason", reason)
	c.o.stats.countTakenBack(reason)
	if part {
		// A part is not decided again: its sites fall back to the
		// range's delegation, whose node splits it again when they are
		// far from it.
		return nil
	}
	// Fresh probes: the stored ones may name nodes that died with this one
	// (a failed probe counts as infinite, a stored one does not).
	exclude := append([]peer.ID{d.Node}, silent...)
	_, err = c.decide(sh, DelegateRequest{Subnet: id, Addr: d.Addr, URL: d.URL, From: c.self, Exclude: exclude,
		Reason: reason, Fresh: time.Now()}, false)
	return err
}

func addrBytes(a netip.Addr) []byte {
	if !a.IsValid() {
		return nil
	}
	return a.AsSlice()
}

// afterDecision queues the notices a new delegation causes: the delegated
// node is told, the organisation shard and the block shards above the
// subnet's shard index it, and the record is published in the DHT. Queues
// are bounded; a full queue drops the notice (the node takes up a subnet
// its heartbeat acks list, mine.go, and the org index is refreshed by the
// next decision in the organisation).
func (c *coordinator) afterDecision(node peer.ID, rec *pb.SignedRecord) {
	rtt, r := c.wonRTT(node, rec)
	if node == c.self {
		c.o.noteAssigned(rec)
		c.o.noteWonRTT(r, rtt)
	} else {
		select {
		case c.assignQ <- assignJob{node, rec, rtt}:
		default:
			c.log.Warn("assign queue full; notice dropped", "peer", node)
		}
	}
	if _, part, _ := rangeOrPart(c.tree, r); part {
		// Parts are known from their range's shard only: the
		// organisation, block and DHT indexes list registry ranges.
		return
	}
	select {
	case c.orgQ <- rec:
	default:
		c.log.Warn("organisation index queue full; update dropped")
	}
	select {
	case c.blockQ <- rec:
	default:
		c.log.Warn("block index queue full; update dropped")
	}
	if c.cfg.publish {
		select {
		case c.pubQ <- rec:
		default:
			c.log.Debug("record publish queue full; record not published")
		}
	}
}

// wonRTT returns node's stored probe of the subnet rec delegates (0 when
// there is none or it failed), and the subnet. A probe is stored under its
// subnet and peer (env.Probe), so this is one read.
func (c *coordinator) wonRTT(node peer.ID, sr *pb.SignedRecord) (time.Duration, subnet.Range) {
	rec, err := recordOf(sr)
	if err != nil {
		return 0, subnet.Range{}
	}
	d := delegationFrom(rec)
	id, _, ok := rangeOrPart(c.tree, d.Subnet)
	if !ok {
		return 0, d.Subnet
	}
	e, err := c.st.getEntry(c.rangeShard(id).key(c.sid), pb.Entry_PROBE, append(rangeKey(d.Subnet), []byte(node)...))
	if err != nil || e == nil {
		return 0, d.Subnet
	}
	pr, ok := probeResult(e)
	if !ok || pr.RTT <= 0 {
		return 0, d.Subnet
	}
	return pr.RTT, d.Subnet
}
