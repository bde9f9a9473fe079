package overlay

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"

	"github.com/micra-net/micra/overlay/pb"
)

// A node's own RTTs to its peers. The search compares them with probes,
// which take the least of three timed requests (crawl's Fetcher.Probe):
// what the path's propagation and the two ends' access give, without the
// queueing and processing that only lengthen a sample. So an own RTT is
// the least of pingSamples pings (libp2p's ping protocol: an echo of 32
// bytes), and nothing else: the peerstore's EWMA, which the DHT's
// requests feed with their whole duration (the first with the dial's
// handshakes, then the remote's handling and a busy machine's
// scheduling), reads long, and a long RTT between two nodes prunes the
// nearer of them wrongly where an unknown one only costs a probe.
//
// A node pings every crawler it knows, not only those it is connected
// to: the peers that announced themselves to it and its connections. A
// coordinator's search bounds candidates by the rows of the nodes it
// probed (rttrow.go), so a row must cover the network, not the few dozen
// peers a node keeps connections to; at 300 nodes the connected ones were
// a third of the pairs. A ping to an unconnected peer dials it; the
// connection manager trims such connections as any other. Before each RTT
// round up to pingsPerRound peers without a ping less than pingFresh old
// are pinged, never-pinged ones first, pingParallel at a time, and a peer
// that announces itself for the first time is pinged at once
// (queueNewPing); the table holds at most maxRowRTTs peers.
//
// Pings under load read long: a link busy with a joining node's state
// transfer queues them, and three pings within a second share the queue.
// So an own RTT is the least over the peer's last pingRounds rounds, taken
// apart in time, not one round's: a crawler pinged at once when it first
// announced itself is pinged again pingConfirm later, any peer pinged once
// again at the next announcement round (confirmPings), and a later round
// replaces only the oldest. An RTT that grows for good (the peer moved)
// shows in full once the rounds before it aged out, pingRounds × pingFresh.
const (
	pingSamples   = 3
	pingsPerRound = 256
	pingParallel  = 16
	pingTimeout   = 5 * time.Second
	pingFresh     = 6 * time.Hour
	pingRounds    = 3
	// maxAnnouncedRTTs bounds the RTTs a routine announcement carries
	// to a neighbour, a random sample of the row (up to 96 peers of 45
	// bytes, about 4 kB, every rttEvery-th exchange).
	maxAnnouncedRTTs = DefaultConnHigh
	// maxRowRTTs bounds a node's row: the peers it keeps ping RTTs of,
	// and the RTTs it answers a want_rtts request with (about 46 kB).
	maxRowRTTs = 1024
)

// pinged is this node's ping RTT to a peer: the least over its last
// rounds (each round's least, oldest first, at most pingRounds), and when
// the last round was taken.
type pinged struct {
	least  time.Duration
	at     time.Time
	rounds []time.Duration
}

// withRound returns e with a round whose least was d, taken at at.
func (e pinged) withRound(d time.Duration, at time.Time) pinged {
	rounds := append(slices.Clone(e.rounds), d)
	rounds = rounds[max(len(rounds)-pingRounds, 0):]
	return pinged{least: slices.Min(rounds), at: at, rounds: rounds}
}

// pingPeers pings up to pingsPerRound known peers without a fresh ping
// RTT, pingSamples times each, and keeps the least of each peer's. Known
// peers are the connected ones, the crawlers that announced themselves
// (Peers) and the peers with addresses that speak AnnounceID and are not
// known not to crawl; the others' entries, and entries two pingFresh old,
// are dropped, and the table keeps at most maxRowRTTs peers, in that
// order.
func (o *Overlay) pingPeers(ctx context.Context) {
	known := o.h.Network().Peers()
	seen := make(map[peer.ID]bool, len(known))
	for _, p := range known {
		seen[p] = true
	}
	var others []peer.ID
	for _, pi := range o.Peers() {
		others = append(others, pi.ID)
	}
	rand.Shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
	// Then the peers met in the DHT's queries that speak the overlay's
	// protocols (identify told), crawlers as far as this node knows: a
	// routing table and the announcers hold some of a large network.
	var met []peer.ID
	for _, p := range o.h.Peerstore().PeersWithAddrs() {
		if ok, err := o.h.Peerstore().SupportsProtocols(p, AnnounceID); err == nil && len(ok) > 0 && o.mayCrawl(p) {
			met = append(met, p)
		}
	}
	rand.Shuffle(len(met), func(i, j int) { met[i], met[j] = met[j], met[i] })
	for _, p := range append(others, met...) {
		if !seen[p] && p != o.h.ID() {
			seen[p] = true
			known = append(known, p)
		}
	}
	known = known[:min(len(known), maxRowRTTs)]
	now := time.Now()
	var never, stale []peer.ID
	o.pingMu.Lock()
	keep := make(map[peer.ID]pinged, len(known))
	for _, p := range known {
		e, ok := o.pings[p]
		if ok && now.Sub(e.at) <= 2*pingFresh {
			keep[p] = e
		}
		switch {
		case !ok:
			never = append(never, p)
		case now.Sub(e.at) > pingFresh:
			stale = append(stale, p)
		}
	}
	o.pings = keep
	o.pingMu.Unlock()
	todo := append(never, stale...)
	todo = todo[:min(len(todo), pingsPerRound)]
	parallel(ctx, pingParallel, todo, func(p peer.ID) { o.pingOne(ctx, p) })
}

