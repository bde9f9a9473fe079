package overlay

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/overlay/pb"
)

// Tallies and convictions: each author's audit outcomes over a window, in
// the shard's replicated state or a deputy's store, and the set of
// convicted nodes they give.

// tallies is where a judge keeps the tallies of a shard's audits: the
// shard's replicated state (AUDIT entries) when it coordinates the shard,
// its own store when it is the deputy of the coordinator, which no
// replica's state can hold (the coordinator writes it).
type tallies struct {
	c      *coordinator
	sh     *shard
	deputy bool
}

// get returns p's tally (empty when there is none).
func (b tallies) get(p peer.ID) (*pb.AuditEntry, error) {
	var raw []byte
	if b.deputy {
		v, err := b.c.st.getDeputy(b.sh.key, p)
		if err != nil || v == nil {
			return &pb.AuditEntry{Peer: []byte(p)}, err
		}
		raw = v
	} else {
		e, err := b.c.st.getEntry(b.sh.key, pb.Entry_AUDIT, []byte(p))
		if err != nil || e == nil {
			return &pb.AuditEntry{Peer: []byte(p)}, err
		}
		raw = e.GetValue()
	}
	var t pb.AuditEntry
	if err := proto.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("audit entry: %w", err)
	}
	return &t, nil
}

// put stores t: a write of the shard, replicated to a majority, or a
// deputy's own record, kept for twice the conviction (then the judgement
// it holds has run out).
func (b tallies) put(ctx context.Context, t *pb.AuditEntry) error {
	v, err := proto.Marshal(t)
	if err != nil {
		return err
	}
	if b.deputy {
		return b.c.st.putDeputy(b.sh.key, peer.ID(t.GetPeer()), v, 2*b.c.o.cfg.audit.Conviction)
	}
	_, err = b.c.write(ctx, b.sh, 1, func(int, uint64, uint64) (*pb.Entry, error) {
		return &pb.Entry{Kind: pb.Entry_AUDIT, Key: t.GetPeer(), Value: v}, nil
	})
	return err
}

// deputyFor returns the tallies with which this node judges an audit of
// author as its deputy in shard ref: author is nearer ref's key than this
// node (it coordinates the shard, or it would not have been passed over),
// and this node is the nearest peer after it. The shard's state is this
// node's replica of it: the delegation judged is the one the coordinator
// replicated. When author is not nearer the key than this node, there is
// no one to stand in for, and the audit is judged as by any coordinator.
func (c *coordinator) deputyFor(ctx context.Context, ref shardRef, author peer.ID) (tallies, error) {
	key := ref.key(c.sid)
	if !closer(author, c.self, key) {
		sh, err := c.ensureOwner(ctx, ref)
		return tallies{c: c, sh: sh}, err
	}
	for _, p := range c.view(key) {
		if p == author {
			continue
		}
		if p != c.self {
			return tallies{}, &notCoordinatorError{closer: c.addrInfo(p)}
		}
		break
	}
	sh, err := c.shard(ref)
	if err != nil {
		return tallies{}, err
	}
	return tallies{c: c, sh: sh, deputy: true}, nil
}

// convictedAt reports whether tally t convicts its node at now.
func (c *coordinator) convictedAt(t *pb.AuditEntry, now time.Time) bool {
	at := t.GetConvictedMs()
	return at != 0 && now.Sub(time.UnixMilli(at)) < c.o.cfg.audit.Conviction
}

