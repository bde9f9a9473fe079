package overlay

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/overlay/pb"
)

// maxAnnouncedPeers bounds the table of peers learnt from announcements.
const maxAnnouncedPeers = 4096

// announceSkew is how far an announcement's time may be from ours.
const announceSkew = 10 * time.Minute

// decodeAnnounce decodes and checks an announcement payload.
func decodeAnnounce(sid []byte, data []byte, now time.Time) (*pb.Announce, error) {
	if len(data) > maxAnnounceMsg {
		return nil, fmt.Errorf("%w: announcement of %d bytes", ErrTooLarge, len(data))
	}
	var a pb.Announce
	if err := proto.Unmarshal(data, &a); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if a.GetVersion() != wireVersion {
		return nil, fmt.Errorf("%w %d", ErrUnsupportedVersion, a.GetVersion())
	}
	if string(a.GetSnapshot()) != string(sid) {
		return nil, ErrWrongSnapshot
	}
	at := time.UnixMilli(a.GetAtMs())
	if at.Before(now.Add(-announceSkew)) || at.After(now.Add(announceSkew)) {
		return nil, fmt.Errorf("%w: announcement time %v", ErrMalformed, at)
	}
	return &a, nil
}

// validateAnnounce accepts announcements that decode, are for our snapshot,
// are recent, and come from their author (pubsub's strict signing makes the
// author authentic).
func (o *Overlay) validateAnnounce(ctx context.Context, from peer.ID, m *pubsub.Message) pubsub.ValidationResult {
	if _, err := decodeAnnounce(o.sid[:], m.GetData(), time.Now()); err != nil {
		o.log.Debug("announcement rejected", "peer", from, "error", err)
		return pubsub.ValidationReject
	}
	return pubsub.ValidationAccept
}

func (o *Overlay) readAnnouncements(sub *pubsub.Subscription) {
	defer sub.Cancel()
	for {
		m, err := sub.Next(o.ctx)
		if err != nil {
			return
		}
		a, err := decodeAnnounce(o.sid[:], m.GetData(), time.Now())
		author := m.GetFrom()
		if err != nil || author == o.h.ID() {
			continue
		}
		if a.GetIndexer() && a.GetCapacity() == 0 {
			// A peer that does not crawl (NoCrawl; the wire field is
			// named for the indexers that set it): never a delegation
			// candidate.
			o.noteNonCrawler(author)
			continue
		}
		var rtts map[peer.ID]int64 // nil: the announcement carries none, the last ones stand
		for _, r := range a.GetRtts() {
			if p, err := peer.IDFromBytes(r.GetPeer()); err == nil && r.GetRttMicros() > 0 {
				if rtts == nil {
					rtts = map[peer.ID]int64{}
				}
				rtts[p] = r.GetRttMicros()
			}
		}
		if len(a.GetRelease()) > 0 {
			o.noteReleaseHolder(author, a.GetRelease())
		}
		now := time.Now()
		o.mu.Lock()
		if _, ok := o.peers[author]; ok || len(o.peers) < maxAnnouncedPeers {
			o.peers[author] = PeerInfo{ID: author, Capacity: a.GetCapacity(), Load: a.GetLoad(), Subnets: a.GetSubnets(),
				LoadAt: time.UnixMilli(a.GetAtMs()), Seen: now}
			if rtts != nil {
				o.rtts[author] = rtts
			}
		}
		o.mu.Unlock()
	}
}

// firstAnnounce bounds the wait for a node's first announcement. A peer is
// a delegation candidate for a coordinator once it is in the coordinator's
// routing table or has announced itself; a node behind NAT is a DHT client,
// in no routing table, and must not wait for the regular round (7.5 to 15
// minutes after the start, by default) to be asked to probe.
const firstAnnounce = 10 * time.Second

