// Parts: delegation finer than the registry (subnet.SplitRange). A
// registry range is not always one place; when the node holding a range
// finds a server in it much farther than the probe it won the range with,
// it asks the range's coordinator to search the part holding that server
// apart (Split). The part's decision is a DELEGATION record of a CIDR block
// strictly inside the range, stored in the range's shard like any other,
// heartbeated by its node and orphaned with it; an address's delegation is
// the most specific live part holding it, else its range's.

package overlay

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

// maxParts bounds the parts of one registry range delegated apart.
const maxParts = 64

// partOf returns the smallest non-unary range of the tree that r is a part
// of: r is a CIDR block strictly inside it and not itself a range of the
// tree. ok is false otherwise.
func partOf(t *subnet.Tree, r subnet.Range) (subnet.ID, bool) {
	if _, ok := t.Find(r); ok {
		return subnet.None, false
	}
	if _, ok := r.Prefix(); !ok {
		return subnet.None, false
	}
	s := t.SmallestNonUnary(r.Start)
	if s == subnet.None {
		return subnet.None, false
	}
	sr := t.Range(s)
	if !sr.ContainsRange(r) || sr == r {
		return subnet.None, false
	}
	return s, true
}

// rangeOrPart returns the range of the tree whose shard holds the
// delegation of r: r itself when it is a range of the tree, the range r is
// a part of otherwise. ok is false when r is neither.
func rangeOrPart(t *subnet.Tree, r subnet.Range) (id subnet.ID, part, ok bool) {
	if id, ok := t.Find(r); ok {
		return id, false, true
	}
	if id, ok := partOf(t, r); ok {
		return id, true, true
	}
	return subnet.None, false, false
}

// mostSpecific returns the delegation holding a among those get knows: the
// most specific part of s holding a, else s's own. s is a's smallest
// non-unary range; parts are CIDR blocks inside it, so only the prefixes of
// a inside s are looked at.
func mostSpecific(s subnet.Range, a netip.Addr, parts bool, get func(subnet.Range) (Delegation, bool)) (Delegation, bool) {
	if parts {
		for bits := a.BitLen(); bits >= 0; bits-- {
			p, err := a.Prefix(bits)
			if err != nil {
				break
			}
			r := subnet.RangeOf(p)
			if !s.ContainsRange(r) || r == s {
				break // the prefixes only grow from here
			}
			if d, ok := get(r); ok {
				return d, true
			}
		}
	}
	return get(s)
}

// holding returns the live delegation in sh holding a (a part, or the
// range id's own) with its signed record; ok is false when there is none.
func (c *coordinator) holding(sh *shard, id subnet.ID, a netip.Addr) (*pb.SignedRecord, Delegation, bool, error) {
	var (
		sr   *pb.SignedRecord
		ferr error
	)
	d, ok := mostSpecific(c.tree.Range(id), a, true, func(r subnet.Range) (Delegation, bool) {
		rec, d, ok, err := c.lookup(sh, r)
		if err != nil {
			ferr = err
		}
		if !ok || d.Orphaned {
			return Delegation{}, false
		}
		sr = rec
		return d, true
	})
	if ferr != nil {
		return nil, Delegation{}, false, ferr
	}
	return sr, d, ok, nil
}

// countParts returns how many live parts of range s sh holds (a scan of
// the shard: splits are rare).
func (c *coordinator) countParts(sh *shard, s subnet.Range) int {
	n := 0
	_ = c.st.scan(sh.key, pb.Entry_DELEGATION, func(e *pb.Entry) bool {
		d, err := c.entryDelegation(e)
		if err == nil && !d.Orphaned && d.Subnet != s && s.ContainsRange(d.Subnet) {
			n++
		}
		return true
	})
	return n
}

// split searches apart the part of the delegation holding a that holds a
// and not the address it was decided for, on behalf of that delegation's
// node (from), whose crawl measured observed to a. It returns the part's
// record, or the holding delegation's when a is the address it was decided
// for (nothing to split).
func (c *coordinator) split(sh *shard, id subnet.ID, a netip.Addr, url string, from peer.ID, observed time.Duration) (*pb.SignedRecord, error) {
	hsr, h, ok, err := c.holding(sh, id, a)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: %v is not delegated", ErrNotFound, a)
	}
	if h.Node != from {
		return nil, fmt.Errorf("%w: %s is delegated to another node", ErrForbidden, h.Subnet)
	}
	conv := c.convicted()
	if conv[from] {
		// Its range is being taken from it; it gets no part either.
		return nil, fmt.Errorf("%w: %s was convicted by audits", ErrForbidden, from)
	}
	part, ok := subnet.SplitRange(subnet.Part{Range: h.Subnet, Node: string(h.Node), Addr: h.Addr}, a)
	if !ok {
		return hsr, nil
	}
	s := c.tree.Range(id)
	if n := c.countParts(sh, s); n >= maxParts {
		return nil, fmt.Errorf("%w: %s has %d parts delegated apart", ErrOverloaded, s, n)
	}
	fk := string(rangeKey(part))
	f, first := sh.join(fk)
	if !first {
		<-f.done
		return f.rec, f.err
	}
	defer sh.land(fk, f)
	if sr, d, ok, err := c.lookup(sh, part); err == nil && ok && !d.Orphaned {
		f.rec = sr // a split of the same part landed meanwhile
		return sr, nil
	}
	req := DelegateRequest{Subnet: id, Addr: a, URL: url, From: from, Reason: "split", Part: part, Holder: from, Observed: observed}
	for p := range conv {
		req.Exclude = append(req.Exclude, p)
	}
	ctx, cancel := context.WithTimeout(c.o.ctx, coordDeadline)
	defer cancel()
	node, err := c.cfg.delegator.Delegate(ctx, req, &env{c: c, sh: sh, subnet: id})
	if err != nil {
		f.err = fmt.Errorf("delegation procedure: %w", err)
		return nil, f.err
	}
	if node == "" || slices.Contains(req.Exclude, node) {
		f.err = fmt.Errorf("delegation procedure: %w", ErrNoCandidate)
		return nil, f.err
	}
	f.rec, f.err = c.recordRange(ctx, sh, part, c.tree.Org(id), node, url, a, false, subnet.Range{})
	if f.err == nil {
		c.log.Info("part delegated apart", "part", part.String(), "of", s.String(), "holder", from, "observed", observed, "peer", node)
	}
	return f.rec, f.err
}