// pingOne pings p, looking its addresses up first when it has none, keeps
// the round's least RTT, and returns how many rounds of p the table now
// holds (0 when no ping came back and none was held).
func (o *Overlay) pingOne(ctx context.Context, p peer.ID) int {
	d, ok := time.Duration(0), o.findAddrs(ctx, p) == nil
	if ok {
		d, ok = o.pingLeast(ctx, p)
	}
	o.pingMu.Lock()
	defer o.pingMu.Unlock()
	if ok {
		o.pings[p] = o.pings[p].withRound(d, time.Now())
	}
	return len(o.pings[p].rounds)
}

// pingConfirm is how long after a crawler's first ping round
// (pingNewLoop) it is pinged again.
const pingConfirm = time.Minute

// confirmPings pings again, pingParallel at a time, up to pingsPerRound
// peers pinged in one round only, at least half an announcement interval
// ago: a first round taken while the peer joined, or while its link was
// busy, is not the only one for pingFresh.
func (o *Overlay) confirmPings(ctx context.Context) {
	now := time.Now()
	var todo []peer.ID
	o.pingMu.Lock()
	for p, e := range o.pings {
		if len(e.rounds) == 1 && now.Sub(e.at) >= o.cfg.announce/2 && len(todo) < pingsPerRound {
			todo = append(todo, p)
		}
	}
	o.pingMu.Unlock()
	parallel(ctx, pingParallel, todo, func(p peer.ID) { o.pingOne(ctx, p) })
}

// newPingQueue bounds the peers waiting for their first ping
// (pingNewLoop); a peer that finds it full waits for the next RTT round.
const newPingQueue = 256

// queueNewPing queues p for a ping at once (pingNewLoop) when this node
// has no ping RTT of it: a crawler that announced itself for the first
// time enters this node's row within seconds, not at the next RTT round,
// up to an hour later. It does not block.
func (o *Overlay) queueNewPing(p peer.ID) {
	o.pingMu.Lock()
	_, ok := o.pings[p]
	full := len(o.pings) >= maxRowRTTs
	o.pingMu.Unlock()
	if ok || full {
		return
	}
	select {
	case o.newPings <- p:
	default:
	}
}

// pingNewLoop pings the peers queueNewPing queues, pingParallel at a
// time, each again pingConfirm after its first round, until Close.
func (o *Overlay) pingNewLoop() {
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, pingParallel)
	for {
		select {
		case <-o.ctx.Done():
			return
		case p := <-o.newPings:
			select {
			case slots <- struct{}{}:
			case <-o.ctx.Done():
				return
			}
			wg.Go(func() {
				defer func() { <-slots }()
				if o.pingOne(o.ctx, p) == 1 {
					// The second round, a minute on: a peer that
					// announces itself for the first time has often just
					// joined, its links busy with the state it receives.
					time.AfterFunc(pingConfirm, func() {
						select {
						case o.newPings <- p:
						default: // the next announcement round confirms it
						}
					})
				}
			})
		}
	}
}

// pingLeast pings p pingSamples times and returns the least RTT; false
// when no ping came back within pingTimeout.
func (o *Overlay) pingLeast(ctx context.Context, p peer.ID) (time.Duration, bool) {
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	res := ping.Ping(ctx, o.h, p)
	least, ok := time.Duration(0), false
	for range pingSamples {
		select {
		case r, open := <-res:
			if !open || r.Error != nil {
				return least, ok
			}
			if !ok || r.RTT < least {
				least, ok = r.RTT, true
			}
		case <-ctx.Done():
			return least, ok
		}
	}
	return least, ok
}

// ownRTT returns this node's measured RTT to p over RTTScale: the least
// of its pings; 0 for itself and when not pinged.
func (o *Overlay) ownRTT(p peer.ID) time.Duration {
	if p == o.h.ID() {
		return 0
	}
	o.pingMu.Lock()
	d := o.pings[p].least
	o.pingMu.Unlock()
	if f := o.cfg.rttScale; f > 0 && d > 0 {
		d = max(time.Duration(float64(d)/f), 1)
	}
	return d
}

// measuredRTTs lists this node's measured RTTs, at most limit of them, a
// fresh random sample each time when there are more: each receiver, and
// each round, then gets different pairs of the author's rather than the
// first by id.
func (o *Overlay) measuredRTTs(limit int) []*pb.PeerRTT {
	o.pingMu.Lock()
	ids := slices.Collect(maps.Keys(o.pings))
	o.pingMu.Unlock()
	var out []*pb.PeerRTT
	for _, p := range ids {
		if d := o.ownRTT(p); d > 0 {
			out = append(out, &pb.PeerRTT{Peer: []byte(p), RttMicros: max(d.Microseconds(), 1)})
		}
	}
	if len(out) > limit {
		rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		out = out[:limit]
	}
	return out
}
