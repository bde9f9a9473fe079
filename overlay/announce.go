package overlay

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/overlay/pb"
)

// Announcements. A node tells its state (declared capacity and load,
// subnet count, whether it crawls, the release file it holds, and every
// rttEvery-th time its measured RTTs) to its neighbours, not to the whole
// network: one ANNOUNCE request over AnnounceID to each peer of its DHT
// routing table and to the coordinator of each shard it heartbeats, which
// the receiver answers with its own state. A round therefore costs a node
// one exchange per routing-table peer, O(log N) of them, where flooding a
// global topic made every node receive every node's announcement.
//
// The answer makes the exchange symmetric: a peer that has this node in
// its routing table hears this node's state whether or not this node has
// it in its own, and a node learns the state of every peer in its routing
// table, which is where a coordinator's fallback candidates come from
// (env.Peers). A pair that exchanged less than half a round ago (either
// way) is skipped, so a pair of neighbours exchanges about once a round.
//
// The author of an ANNOUNCE is the stream's remote peer, authenticated by
// the connection's security handshake; nothing is relayed, so nothing
// else needs signing. Requests are bounded (maxAnnounceMsg) and budgeted
// per peer (announceRate), and the tables they feed are bounded
// (maxAnnouncedPeers).
const (
	// maxAnnouncedPeers bounds the table of peers learnt from
	// announcements (and the table of exchanges, told).
	maxAnnouncedPeers = 4096
	// announceSkew is how far an announcement's time may be from ours.
	announceSkew = 10 * time.Minute
	// maxAnnounceTargets bounds the peers told in one round: a routing
	// table holds some 20 × log2(N/20) peers, a few hundred at a million.
	maxAnnounceTargets = 512
	// minAnnounceTargets: a routing table with fewer peers than a
	// Kademlia bucket (k = 20; a small network, or peers the diversity
	// filter kept out) is topped up with other connected peers that speak
	// AnnounceID, nearest first, so that in a network of a few dozen
	// nodes every node hears nearly every other, as before.
	minAnnounceTargets = 20
	// announceParallel bounds the exchanges in flight in one round.
	announceParallel = 8
	// Per-peer budget of ANNOUNCE requests received: one a second
	// sustained, eight at once. An honest peer sends one a round (at
	// least a second; 15 min by default) and one more when the release
	// file it holds changes.
	announceRate, announceBurst = 1, 8
)

// announcement is a peer's announced state, checked.
type announcement struct {
	capacity, load uint64
	subnets        uint32
	noCrawl        bool // the peer does not crawl (NoCrawl: an indexer)
	at             time.Time
	rtts           map[peer.ID]int64 // its measured RTTs, µs; nil: none carried, the last ones stand
	wholeRow       bool              // rtts is the peer's whole row (an answer to want_rtts)
	release        []byte            // the snapshot id of a release file it holds, or nil
}

// checkAnnounce checks an announcement of snapshot sid received at now:
// this build's version, our snapshot, a time within announceSkew. Of its
// RTTs it keeps the well-formed ones, at most maxRowRTTs.
func checkAnnounce(sid []byte, a *pb.Announce, now time.Time) (announcement, error) {
	if a.GetVersion() != wireVersion {
		return announcement{}, fmt.Errorf("%w %d", ErrUnsupportedVersion, a.GetVersion())
	}
	if string(a.GetSnapshot()) != string(sid) {
		return announcement{}, ErrWrongSnapshot
	}
	at := time.UnixMilli(a.GetAtMs())
	if at.Before(now.Add(-announceSkew)) || at.After(now.Add(announceSkew)) {
		return announcement{}, fmt.Errorf("%w: announcement time %v", ErrMalformed, at)
	}
	if len(a.GetRelease()) > len(sid) {
		return announcement{}, fmt.Errorf("%w: release id of %d bytes", ErrMalformed, len(a.GetRelease()))
	}
	out := announcement{capacity: a.GetCapacity(), load: a.GetLoad(), subnets: a.GetSubnets(),
		noCrawl: a.GetIndexer() && a.GetCapacity() == 0, at: at, release: a.GetRelease()}
	for _, r := range a.GetRtts() {
		if len(out.rtts) == maxRowRTTs {
			break
		}
		if p, err := peer.IDFromBytes(r.GetPeer()); err == nil && r.GetRttMicros() > 0 {
			if out.rtts == nil {
				out.rtts = map[peer.ID]int64{}
			}
			out.rtts[p] = r.GetRttMicros()
		}
	}
	return out, nil
}