// announceLoop announces the node once between firstAnnounce/2 and
// firstAnnounce after the start, when its pubsub mesh has formed, then
// every cfg.announce until Close.
func (o *Overlay) announceLoop() {
	t := time.NewTimer(firstAnnounce/2 + time.Duration(randFloat()*float64(firstAnnounce/2)))
	select {
	case <-o.ctx.Done():
		t.Stop()
		return
	case <-t.C:
	}
	round := 0
	announce := func(ctx context.Context) {
		o.publishAnnounce(ctx, round < 2 || round%rttEvery == 0)
		round++
	}
	announce(o.ctx)
	o.every(o.cfg.announce, announce)
}

// rttEvery is how often an announcement carries the node's measured RTTs:
// the first two (the first goes out seconds after the start, when few are
// measured) and every rttEvery-th. They are nine tenths of its bytes
// (48 peers of 45 bytes), every node receives every announcement about as
// many times as its mesh has peers, and RTTs between nodes change slowly;
// peers keep the last ones they heard.
const rttEvery = 4

func (o *Overlay) publishAnnounce(ctx context.Context, withRTTs bool) {
	var rtts []*pb.PeerRTT
	if withRTTs {
		o.pingUnmeasured(ctx)
		rtts = o.measuredRTTs()
	}
	capacity, load := o.cfg.load()
	o.mu.Lock()
	subnets := uint32(len(o.owned))
	o.mu.Unlock()
	a := &pb.Announce{Version: wireVersion, Snapshot: o.sid[:], Capacity: capacity, Load: load, Indexer: o.cfg.noCrawl,
		AtMs: time.Now().UnixMilli(), Subnets: subnets, Rtts: rtts, Release: o.releaseAnnounce()}
	b, err := proto.Marshal(a)
	if err != nil {
		return
	}
	if err := o.announce.Publish(ctx, b); err != nil {
		o.log.Debug("announcement failed", "error", err)
	}
	// Forget peers silent for three announcement rounds.
	o.mu.Lock()
	for id, pi := range o.peers {
		if time.Since(pi.Seen) > 3*o.cfg.announce {
			delete(o.peers, id)
			delete(o.rtts, id)
		}
	}
	o.mu.Unlock()
}

// Inter-node RTTs: every node announces its peerstore's latency EWMA to up
// to maxAnnouncedRTTs connected peers; the DHT's requests feed the EWMA,
// and before each announcement up to pingsPerRound connected peers without
// a measurement are pinged (libp2p's ping protocol, one round trip each).
const (
	maxAnnouncedRTTs = 48
	pingsPerRound    = 8
	pingTimeout      = 5 * time.Second
)

// measuredRTTs lists this node's measured RTTs to connected peers, by peer
// id, at most maxAnnouncedRTTs.
func (o *Overlay) measuredRTTs() []*pb.PeerRTT {
	ps := o.h.Network().Peers()
	slices.Sort(ps)
	var out []*pb.PeerRTT
	for _, p := range ps {
		if d := o.h.Peerstore().LatencyEWMA(p); d > 0 {
			out = append(out, &pb.PeerRTT{Peer: []byte(p), RttMicros: max(d.Microseconds(), 1)})
			if len(out) == maxAnnouncedRTTs {
				break
			}
		}
	}
	return out
}

// pingUnmeasured pings a few connected peers whose RTT is not yet known;
// ping records each result in the peerstore.
func (o *Overlay) pingUnmeasured(ctx context.Context) {
	var todo []peer.ID
	for _, p := range o.h.Network().Peers() {
		if o.h.Peerstore().LatencyEWMA(p) == 0 {
			todo = append(todo, p)
			if len(todo) == pingsPerRound {
				break
			}
		}
	}
	var wg sync.WaitGroup
	for _, p := range todo {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, pingTimeout)
			defer cancel()
			select {
			case <-ping.Ping(pctx, o.h, p):
			case <-pctx.Done():
			}
		})
	}
	wg.Wait()
}