// recordAudit adds one conclusive audit of p's record of a URL (FNV-64a
// uh) on host to p's tally in sh, convicting p when the tally says so, and
// returns the new tally. A URL the tally judged already (among its last
// 64) is not counted again.
func (c *coordinator) recordAudit(ctx context.Context, b tallies, p peer.ID, host string, agreed bool, uh uint64) (*pb.AuditEntry, error) {
	c.auditMu.Lock()
	defer c.auditMu.Unlock()
	t, err := b.get(p)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if at := t.GetConvictedMs(); at != 0 && !c.convictedAt(t, now) {
		t = &pb.AuditEntry{Peer: []byte(p)} // the conviction ran out: a fresh start
	}
	if slices.Contains(t.Judged, uh) {
		return t, nil // counted once: an asker replaying a record gains nothing
	}
	t.Judged = append(t.Judged, uh)
	if len(t.Judged) > maxAuditJudged {
		t.Judged = t.Judged[len(t.Judged)-maxAuditJudged:]
	}
	t.Recent <<= 1
	t.RecentN = min(t.RecentN+1, 64)
	if agreed {
		t.Agreed++
	} else {
		t.Disagreed++
		t.Recent |= 1
		if !slices.Contains(t.Hosts, host) {
			t.Hosts = append(t.Hosts, host)
			if len(t.Hosts) > maxAuditHosts {
				t.Hosts = t.Hosts[1:]
			}
		}
	}
	t.AtMs = now.UnixMilli()
	ac := c.o.cfg.audit
	n := min(int(t.RecentN), ac.Window)
	bad := bits.OnesCount64(t.Recent & (1<<n - 1))
	convicts := t.GetConvictedMs() == 0 && bad >= ac.MinDisagreements && len(t.Hosts) >= ac.MinHosts &&
		float64(bad) >= ac.Ratio*float64(n)
	if convicts {
		t.ConvictedMs = now.UnixMilli()
	}
	if err := b.put(ctx, t); err != nil {
		return nil, err
	}
	if convicts {
		c.o.stats.convictions.Add(1)
		c.log.Warn("node convicted by audits: its results disagree with other nodes' fetches", "peer", p,
			"agreed", t.Agreed, "disagreed", t.Disagreed, "hosts", strings.Join(t.Hosts, ","), "shard", b.sh.ref.String(),
			"deputy", b.deputy)
		c.convictions.invalidate()
		select {
		case c.convictQ <- struct{}{}:
		default: // a round is pending already
		}
	}
	return t, nil
}

// convictionLoop re-delegates the subnets of convicted nodes in every
// range shard this node coordinates as soon as a node is convicted, rather
// than at the next maintenance round (which does it too: see
// checkLiveness).
func (c *coordinator) convictionLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.convictQ:
		}
		for _, s := range c.heldShards() {
			s.mu.Lock()
			owned := s.owned
			s.mu.Unlock()
			if owned && s.ref.kind == pb.ShardRef_RANGE {
				c.checkLiveness(ctx, s)
			}
		}
	}
}

// convictionSet caches the nodes convicted in the shards this node
// coordinates.
type convictionSet struct {
	mu  sync.Mutex
	at  time.Time
	set map[peer.ID]bool
}

func (s *convictionSet) invalidate() {
	s.mu.Lock()
	s.at = time.Time{}
	s.mu.Unlock()
}

// convicted returns the nodes convicted, by audits, in any range shard this
// node coordinates (a shard taken over brings its tallies) or as the
// deputy of a shard's coordinator. The map must not be modified.
func (c *coordinator) convicted() map[peer.ID]bool {
	s := &c.convictions
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if now.Sub(s.at) < convictionsCache {
		return s.set
	}
	set := map[peer.ID]bool{}
	for _, sh := range c.heldShards() {
		sh.mu.Lock()
		owned := sh.owned
		sh.mu.Unlock()
		if !owned || sh.ref.kind != pb.ShardRef_RANGE {
			continue
		}
		_ = c.st.scan(sh.key, pb.Entry_AUDIT, func(e *pb.Entry) bool {
			var t pb.AuditEntry
			if proto.Unmarshal(e.GetValue(), &t) == nil && c.convictedAt(&t, now) {
				if p, err := peer.IDFromBytes(t.GetPeer()); err == nil {
					set[p] = true
				}
			}
			return len(set) < maxEnvList
		})
	}
	_ = c.st.scanDeputies(func(v []byte) bool {
		var t pb.AuditEntry
		if proto.Unmarshal(v, &t) == nil && c.convictedAt(&t, now) {
			if p, err := peer.IDFromBytes(t.GetPeer()); err == nil {
				set[p] = true
			}
		}
		return len(set) < maxEnvList
	})
	s.set, s.at = set, now
	return set
}

// Convicted reports the nodes this node, as a coordinator, convicted by
// audits (or took over convicted with a shard), for the dashboard.
func (o *Overlay) Convicted() []peer.ID {
	var out []peer.ID
	for p := range o.coord.convicted() {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// checkAuditEntry verifies a replicated audit entry.
func checkAuditEntry(e *pb.Entry) error {
	var t pb.AuditEntry
	if err := proto.Unmarshal(e.GetValue(), &t); err != nil {
		return fmt.Errorf("%w: audit entry: %v", ErrMalformed, err)
	}
	if string(t.GetPeer()) != string(e.GetKey()) || len(t.GetHosts()) > maxAuditHosts || len(t.GetJudged()) > maxAuditJudged {
		return fmt.Errorf("%w: audit entry of %d hosts and %d judged URLs, or not keyed by its peer", ErrMalformed, len(t.GetHosts()), len(t.GetJudged()))
	}
	if _, err := peer.IDFromBytes(t.GetPeer()); err != nil {
		return fmt.Errorf("%w: audit entry: %v", ErrMalformed, err)
	}
	return nil
}
