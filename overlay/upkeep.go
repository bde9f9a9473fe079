// The coordinator's loops: notices after decisions, maintenance (takeovers,
// handovers, replica pushes) and liveness.

package overlay

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/overlay/pb"
)

type assignJob struct {
	to  peer.ID
	rec *pb.SignedRecord
	rtt time.Duration // to's stored probe of the subnet, 0 when none
}

// notifier sends queued notices until ctx is done. Each kind has its own
// loop, so that a slow kind cannot hold back another: an organisation
// update to a dead organisation coordinator retries for seconds and a DHT
// put may take 30 s, while a crawler given an orphaned subnet must hear of
// it at once. Assignments and index updates go out from a few loops
// each, several at a time: a coordinator deciding a busy shard's subnets
// queues two index updates per decision, each a round trip to another
// coordinator and its replication, and one loop drained them minutes
// after the last decision. Index updates may arrive out of order: the
// organisation and block shards keep the record of the higher epoch and
// sequence number.
func (c *coordinator) notifier(ctx context.Context) {
	var wg sync.WaitGroup
	for range assignWorkers {
		wg.Go(func() { c.assignLoop(ctx) })
	}
	for range indexWorkers {
		wg.Go(func() { c.indexLoop(ctx) })
	}
	wg.Go(func() { c.publishLoop(ctx) })
	wg.Wait()
}

// assignWorkers is how many ASSIGN notices are in flight at once;
// indexWorkers, organisation and block updates.
const (
	assignWorkers = 4
	indexWorkers  = 4
)

func (c *coordinator) assignLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-c.assignQ:
			c.sending(func() {
				m := newMsg(pb.Message_ASSIGN)
				m.Assign = &pb.Assign{Record: j.rec, RttMicros: j.rtt.Microseconds()}
				retry(ctx, 3, time.Second, func() error {
					c.o.stats.requests.Add(1)
					_, err := c.o.request(ctx, j.to, coordSpec, m, pb.Message_OK)
					return err
				})
			})
		}
	}
}

// indexLoop sends decisions to their organisation and block shards.
func (c *coordinator) indexLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case rec := <-c.orgQ:
			c.sending(func() { c.indexInOrg(ctx, rec) })
		case rec := <-c.blockQ:
			c.sending(func() { c.indexInBlocks(ctx, rec) })
		}
	}
}

// publishLoop puts delegation records into the DHT.
func (c *coordinator) publishLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case rec := <-c.pubQ:
			c.sending(func() { c.publish(ctx, rec) })
		}
	}
}

// sending runs f, the sending of one notice, counted in c.noticing.
func (c *coordinator) sending(f func()) {
	c.noticing.Add(1)
	defer c.noticing.Add(-1)
	f()
}

// indexInOrg sends rec to its organisation's shard.
func (c *coordinator) indexInOrg(ctx context.Context, rec *pb.SignedRecord) {
	r, err := openRecord(c.sid, rec)
	if err != nil || r.GetOrg() == "" {
		return
	}
	m := newMsg(pb.Message_ORG_UPDATE)
	m.OrgUpdate = &pb.OrgUpdate{Snapshot: c.sid[:], Org: r.GetOrg(), Record: rec}
	retry(ctx, 3, time.Second, func() error {
		_, err := c.o.askCoordinator(ctx, orgShard(r.GetOrg()), m, pb.Message_OK)
		return err
	})
}

