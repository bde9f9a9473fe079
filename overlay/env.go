package overlay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

// env is the DelegationEnv of one decision in one shard.
type env struct {
	c      *coordinator
	sh     *shard
	subnet subnet.ID // the subnet being decided
}

// maxEnvList bounds the lists env reads from the shard's store.
const maxEnvList = 65536

var _ DelegationEnv = (*env)(nil)

func (e *env) Tree() *subnet.Tree { return e.c.tree }

func (e *env) Lookup(ctx context.Context, id subnet.ID) (Delegation, bool, error) {
	if e.c.rangeShard(id).key(e.c.sid) == e.sh.key {
		_, d, ok, err := e.c.lookup(e.sh, e.c.tree.Range(id))
		if err != nil || !ok || d.Orphaned {
			return Delegation{}, false, err
		}
		return d, true, nil
	}
	return e.c.o.Lookup(ctx, id)
}

func (e *env) OrgDelegations(ctx context.Context, org string) ([]Delegation, error) {
	return e.c.o.OrgDelegations(ctx, org)
}

func (e *env) Probe(ctx context.Context, p peer.ID, url string, r subnet.Range) (time.Duration, error) {
	if id, _, ok := rangeOrPart(e.c.tree, r); !ok || e.c.rangeShard(id).key(e.c.sid) != e.sh.key {
		return 0, fmt.Errorf("%w: probe for %s outside the shard", ErrNotFound, r)
	}
	// The search bounds its candidates by p's row of RTTs: ask for it
	// beside the probe when this node holds no fresh copy (rttrow.go).
	var pulled chan struct{}
	if e.c.o.rowWanted(p) {
		pulled = make(chan struct{})
		go func() {
			defer close(pulled)
			e.c.o.exchangeAnnounce(ctx, p, true)
		}()
	}
	rtt, err := e.c.o.Probe(ctx, p, url)
	if pulled != nil {
		<-pulled
	}
	ran := err == nil || errors.Is(err, ErrProbeFailed)
	if !ran && (isRemote(err) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrForbidden) || errors.Is(err, ErrTooLarge)) {
		// p, or this node for itself, refused (it does not probe, is
		// outside its windows or overloaded, or the target is
		// forbidden): that says nothing of its distance to the subnet.
		return 0, err
	}
	// A probe's outcome is stored, and so is a node that could not be
	// asked (gone, unreachable), as failed: the decisions that follow
	// count it out until the failure ages, instead of each waiting out
	// its probe timeout again.
	stored := rtt.Microseconds()
	if err != nil {
		stored = -1
	}
	pe := &pb.ProbeEntry{Subnet: rangeToPB(r), Peer: []byte(p), RttMicros: stored, AtMs: time.Now().UnixMilli()}
	if v, merr := proto.Marshal(pe); merr == nil {
		key := append(rangeKey(r), []byte(p)...)
		if len(key) <= maxEntryKey {
			if _, werr := e.c.write(ctx, e.sh, 1, func(int, uint64, uint64) (*pb.Entry, error) {
				return &pb.Entry{Kind: pb.Entry_PROBE, Key: key, Value: v}, nil
			}); werr != nil {
				e.c.log.Debug("storing a probe result failed", "error", werr)
			}
		}
	}
	if !ran {
		return 0, err
	}
	return rtt, err
}

func (e *env) Probes(s subnet.ID) []ProbeResult {
	return e.c.probesOf(e.sh.key, e.c.tree.Range(s), maxEnvList)
}

func (e *env) Anchor() subnet.ID { return e.c.anchorOf(e.subnet) }

func (e *env) Delegations() []Delegation {
	var out []Delegation
	_ = e.c.st.scan(e.sh.key, pb.Entry_DELEGATION, func(en *pb.Entry) bool {
		var sr pb.SignedRecord
		if proto.Unmarshal(en.GetValue(), &sr) != nil {
			return true
		}
		if r, err := recordOf(&sr); err == nil && r.GetKind() == pb.Record_DELEGATION {
			if d := delegationFrom(r); !d.Orphaned {
				out = append(out, d)
			}
		}
		return len(out) < maxEnvList
	})
	return out
}

func (e *env) ProbesWithin(r subnet.Range) []ProbeResult {
	var out []ProbeResult
	// Every range in r starts with the bytes r's first and last
	// addresses share, and its key with its first address.
	s, end := r.Start.As16(), r.End.As16()
	n := 0
	for n < len(s) && s[n] == end[n] {
		n++
	}
	_ = e.c.st.scanPrefix(e.sh.key, pb.Entry_PROBE, s[:n], func(en *pb.Entry) bool {
		if pr, ok := probeResult(en); ok && r.ContainsRange(pr.Subnet) {
			out = append(out, pr)
		}
		return len(out) < maxEnvList
	})
	return out
}