// noteAnnounce keeps what author announced: a peer that does not crawl
// is no candidate (noteNonCrawler); a crawler's state and RTTs go in the
// peer table (bounded: when full, only peers already in it are updated),
// and the release file it holds in the release state. A crawler new to
// the table is queued for a ping (queueNewPing).
func (o *Overlay) noteAnnounce(author peer.ID, a announcement) {
	if author == o.h.ID() {
		return
	}
	if a.noCrawl {
		o.noteNonCrawler(author)
		return
	}
	if len(a.release) > 0 {
		o.noteReleaseHolder(author, a.release)
	}
	o.mu.Lock()
	_, known := o.peers[author]
	if known || len(o.peers) < maxAnnouncedPeers {
		o.peers[author] = PeerInfo{ID: author, Capacity: a.capacity, Load: a.load, Subnets: a.subnets, LoadAt: a.at, Seen: time.Now()}
		if a.rtts != nil {
			o.keepRTTRow(author, a.rtts, a.wholeRow)
		}
	}
	o.mu.Unlock()
	if !known {
		o.queueNewPing(author)
	}
}

// firstAnnounce bounds the wait for a node's first announcement. A peer is
// a delegation candidate for a coordinator once it is in the coordinator's
// routing table or has announced itself to it; a node behind NAT is a DHT
// client, in no routing table, and must not wait for the regular round
// (7.5 to 15 minutes after the start, by default) to be asked to probe.
const firstAnnounce = 10 * time.Second

// rttEvery is how often a node sends a peer its measured RTTs: in its
// first two rounds (the first comes seconds after the start, when few are
// measured), then about every rttEvery-th exchange with that peer. They
// are nine tenths of an announcement's bytes (up to 96 peers of 45 bytes), and
// RTTs between nodes change slowly; peers keep the last ones they heard.
const rttEvery = 4

// told is what this node last exchanged with a peer: when (either way)
// and when it last sent the peer its RTTs.
type told struct{ at, rtts time.Time }

// announceLoop exchanges announcements once between firstAnnounce/2 and
// firstAnnounce after the start, when the routing table has filled, then
// in a round every cfg.announce (the first of them after a random half to
// whole interval, to spread the network's rounds), and at once when
// announceSoon asks, until Close.
func (o *Overlay) announceLoop() {
	t := time.NewTimer(firstAnnounce/2 + time.Duration(randFloat()*float64(firstAnnounce/2)))
	defer t.Stop()
	for round := 0; ; {
		force := false
		select {
		case <-o.ctx.Done():
			return
		case <-t.C:
			next := o.cfg.announce
			if round == 0 {
				next = time.Duration(float64(next) * (0.5 + randFloat()/2))
			}
			t.Reset(next)
			o.announceRounds.Store(int32(min(round+1, 1<<30)))
		case <-o.announceNow:
			force = true
		}
		o.announceRound(o.ctx, round, force)
		if !force {
			round++
		}
	}
}

// announceSoon has the node tell its neighbours its state now rather than
// at the next round (the release file it holds changed). It does not
// block; requests made while a round runs coalesce into one.
func (o *Overlay) announceSoon() {
	select {
	case o.announceNow <- struct{}{}:
	default:
	}
}

