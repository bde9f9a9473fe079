package overlay

import (
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
	c  *coordinator
	sh *shard
}

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

func (e *env) Probe(ctx context.Context, p peer.ID, url string, s subnet.ID) (time.Duration, error) {
	rtt, err := e.c.o.Probe(ctx, p, url)
	stored := rtt.Microseconds()
	if err != nil {
		stored = -1
	}
	pe := &pb.ProbeEntry{Subnet: rangeToPB(e.c.tree.Range(s)), Peer: []byte(p), RttMicros: stored, AtMs: time.Now().UnixMilli()}
	v, merr := proto.Marshal(pe)
	if merr == nil {
		key := append(rangeKey(e.c.tree.Range(s)), []byte(p)...)
		if len(key) <= maxEntryKey {
			if _, werr := e.c.write(ctx, e.sh, 1, func(int, uint64, uint64) (*pb.Entry, error) {
				return &pb.Entry{Kind: pb.Entry_PROBE, Key: key, Value: v}, nil
			}); werr != nil {
				e.c.log.Debug("storing a probe result failed", "error", werr)
			}
		}
	}
	if err != nil && !errors.Is(err, ErrProbeFailed) {
		return 0, fmt.Errorf("%w: %w", ErrProbeFailed, err)
	}
	return rtt, err
}

func (e *env) Probes(s subnet.ID) []ProbeResult {
	r := e.c.tree.Range(s)
	prefix := string(rangeKey(r))
	var out []ProbeResult
	_ = e.c.st.scan(e.sh.key, pb.Entry_PROBE, func(en *pb.Entry) bool {
		if len(en.GetKey()) < len(prefix) || string(en.GetKey()[:len(prefix)]) != prefix {
			return true
		}
		var pe pb.ProbeEntry
		if proto.Unmarshal(en.GetValue(), &pe) != nil {
			return true
		}
		p, err := peer.IDFromBytes(pe.GetPeer())
		if err != nil {
			return true
		}
		rtt := time.Duration(pe.GetRttMicros()) * time.Microsecond
		if pe.GetRttMicros() < 0 {
			rtt = -1
		}
		out = append(out, ProbeResult{Subnet: r, Peer: p, RTT: rtt, At: time.UnixMilli(pe.GetAtMs())})
		return true
	})
	return out
}

// Peers merges the shard's heartbeating crawlers and stored loads, the
// announced peers and the DHT routing table, self included.
func (e *env) Peers() []PeerInfo {
	byID := map[peer.ID]PeerInfo{}
	o := e.c.o
	capacity, load := o.cfg.load()
	byID[o.h.ID()] = PeerInfo{ID: o.h.ID(), Capacity: capacity, Load: load, Seen: time.Now()}
	for _, p := range o.dht.RoutingTable().ListPeers() {
		byID[p] = PeerInfo{ID: p}
	}
	o.mu.Lock()
	for id, pi := range o.peers {
		byID[id] = pi
	}
	o.mu.Unlock()
	_ = e.c.st.scan(e.sh.key, pb.Entry_LOAD, func(en *pb.Entry) bool {
		var le pb.LoadEntry
		if proto.Unmarshal(en.GetValue(), &le) != nil {
			return true
		}
		if p, err := peer.IDFromBytes(le.GetPeer()); err == nil {
			pi := byID[p]
			pi.ID, pi.Capacity, pi.Load = p, le.GetCapacity(), le.GetLoad()
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
		out = append(out, pi)
	}
	slices.SortFunc(out, func(a, b PeerInfo) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

// OrgDelegations returns the delegated ranges of organisation org, from its
// organisation shard's coordinator (at most 512).
func (o *Overlay) OrgDelegations(ctx context.Context, org string) ([]Delegation, error) {
	if org == "" || len(org) > 256 {
		return nil, fmt.Errorf("organisation key of %d bytes", len(org))
	}
	req := newMsg(pb.Message_ORG_QUERY)
	req.OrgQuery = &pb.OrgQuery{Snapshot: o.sid[:], Org: org}
	resp, err := o.askCoordinator(ctx, orgShard(org), req, pb.Message_ORG_ENTRIES)
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