// publish puts the delegation record rec into the DHT.
func (c *coordinator) publish(ctx context.Context, rec *pb.SignedRecord) {
	r, err := openRecord(c.sid, rec)
	if err != nil {
		return
	}
	rg, _ := rangeFromPB(r.GetSubnet())
	v, err := proto.Marshal(rec)
	if err != nil {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.o.dht.PutValue(pctx, DelegationKey(c.sid, rg), v); err != nil {
		c.log.Debug("publishing delegation record failed", "error", err)
	}
}

func retry(ctx context.Context, n int, wait time.Duration, f func() error) {
	for i := range n {
		if f() == nil {
			return
		}
		if i == n-1 {
			return
		}
		t := time.NewTimer(wait + time.Duration(rand.Int64N(int64(wait))))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait *= 2
	}
}

// maintain runs one round of shard upkeep: ownership checks, takeovers,
// replica pushes and liveness.
func (c *coordinator) maintain(ctx context.Context) {
	keep := map[peer.ID]bool{}
	defer func() {
		if ctx.Err() == nil {
			c.protect(keep)
		}
	}()
	for _, sh := range c.heldShards() {
		if ctx.Err() != nil {
			return
		}
		sh.mu.Lock()
		owned, hasState := sh.owned, sh.meta.GetEpoch() > 0
		sh.mu.Unlock()
		peers := c.maintainView(ctx, sh, owned, hasState)
		if set := c.replicaSet(peers); slices.Contains(set, c.self) {
			for _, p := range set {
				if p != c.self {
					keep[p] = true
				}
			}
		}
		closest := peers[0] == c.self
		sh.mu.Lock()
		owned, dirty, prev := sh.owned, sh.dirty, sh.replicas
		if owned && !closest {
			sh.owned = false
			sh.handover = handoverRounds
			c.log.Info("shard handed over to a closer peer", "shard", sh.ref.String(), "peer", peers[0])
		}
		handover := sh.handover > 0 && !closest
		sh.mu.Unlock()
		switch {
		case handover:
			c.handOver(ctx, sh, peers[0])
			continue
		case !owned && closest && hasState:
			if err := c.claim(ctx, sh, peers); err != nil {
				c.log.Debug("takeover failed", "shard", sh.ref.String(), "error", err)
				continue
			}
			dirty = true
		case !owned:
			if hasState {
				c.nudge(ctx, sh, peers)
			}
			continue
		}
		if dirty {
			sh.mu.Lock()
			sh.pending = nil // the whole state goes below, measurements with it
			sh.mu.Unlock()
		} else {
			c.flushPending(ctx, sh)
		}
		// The replicas that hold the state: those it was pushed to now,
		// and those that held it already. A failed one is left out, so
		// that the next round pushes the whole state to it again.
		var stored []peer.ID
		lost := false
		for _, p := range c.replicaSet(peers) {
			if p == c.self || (!dirty && slices.Contains(prev, p)) {
				stored = append(stored, p)
				continue
			}
			err := c.pushAll(ctx, p, sh)
			if errors.Is(err, ErrStaleEpoch) {
				lost = true
				break
			}
			if err != nil {
				c.log.Debug("replica push failed", "peer", p, "error", err)
				c.recheck(sh)
				continue
			}
			stored = append(stored, p)
		}
		sh.mu.Lock()
		if lost {
			sh.owned = false // a replica promised a newer claimer
			sh.mu.Unlock()
			continue
		}
		sh.replicas = stored
		sh.dirty = false
		sh.mu.Unlock()
		if sh.ref.kind == pb.ShardRef_RANGE {
			c.checkLiveness(ctx, sh)
		}
	}
}

// protectTag marks the connection manager's protection of the connections
// to the peers this node shares a replica set with.
const protectTag = "micra-replicas"

// protect has the connection manager spare the connections to the peers
// in keep, and no longer those it spared for the last
// round's set: the replica sets of the shards this node holds. A trimmed
// connection to a replica costs a DHT lookup at the next round
// (maintainView takes an unconnected replica for a gone one) and a dial
// per replicated write.
func (c *coordinator) protect(keep map[peer.ID]bool) {
	cm := c.o.h.ConnManager()
	c.mu.Lock()
	defer c.mu.Unlock()
	for p := range c.protected {
		if !keep[p] {
			cm.Unprotect(p, protectTag)
			delete(c.protected, p)
		}
	}
	for p, k := range keep {
		if k && !c.protected[p] {
			cm.Protect(p, protectTag)
			c.protected[p] = true
		}
	}
}

// maintainView returns the peers closest to sh's key for one maintenance
// round, nearest first. A round must notice a closer peer (hand the shard
// over), a coordinator gone (take it over) and a replica gone (push to the
// next one), but a DHT lookup per held shard per round was nine tenths of
// an idle node's traffic (docs/scale.md). So a round starts from the view
// (the last lookup's list joined with the routing table, which the DHT
// keeps current by itself: a lookup that meets a dead peer drops it from
// the table) and looks the key up only when
//   - something failed since (sh.lookup: a replica push failed);
//   - a peer of the view's replica set is not connected: it may be gone
//     (libp2p's keep-alives close a dead peer's connection within a
//     minute; the lookup dials it, or drops it from the table);
//   - a replica's view makes it the coordinator: confirmed before it
//     takes the shard over;
//   - for the coordinator, the view's replica set differs from the last
//     lookup's, or that lookup is older than closestTTL, and the lookup of
//     this node's own neighbourhood does not settle the key (fromHood).
func (c *coordinator) maintainView(ctx context.Context, sh *shard, owned, hasState bool) []peer.ID {
	c.mu.Lock()
	e, ok := c.closest[sh.key]
	c.mu.Unlock()
	sh.mu.Lock()
	due := sh.lookup
	sh.lookup = false
	sh.mu.Unlock()
	view := c.view(sh.key)
	set := c.replicaSet(view)
	switch {
	case due, hasState && slices.Contains(set, c.self) && !c.connected(set):
		return c.closestPeers(ctx, sh.key, true)
	case !owned:
		if view[0] != c.self || !hasState {
			return view
		}
		return c.closestPeers(ctx, sh.key, true)
	case ok && time.Since(e.at) < c.cfg.closestTTL && slices.Equal(set, c.replicaSet(e.peers)):
		return e.peers
	}
	if peers, ok := c.fromHood(ctx, sh.key); ok && c.connected(c.replicaSet(peers)) {
		c.confirmed(sh.key, peers)
		return peers
	}
	return c.closestPeers(ctx, sh.key, true)
}

// nudge hands sh's state to peers[0], the peer nearest its key by this
// replica's view, when that peer is neither this node nor the shard's
// last coordinator and this node no longer reaches the coordinator: it
// left, and the peer now nearest holds no replica (it joined since, or was
// beyond the old replica set). A peer claims a shard it holds state for in
// its maintenance; holding none, it would claim only when a request reached
// it, and the shard's liveness checks, with its crawlers' departures, would
// wait for that. Once per peer nearest; the peer merges the state like a
// handover's (handleReplicate) and claims it if it is nearest by its own
// view too.
func (c *coordinator) nudge(ctx context.Context, sh *shard, peers []peer.ID) {
	next := peers[0]
	if next == c.self || !slices.Contains(c.replicaSet(peers), c.self) {
		return
	}
	sh.mu.Lock()
	owner, _ := peer.IDFromBytes(sh.meta.GetOwner())
	done := sh.nudged == next
	sh.mu.Unlock()
	// This node's own old state goes to the next coordinator by handOver.
	if done || owner == "" || owner == next || owner == c.self || c.o.h.Network().Connectedness(owner) == network.Connected {
		return
	}
	if err := c.pushAll(ctx, next, sh); err != nil && !errors.Is(err, ErrStaleEpoch) {
		c.log.Debug("handing the state of a shard whose coordinator left failed", "shard", sh.ref.String(), "peer", next, "error", err)
		return
	}
	sh.mu.Lock()
	sh.nudged = next
	sh.mu.Unlock()
	c.log.Info("shard's state handed to the peer now nearest", "shard", sh.ref.String(), "peer", next, "coordinator", owner)
}

// connected reports whether this node has a connection to every peer of
// peers but itself.
func (c *coordinator) connected(peers []peer.ID) bool {
	for _, p := range peers {
		if p != c.self && c.o.h.Network().Connectedness(p) != network.Connected {
			return false
		}
	}
	return true
}

// recheck has the next maintenance round look sh's closest peers up.
func (c *coordinator) recheck(sh *shard) {
	sh.mu.Lock()
	sh.lookup = true
	sh.mu.Unlock()
}

// handoverRounds bounds the maintenance rounds in which a node that
// coordinated a shard offers its state to the peer that took it over.
const handoverRounds = 20

// handOver pushes sh's whole state to to, the closer peer that took the
// shard over, until it stored or merged it. The closer peer syncs from its
// replica set when it claims, but this node need not be in that set: after
// a partition, each side's coordinator holds decisions the other never saw,
// and a single lost push would lose them for good.
func (c *coordinator) handOver(ctx context.Context, sh *shard, to peer.ID) {
	err := c.pushAll(ctx, to, sh)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	switch {
	case err == nil || errors.Is(err, ErrStaleEpoch): // stored, or merged under its newer epoch
		sh.handover = 0
	default:
		sh.handover--
		if sh.handover == 0 {
			c.log.Warn("handing a shard over failed", "shard", sh.ref.String(), "peer", to, "error", err)
		} else {
			c.log.Debug("handover push failed", "peer", to, "error", err)
		}
	}
}

// checkLiveness orphans subnets whose node has been silent past the
// liveness timeout, or was convicted by audits, and re-delegates them, at
// most 64 per round.
func (c *coordinator) checkLiveness(ctx context.Context, sh *shard) {
	now := time.Now()
	convicted := c.convicted()
	var dead []Delegation
	_ = c.st.scan(sh.key, pb.Entry_DELEGATION, func(e *pb.Entry) bool {
		d, err := c.entryDelegation(e)
		// This node is alive as long as it runs this; it gives its own
		// subnets away only when its audits convicted it (its crawler
		// or its network alters pages).
		if err != nil || d.Orphaned || (d.Node == c.self && !convicted[c.self]) {
			return true
		}
		sh.mu.Lock()
		seen, ok := sh.lastSeen[d.Node]
		sh.mu.Unlock()
		if !ok || seen.Before(d.Decided) {
			seen = d.Decided
		}
		if now.Sub(seen) > c.cfg.liveness || convicted[d.Node] {
			dead = append(dead, d)
		}
		return len(dead) < 64
	})
	// Each re-delegation runs a search with probes (seconds); a dead node
	// may have held dozens of subnets of the shard, so they run side by
	// side, a few at a time, and all of them within one round.
	// Every node found silent is kept out of every one of these decisions:
	// two nodes that died together must not be given each other's
	// subnets (a stored probe of a dead node still looks good).
	var silent []peer.ID
	for _, d := range dead {
		if !slices.Contains(silent, d.Node) {
			silent = append(silent, d.Node)
		}
	}
	parallel(ctx, orphanWorkers, dead, func(d Delegation) {
		reason := "orphaned"
		if convicted[d.Node] {
			reason = "convicted"
		}
		if err := c.orphan(ctx, sh, d, silent, reason); err != nil {
			c.log.Debug("re-delegating an orphaned subnet failed", "subnet", d.Subnet.String(), "error", err)
		}
	})
}

// orphanWorkers bounds the re-delegations of orphaned subnets one shard
// runs at once.
const orphanWorkers = 8

// ownerIndex is a shard's current delegations by node, derived from its
// entries at change count gen; nil nodes: not built yet.
type ownerIndex struct {
	gen   uint64
	nodes map[peer.ID][]*pb.Range
}

// ownerEntries lists the subnets of sh delegated to p (at most
// maxHeartbeatList; true when there are more). Every heartbeat asks, so
// the list comes from an index of the shard's delegations by node, built
// by one scan and kept until the shard's entries change, rather than from
// a scan of the whole shard per heartbeat. When the shard cannot be read
// the list is empty and marked truncated, so that the crawler drops none of
// its subnets on it. The lists are shared: callers must not change them.
func (c *coordinator) ownerEntries(sh *shard, p peer.ID) ([]*pb.Range, bool) {
	sh.ownersMu.Lock()
	defer sh.ownersMu.Unlock()
	if gen := c.st.gen(sh.key); sh.owners.nodes == nil || sh.owners.gen != gen {
		nodes := map[peer.ID][]*pb.Range{}
		err := c.st.scan(sh.key, pb.Entry_DELEGATION, func(e *pb.Entry) bool {
			d, err := c.entryDelegation(e)
			if err == nil && !d.Orphaned && len(nodes[d.Node]) <= maxHeartbeatList {
				nodes[d.Node] = append(nodes[d.Node], rangeToPB(d.Subnet))
			}
			return true
		})
		if err != nil {
			c.log.Warn("listing a shard's delegations failed", "error", err)
			return nil, true
		}
		sh.owners = ownerIndex{gen: gen, nodes: nodes}
	}
	out := sh.owners.nodes[p]
	if len(out) > maxHeartbeatList {
		return out[:maxHeartbeatList:maxHeartbeatList], true
	}
	return out, false
}

// hintAddrs decodes the addresses of a redirect hint, at most 8.
func hintAddrs(h *pb.PeerHint) []ma.Multiaddr {
	var out []ma.Multiaddr
	for _, b := range h.GetAddrs() {
		if len(out) >= 8 {
			break
		}
		if a, err := ma.NewMultiaddrBytes(b); err == nil {
			out = append(out, a)
		}
	}
	return out
}