// announceRound exchanges announcements with every target but those this
// node exchanged with less than half an interval ago (all of them when
// force is set), then forgets peers silent for three intervals.
func (o *Overlay) announceRound(ctx context.Context, round int, force bool) {
	if !force && (round < 2 || round%rttEvery == 0) {
		o.pingPeers(ctx)
	}
	if !force {
		o.confirmPings(ctx)
	}
	targets := o.announceTargets()
	now := time.Now()
	var todo []peer.ID
	o.mu.Lock()
	for _, p := range targets {
		if force || now.Sub(o.told[p].at) >= o.cfg.announce/2 {
			todo = append(todo, p)
		}
	}
	o.mu.Unlock()
	if parallel(ctx, announceParallel, todo, func(p peer.ID) { o.exchangeAnnounce(ctx, p, false) }) {
		o.expireAnnounced()
	}
}

// announceTargets lists the peers a round tells: the coordinators of the
// shards this node heartbeats, the routing table's peers, and, when that
// makes fewer than minAnnounceTargets, other connected peers, nearest
// first; at most maxAnnounceTargets, each speaking AnnounceID as far as
// identify told.
func (o *Overlay) announceTargets() []peer.ID {
	self := o.h.ID()
	var coords []peer.ID
	o.mu.Lock()
	for _, ref := range o.mine {
		if c, ok := o.coordFor[ref.key(o.sid)]; ok {
			coords = append(coords, c)
		}
	}
	o.mu.Unlock()
	seen := map[peer.ID]bool{self: true}
	var out []peer.ID
	add := func(p peer.ID) {
		if seen[p] || len(out) >= maxAnnounceTargets {
			return
		}
		seen[p] = true
		if ok, err := o.h.Peerstore().SupportsProtocols(p, AnnounceID); err == nil && len(ok) > 0 {
			out = append(out, p)
		}
	}
	for _, p := range coords {
		add(p)
	}
	for _, p := range o.dht.RoutingTable().ListPeers() {
		add(p)
	}
	if len(out) < minAnnounceTargets {
		for _, p := range kb.SortClosestPeers(o.h.Network().Peers(), kb.ConvertPeerID(self)) {
			if len(out) >= minAnnounceTargets {
				break
			}
			add(p)
		}
	}
	return out
}

// exchangeAnnounce sends this node's announcement to p and keeps p's
// answer; with wantRow set it asks p for its whole row of RTTs.
func (o *Overlay) exchangeAnnounce(ctx context.Context, p peer.ID, wantRow bool) {
	req := newMsg(pb.Message_ANNOUNCE)
	req.Announce = o.ownAnnounce(p, false)
	req.Announce.WantRtts = wantRow
	o.stats.requests.Add(1)
	resp, err := o.request(ctx, p, announceSpec, req, pb.Message_ANNOUNCE)
	if err != nil {
		o.log.Debug("announcement failed", "peer", p, "error", err)
		return
	}
	a, err := checkAnnounce(o.sid[:], resp.GetAnnounce(), time.Now())
	if err != nil {
		o.log.Debug("announcement answer rejected", "peer", p, "error", err)
		return
	}
	a.wholeRow = wantRow
	o.noteAnnounce(p, a)
}

// handleAnnounce keeps a peer's announcement and answers with this node's
// own, with its whole row of RTTs when the peer asks (want_rtts). A peer
// beyond its budget (announceRate) is refused as overloaded.
func (o *Overlay) handleAnnounce(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
	if !o.announceLimit.allow(from, 1) {
		return nil, fmt.Errorf("%w: announcement rate limit of %d a second reached", ErrOverloaded, announceRate)
	}
	a, err := checkAnnounce(o.sid[:], req.GetAnnounce(), time.Now())
	if err != nil {
		return nil, err
	}
	o.noteAnnounce(from, a)
	m := newMsg(pb.Message_ANNOUNCE)
	m.Announce = o.ownAnnounce(from, req.GetAnnounce().GetWantRtts())
	return m, nil
}