func (e *env) Block(ctx context.Context, x subnet.ID) ([]IndexedDelegation, error) {
	a := e.Anchor()
	if !e.c.above(x, a) {
		return nil, fmt.Errorf("block %s: %w: not above the shard's anchor", e.c.tree.Range(x), ErrNotFound)
	}
	return e.c.o.Block(ctx, x, a)
}

func (e *env) Reassign(ctx context.Context, t subnet.ID, from, to peer.ID) (Delegation, error) {
	if t == e.subnet {
		return Delegation{}, fmt.Errorf("reassign: %s is the subnet being decided", e.c.tree.Range(t))
	}
	if e.c.rangeShard(t).key(e.c.sid) == e.sh.key {
		sr, err := e.c.reassign(ctx, e.sh, t, from, to)
		if err != nil {
			return Delegation{}, err
		}
		return e.c.o.checkDelegation(sr, e.c.tree.Range(t))
	}
	return e.c.o.reassign(ctx, t, from, to, e.subnet)
}

func (e *env) Between(a, b peer.ID) (time.Duration, bool) { return e.c.o.Between(a, b) }

func (e *env) MeasuredBy(by, of peer.ID) (time.Duration, bool) { return e.c.o.MeasuredBy(by, of) }

func (e *env) Self() peer.ID { return e.c.self }

func (e *env) MayCrawl(p peer.ID) bool { return e.c.o.mayCrawl(p) }

// Peers merges the shard's heartbeating crawlers and stored loads, the
// announced peers and the DHT routing table, self included.
func (e *env) Peers() []PeerInfo {
	byID := map[peer.ID]PeerInfo{}
	o := e.c.o
	capacity, load := o.cfg.load()
	for _, p := range o.dht.RoutingTable().ListPeers() {
		byID[p] = PeerInfo{ID: p}
	}
	o.mu.Lock()
	for id, pi := range o.peers {
		byID[id] = pi
	}
	o.mu.Unlock()
	byID[o.h.ID()] = PeerInfo{ID: o.h.ID(), Capacity: capacity, Load: load, Subnets: uint32(len(o.Owned())), LoadAt: time.Now(), Seen: time.Now()}
	_ = e.c.st.scan(e.sh.key, pb.Entry_LOAD, func(en *pb.Entry) bool {
		var le pb.LoadEntry
		if proto.Unmarshal(en.GetValue(), &le) != nil {
			return true
		}
		if p, err := peer.IDFromBytes(le.GetPeer()); err == nil && p != o.h.ID() {
			pi := byID[p]
			if at := time.UnixMilli(le.GetAtMs()); !at.Before(pi.LoadAt) {
				pi.ID, pi.Capacity, pi.Load, pi.Subnets, pi.LoadAt = p, le.GetCapacity(), le.GetLoad(), le.GetSubnets(), at
			}
			byID[p] = pi
		}
		return true
	})
	e.sh.mu.Lock()
	for p, t := range e.sh.lastSeen {
		pi := byID[p]
		pi.ID = p
		if t.After(pi.Seen) {
			pi.Seen = t
		}
		byID[p] = pi
	}
	e.sh.mu.Unlock()
	out := make([]PeerInfo, 0, len(byID))
	for _, pi := range byID {
		if o.mayCrawl(pi.ID) {
			out = append(out, pi)
		}
	}
	out = o.shareByPlace(out)
	slices.SortFunc(out, func(a, b PeerInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// OrgDelegations returns the delegated ranges of organisation org, from its
// organisation shard's coordinator (at most 512). When the coordinator
// cannot be reached and the network publishes organisation records
// (PublishRecords), it falls back on the record the coordinator put in the
// DHT (one DHT lookup; the record may lag the shard by a publication
// interval).
func (o *Overlay) OrgDelegations(ctx context.Context, org string) ([]Delegation, error) {
	if org == "" || len(org) > 256 {
		return nil, fmt.Errorf("organisation key of %d bytes", len(org))
	}
	req := newMsg(pb.Message_ORG_QUERY)
	req.OrgQuery = &pb.OrgQuery{Snapshot: o.sid[:], Org: org}
	resp, err := o.askCoordinator(ctx, orgShard(org), req, pb.Message_ORG_ENTRIES)
	if o.orgFallback(ctx, err) {
		ds, derr := o.orgFromDHT(ctx, org)
		if derr == nil {
			o.log.Debug("organisation shard unreachable; read its DHT record", "org", org, "error", err)
			return ds, nil
		}
		return nil, errors.Join(err, derr)
	}
	if err != nil {
		return nil, err
	}
	recs := resp.GetOrgEntries().GetRecords()
	if len(recs) > maxOrgEntries {
		return nil, fmt.Errorf("%w: %d organisation entries", ErrTooLarge, len(recs))
	}
	var out []Delegation
	for _, sr := range recs {
		r, err := openRecord(o.sid, sr)
		if err != nil || r.GetKind() != pb.Record_DELEGATION || r.GetOrg() != org {
			continue
		}
		if d := delegationFrom(r); !d.Orphaned {
			out = append(out, d)
		}
	}
	return out, nil
}