// handleSplit serves SPLIT: the holder of the delegation holding addr asks
// for the part holding addr to be searched apart.
func (o *Overlay) handleSplit(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
	rq := req.GetSplit()
	a, err := o.checkAddrRequest(rq.GetSnapshot(), rq.GetAddr(), rq.GetUrl())
	if err != nil {
		return nil, err
	}
	observed := time.Duration(rq.GetObservedMicros()) * time.Microsecond
	if observed <= 0 || observed > maxWonRTT {
		return nil, fmt.Errorf("%w: observed RTT %v", ErrMalformed, observed)
	}
	id := o.tree.SmallestNonUnary(a)
	if id == subnet.None {
		return nil, fmt.Errorf("%w: %v is in no range", ErrNotFound, a)
	}
	if o.carrying() {
		return nil, o.errCarrying()
	}
	sh, err := o.coord.ensureOwner(ctx, o.coord.rangeShard(id))
	if err != nil {
		return nil, err
	}
	o.noteSeen(sh, from)
	sr, err := o.coord.split(sh, id, a, rq.GetUrl(), from, observed)
	if err != nil {
		return nil, err
	}
	return o.delegationMsg(sr), nil
}

// Split asks for a part of the delegation holding a to be delegated apart:
// this node holds that delegation, and it measured observed to a (url a
// page there), much more than the probe it won the delegation with.
// observed should be a probe, as the other nodes' answers are: a crawl's
// fetch times are a GET's, and read long.
// The coordinator searches the largest CIDR block holding a and not the
// address the delegation was decided for, this node's observation counting
// as its answer. It returns the part's delegation (to this node when no
// other is nearer), or the delegation holding a when a is the address it
// was decided for.
func (o *Overlay) Split(ctx context.Context, url string, a netip.Addr, observed time.Duration) (Delegation, error) {
	if err := o.refuse(a, url); err != nil {
		return Delegation{}, fmt.Errorf("split: %w", err)
	}
	a = a.Unmap()
	id := o.tree.SmallestNonUnary(a)
	if id == subnet.None {
		return Delegation{}, fmt.Errorf("split %v: invalid address", a)
	}
	if observed <= 0 || observed > maxWonRTT {
		return Delegation{}, fmt.Errorf("split %v: observed RTT %v out of bounds", a, observed)
	}
	req := newMsg(pb.Message_SPLIT)
	req.Split = &pb.Split{Snapshot: o.sid[:], Addr: a.AsSlice(), Url: url, ObservedMicros: observed.Microseconds()}
	resp, err := o.askCoordinator(ctx, o.coord.rangeShard(id), req, pb.Message_DELEGATION)
	if err != nil {
		return Delegation{}, err
	}
	sr := resp.GetDelegation().GetRecord()
	d, err := o.checkHolding(sr, id, a)
	if err != nil {
		return Delegation{}, err
	}
	o.cache.put(d, d.Subnet != o.tree.Range(id))
	if d.Node == o.h.ID() {
		o.noteAssigned(sr)
		if _, ok := o.WonRTT(d.Subnet); !ok {
			// The part stayed here: this node's observation is what
			// it won the part with.
			o.noteWonRTT(d.Subnet, observed)
		}
	}
	return d, nil
}

// checkHolding verifies a delegation record received for address a, whose
// smallest non-unary range is id: it must delegate that range or a part of
// it holding a.
func (o *Overlay) checkHolding(sr *pb.SignedRecord, id subnet.ID, a netip.Addr) (Delegation, error) {
	d, err := o.openDelegation(sr)
	if err != nil {
		return Delegation{}, err
	}
	if d.Subnet == o.tree.Range(id) {
		return d, nil
	}
	if s, ok := partOf(o.tree, d.Subnet); !ok || s != id || !d.Subnet.Contains(a) {
		return Delegation{}, fmt.Errorf("%w: record for %s, asked about %v in %s", ErrBadRecord, d.Subnet, a, o.tree.Range(id))
	}
	return d, nil
}