// ownAnnounce builds this node's announcement to p, with a sample of its
// measured RTTs when they are due to p (rttEvery), or its whole row when
// wholeRow is set, and notes the exchange.
func (o *Overlay) ownAnnounce(p peer.ID, wholeRow bool) *pb.Announce {
	now := time.Now()
	capacity, load := o.cfg.load()
	o.mu.Lock()
	subnets := uint32(len(o.owned))
	t := o.told[p]
	withRTTs := wholeRow || o.announceRounds.Load() <= 2 || now.Sub(t.rtts) >= rttEvery*o.cfg.announce-o.cfg.announce/2
	if _, ok := o.told[p]; ok || len(o.told) < maxAnnouncedPeers {
		t.at = now
		if withRTTs {
			t.rtts = now
		}
		o.told[p] = t
	}
	o.mu.Unlock()
	var rtts []*pb.PeerRTT
	switch {
	case wholeRow:
		rtts = o.measuredRTTs(maxRowRTTs)
	case withRTTs:
		rtts = o.measuredRTTs(maxAnnouncedRTTs)
	}
	return &pb.Announce{Version: wireVersion, Snapshot: o.sid[:], Capacity: capacity, Load: load, Indexer: o.cfg.noCrawl,
		AtMs: now.UnixMilli(), Subnets: subnets, Rtts: rtts, Release: o.releaseAnnounce()}
}

// expireAnnounced forgets peers silent for three announcement intervals,
// with their RTTs and the RTTs others announced of them, exchanges as
// old, and RTTs announced longer ago than rttMaxAge.
func (o *Overlay) expireAnnounced() {
	o.mu.Lock()
	defer o.mu.Unlock()
	var gone []peer.ID
	for id, pi := range o.peers {
		if time.Since(pi.Seen) > 3*o.cfg.announce {
			delete(o.peers, id)
			o.dropRTTRow(id)
			gone = append(gone, id)
		}
	}
	for id, a := range o.rtts {
		if time.Since(a.at) > o.rttMaxAge() {
			o.dropRTTRow(id)
			continue
		}
		for _, g := range gone {
			if _, ok := a.us[g]; ok {
				delete(a.us, g)
				o.rttEntries--
			}
		}
	}
	for id, t := range o.told {
		if time.Since(t.at) > 3*o.cfg.announce {
			delete(o.told, id)
		}
	}
}

