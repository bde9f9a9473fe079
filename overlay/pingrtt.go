package overlay

import (
	"context"
	"math/rand/v2"
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
// bytes on an open connection), and nothing else: the peerstore's EWMA,
// which the DHT's requests feed with their whole duration (the first
// with the dial's handshakes, then the remote's handling and a busy
// machine's scheduling), reads long, and a long RTT between two nodes
// prunes the nearer of them wrongly where an unknown one only costs a
// probe. Before each RTT round up to pingsPerRound connected peers
// without a ping less than pingFresh old are pinged, pingParallel at a
// time.
const (
	pingSamples   = 3
	pingsPerRound = DefaultConnHigh
	pingParallel  = 16
	pingTimeout   = 5 * time.Second
	pingFresh     = 6 * time.Hour
	// maxAnnouncedRTTs bounds the RTTs an announcement carries: as many
	// as the connection manager keeps connections (DefaultConnHigh), so
	// that a node announces the whole row it measured and a coordinator's
	// map holds, of each neighbour, every pair it knows. The RTT table's
	// bound is then maxAnnouncedPeers × 96 entries, about 30 MB.
	maxAnnouncedRTTs = DefaultConnHigh
)

// pinged is this node's least ping RTT to a peer and when it was taken.
type pinged struct {
	least time.Duration
	at    time.Time
}

// pingPeers pings up to pingsPerRound connected peers without a fresh
// ping RTT, pingSamples times each, and keeps the least of each peer's.
// The table holds connected peers only: the others' entries are dropped.
func (o *Overlay) pingPeers(ctx context.Context) {
	connected := o.h.Network().Peers()
	var todo []peer.ID
	o.pingMu.Lock()
	keep := make(map[peer.ID]pinged, len(connected))
	for _, p := range connected {
		e, ok := o.pings[p]
		if ok {
			keep[p] = e
		}
		if (!ok || time.Since(e.at) > pingFresh) && len(todo) < pingsPerRound {
			todo = append(todo, p)
		}
	}
	o.pings = keep
	o.pingMu.Unlock()
	parallel(ctx, pingParallel, todo, func(p peer.ID) {
		if d, ok := o.pingLeast(ctx, p); ok {
			o.pingMu.Lock()
			o.pings[p] = pinged{least: d, at: time.Now()}
			o.pingMu.Unlock()
		}
	})
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

// measuredRTTs lists this node's measured RTTs to connected peers, at
// most maxAnnouncedRTTs of them, a fresh random sample each time when
// there are more (the connection manager lets connections pass its high
// mark until it trims): each receiver, and each round, then gets
// different pairs of the author's rather than the first by id.
func (o *Overlay) measuredRTTs() []*pb.PeerRTT {
	var out []*pb.PeerRTT
	for _, p := range o.h.Network().Peers() {
		if d := o.ownRTT(p); d > 0 {
			out = append(out, &pb.PeerRTT{Peer: []byte(p), RttMicros: max(d.Microseconds(), 1)})
		}
	}
	if len(out) > maxAnnouncedRTTs {
		rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		out = out[:maxAnnouncedRTTs]
	}
	return out
}