// Peers returns the peers that announced themselves to this node (its
// routing table's, the crawlers that heartbeat it as a coordinator, and
// the peers that have it in their routing tables; see announce.go), with
// their declared capacity, load and subnet count.
func (o *Overlay) Peers() []PeerInfo {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := slices.AppendSeq(make([]PeerInfo, 0, len(o.peers)), maps.Values(o.peers))
	slices.SortFunc(out, func(a, b PeerInfo) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return out
}

// announcedRTTs is what one peer last announced of its measured RTTs
// (µs, by peer; at most maxRowRTTs) and when this node received it;
// whole when it is the peer's whole row (rttrow.go).
type announcedRTTs struct {
	us    map[peer.ID]int64
	at    time.Time
	whole bool
}

// The checks of announced RTTs. A node announces whatever it likes, and an
// RTT it invents moves the guided search's triangle bounds: a short one
// keeps it a candidate everywhere, a long one prunes an honest rival. An
// announced RTT is used only when nothing this node measured or heard
// refutes it, as a probe claim is checked against the witnesses' own RTTs
// (subnet.ClaimCheck):
//   - it is fresh: a peer sends its RTTs every rttEvery-th exchange (or
//     its whole row when asked, rttrow.go), and the last ones stand for
//     rttMaxAge, twice that;
//   - the pair's other end has not gone as far as this node knows: a peer
//     silent for three intervals takes the RTTs others announced of it
//     along when it is forgotten (expireAnnounced), and the author's next
//     announcement lists only peers it still knows and pinged within two
//     pingFresh;
//   - the triangle inequality with this node's own measurements r1, r2 to
//     the two ends (ownRTT) allows it: the pair's RTT lies within
//     [|r1−r2|, r1+r2], widened by rttFactor and rttSlack because the
//     Internet's routes break the inequality by detours (most violations
//     are within a factor of two) and measurements are noisy;
//   - for Between, the other end's own announcement of the pair, when it
//     has one, agrees within rttFactor and rttSlack: RTTs are symmetric,
//     and of two ends that disagree either may lie, so neither is taken.
//     MeasuredBy never takes the other end's word (the claim check asks
//     what a witness measured of a claimant), so it skips this one.
//
// A refuted RTT is not used: the pair is unknown, and the search asks
// rather than prunes.
const (
	rttFactor = 2
	rttSlack  = 5 * time.Millisecond
)

// rttMaxAge is how long the RTTs a peer announced are used without its
// announcing them again.
func (o *Overlay) rttMaxAge() time.Duration { return 2 * rttEvery * o.cfg.announce }

// announcedRTT returns the RTT from a to b that a announced, when fresh
// and not refuted by this node's own measurements (nor, with symmetric
// set, by b's announcement of the pair). o.mu is held.
func (o *Overlay) announcedRTT(a, b peer.ID, symmetric bool) (time.Duration, bool) {
	ann, ok := o.rtts[a]
	us, ok2 := ann.us[b]
	if !ok || !ok2 || time.Since(ann.at) > o.rttMaxAge() {
		return 0, false
	}
	d := time.Duration(us) * time.Microsecond
	if r1, r2 := o.ownRTT(a), o.ownRTT(b); r1 > 0 && r2 > 0 {
		if d < ((r1-r2).Abs()-rttSlack)/rttFactor || d > rttFactor*(r1+r2)+rttSlack {
			return 0, false
		}
	}
	if symmetric {
		if other, ok := o.rtts[b]; ok && time.Since(other.at) <= o.rttMaxAge() {
			if us2, ok := other.us[a]; ok {
				lo, hi := min(us, us2), max(us, us2)
				if time.Duration(hi)*time.Microsecond > rttFactor*time.Duration(lo)*time.Microsecond+rttSlack {
					return 0, false
				}
			}
		}
	}
	return d, true
}

// Between returns the round-trip time between peers a and b as the overlay
// measured it: this node's own RTT to a peer is the least of its pings
// (ownRTT, pingrtt.go); other pairs come from the RTTs peers announced to
// this node (its neighbours, see announce.go), their own RTTs (either
// direction), as far as the checks above leave them. ok is false when
// nobody measured the pair, or what was announced of it is refuted. The
// guided search bounds candidates with it (triangle inequality). On
// loopback, where libp2p's traffic does not see an emulated Internet's
// latencies, tests substitute the world's model (delegate.Between); the
// demo and bench overlay carry the traffic over links with the world's
// latencies and use this.
func (o *Overlay) Between(a, b peer.ID) (time.Duration, bool) {
	if a == b {
		return 0, true
	}
	self := o.h.ID()
	if a == self || b == self {
		other := a
		if a == self {
			other = b
		}
		if d := o.ownRTT(other); d > 0 {
			return d, true
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if d, ok := o.announcedRTT(a, b, true); ok {
		return d, true
	}
	return o.announcedRTT(b, a, true)
}

// MeasuredBy returns the round-trip time from peer by to peer of as by
// measured it: this node's own RTT (ownRTT) when by is this node, else the
// RTT by announced to this node (announce.go), when the checks above
// leave it. Unlike Between it never takes of's word: a node can lengthen
// the RTTs others measure to it, by delaying its answers, but not shorten
// them, while what it announces is anything it likes.
func (o *Overlay) MeasuredBy(by, of peer.ID) (time.Duration, bool) {
	if by == of {
		return 0, true
	}
	if by == o.h.ID() {
		if d := o.ownRTT(of); d > 0 {
			return d, true
		}
		return 0, false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.announcedRTT(by, of, false)
}
