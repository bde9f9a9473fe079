package overlay

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/host/eventbus"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/overlay/pb"
)

// announceCount is the ANNOUNCE requests nodes sent so far.
func announceCount(nodes []*node) int64 {
	var n int64
	for _, nd := range nodes {
		n += nd.o.Stats().Kinds["micra/"+pb.Message_ANNOUNCE.String()]
	}
	return n
}

// TestAnnounceExchange: announcements go to neighbours and come back in
// the answer, so that every node knows every other's state and RTTs in a
// small network; a pair of neighbours exchanges about once a round, not
// once per node and round.
func TestAnnounceExchange(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		const n, every = 6, 10 * time.Second
		nodes := r.swarm(n, Announce(every))
		eventually(t, 20*time.Second, func() error {
			for _, nd := range nodes {
				if got := len(nd.o.Peers()); got != n-1 {
					return fmt.Errorf("%s heard %d announcements, want %d", nd.addr, got, n-1)
				}
			}
			return nil
		})
		// Others' RTTs came with the announcements (the first rounds carry
		// them).
		eventually(t, 20*time.Second, func() error {
			o := nodes[0].o
			for _, a := range nodes[1:] {
				for _, b := range nodes[1:] {
					if _, ok := o.Between(a.h.ID(), b.h.ID()); a != b && ok {
						return nil
					}
				}
			}
			return errors.New("no announced RTT between two other peers")
		})
		// Rounds: each pair of the n nodes exchanges once a round (either
		// way), not twice.
		const rounds = 12
		time.Sleep(2 * every) // past the first, unsynchronised rounds
		c0 := announceCount(nodes)
		time.Sleep(rounds * every)
		pairs := int64(n * (n - 1) / 2)
		if got := announceCount(nodes) - c0; got > pairs*(rounds+2) || got < pairs*(rounds-2) {
			t.Errorf("%d exchanges in %d rounds of %d pairs, want about %d", got, rounds, pairs, pairs*rounds)
		}
	})
}

// TestAnnounceTargets: a round tells the routing table's peers and the
// coordinators the node heartbeats; other connected peers only while the
// routing table holds fewer than a bucket.
func TestAnnounceTargets(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		nodes := r.swarm(8)
		o := nodes[1].o
		eventually(t, 20*time.Second, func() error {
			ts := o.announceTargets()
			for _, p := range o.dht.RoutingTable().ListPeers() {
				if !slices.Contains(ts, p) {
					return fmt.Errorf("routing-table peer %s not told", p)
				}
			}
			if len(ts) != 7 {
				return fmt.Errorf("%d targets, want the 7 other nodes of a small network", len(ts))
			}
			return nil
		})
		// A coordinator this node heartbeats is told, whatever its
		// routing table.
		o.mu.Lock()
		var coords []peer.ID
		for _, ref := range o.mine {
			coords = append(coords, o.coordFor[ref.key(o.sid)])
		}
		o.mu.Unlock()
		ts := o.announceTargets()
		for _, c := range coords {
			if c != o.h.ID() && !slices.Contains(ts, c) {
				t.Errorf("coordinator %s not told", c)
			}
		}
		if slices.Contains(ts, o.h.ID()) {
			t.Error("a node tells itself")
		}
	})
}

// TestAnnounceFromDHTClient: a node behind NAT (a DHT client, in no
// routing table) is known to the servers in its own routing table, which
// it announces itself to, as a crawler with its declared state.
func TestAnnounceFromDHTClient(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		// The servers' next round is an hour away: what they hear of the
		// client after their first comes from the client's own rounds.
		nodes := []*node{r.node(0, Announce(time.Hour)), r.node(1, Announce(time.Hour)), r.node(2, Announce(time.Hour)),
			r.node(3, Announce(5*time.Second))}
		joinSwarm(t, nodes)
		client := nodes[3]
		time.Sleep(firstAnnounce)
		em, err := client.h.EventBus().Emitter(new(event.EvtLocalReachabilityChanged), eventbus.Stateful)
		if err != nil {
			t.Fatal(err)
		}
		defer em.Close()
		if err := em.Emit(event.EvtLocalReachabilityChanged{Reachability: network.ReachabilityPrivate}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, func() error {
			for _, nd := range nodes[:3] {
				if nd.o.dht.RoutingTable().Find(client.h.ID()) != "" {
					return fmt.Errorf("%s still has the client in its routing table", nd.addr)
				}
			}
			return nil
		})
		// Forget what the servers heard, then wait for the next round.
		for _, nd := range nodes[:3] {
			nd.o.mu.Lock()
			delete(nd.o.peers, client.h.ID())
			nd.o.mu.Unlock()
		}
		eventually(t, 30*time.Second, func() error {
			for _, nd := range nodes[:3] {
				if !slices.ContainsFunc(nd.o.Peers(), func(p PeerInfo) bool { return p.ID == client.h.ID() }) {
					return fmt.Errorf("%s has not heard the client", nd.addr)
				}
			}
			return nil
		})
	})
}

// TestAnnounceReleaseHolder: a node that has stored a release's file tells
// its neighbours at once, not at its next round.
func TestAnnounceReleaseHolder(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		pub, priv := releaseKeys(t)
		slow := []Option{Announce(time.Hour), ReleaseTiming(time.Hour, time.Hour)}
		publisher := r.node(0, append(slow, ReleaseKeys(t.TempDir(), pub))...)
		fetcher := r.node(1, Announce(time.Hour), ReleaseKeys(t.TempDir(), pub), ReleaseTiming(0, time.Hour))
		watcher := r.node(2, append(slow, ReleaseKeys(t.TempDir(), pub))...)
		joinSwarm(t, []*node{publisher, fetcher, watcher})
		time.Sleep(firstAnnounce) // the first round is over: the next is half an hour away at least
		file := nextSnapshot(t)
		rel, raw := signedRelease(t, priv, file)
		if err := publisher.o.PublishRelease(t.Context(), raw, file); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, func() error {
			if st, ok := fetcher.o.NextRelease(); !ok || !st.Ready || st.Release.Snapshot != rel.Snapshot {
				return errors.New("the fetcher has not stored the file")
			}
			return nil
		})
		eventually(t, 10*time.Second, func() error {
			s := watcher.o.rel
			s.mu.Lock()
			defer s.mu.Unlock()
			if _, ok := s.holders[fetcher.h.ID()]; !ok {
				return errors.New("the watcher does not know the fetcher holds the file")
			}
			return nil
		})
	})
}

// TestAnnounceRefusals: a peer's announcements are checked and budgeted;
// the answer is this node's own; a full announcement fits in a frame.
func TestAnnounceRefusals(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		nodes := r.swarm(2, Announce(time.Hour))
		o, from := nodes[0].o, nodes[1].h.ID()
		msg := func(a *pb.Announce) *pb.Message {
			m := newMsg(pb.Message_ANNOUNCE)
			m.Announce = a
			return m
		}
		good := func() *pb.Announce {
			return &pb.Announce{Version: wireVersion, Snapshot: o.sid[:], Capacity: 7, Load: 3, Subnets: 2, AtMs: time.Now().UnixMilli()}
		}
		time.Sleep(time.Minute) // the budget is full again
		resp, err := o.handleAnnounce(t.Context(), from, msg(good()))
		if err != nil || resp.GetType() != pb.Message_ANNOUNCE || string(resp.GetAnnounce().GetSnapshot()) != string(o.sid[:]) {
			t.Fatalf("answer %v, %v", resp, err)
		}
		if i := slices.IndexFunc(o.Peers(), func(p PeerInfo) bool { return p.ID == from }); i < 0 || o.Peers()[i].Capacity != 7 {
			t.Fatalf("peer table after an announcement: %+v", o.Peers())
		}
		bad := map[string]func(a *pb.Announce){
			"version":  func(a *pb.Announce) { a.Version = 2 },
			"snapshot": func(a *pb.Announce) { a.Snapshot = make([]byte, 32) },
			"old":      func(a *pb.Announce) { a.AtMs = time.Now().Add(-time.Hour).UnixMilli() },
			"future":   func(a *pb.Announce) { a.AtMs = time.Now().Add(time.Hour).UnixMilli() },
			"release":  func(a *pb.Announce) { a.Release = make([]byte, 33) },
		}
		for name, f := range bad {
			a := good()
			f(a)
			if _, err := o.handleAnnounce(t.Context(), from, msg(a)); err == nil {
				t.Errorf("%s: accepted", name)
			}
		}
		// The budget: a burst, then one a second.
		time.Sleep(time.Minute)
		refused := 0
		for range announceBurst + 4 {
			if _, err := o.handleAnnounce(t.Context(), from, msg(good())); errors.Is(err, ErrOverloaded) {
				refused++
			}
		}
		if refused != 4 {
			t.Errorf("%d of %d announcements at once refused, want 4", refused, announceBurst+4)
		}
		// A full announcement (a whole row, maxRowRTTs RTTs to peers
		// with the longest usual ids, and a release) fits in a frame.
		a := good()
		a.Release = o.sid[:]
		a.Capacity, a.Load = 1<<62, 1<<62
		for range maxRowRTTs {
			a.Rtts = append(a.Rtts, &pb.PeerRTT{Peer: make([]byte, 70), RttMicros: 1 << 40})
		}
		if size := proto.Size(msg(a)) + 3; size > maxAnnounceMsg {
			t.Errorf("a full ANNOUNCE frame is %d bytes, over %d", size, maxAnnounceMsg)
		}
	})
}

// FuzzAnnounceFrame: an ANNOUNCE frame as a stream reads it (the envelope,
// then the announcement's checks) never yields an announcement outside
// its bounds.
func FuzzAnnounceFrame(f *testing.F) {
	now := time.UnixMilli(1_700_000_000_000)
	sid := make([]byte, 32)
	m := newMsg(pb.Message_ANNOUNCE)
	m.Announce = &pb.Announce{Version: 1, Snapshot: sid, AtMs: now.UnixMilli(), Capacity: 5, Rtts: []*pb.PeerRTT{{Peer: []byte("x"), RttMicros: 3}}}
	good, _ := proto.Marshal(m)
	f.Add(good)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m pb.Message
		if len(b) > maxAnnounceMsg || decodeMessage(b, &m) != nil || m.GetType() != pb.Message_ANNOUNCE {
			return
		}
		a, err := checkAnnounce(sid, m.GetAnnounce(), now)
		if err != nil {
			return
		}
		if len(a.rtts) > maxRowRTTs || a.at.Sub(now).Abs() > announceSkew || len(a.release) > len(sid) {
			t.Fatalf("accepted an announcement out of bounds: %+v", a)
		}
		for _, us := range a.rtts {
			if us <= 0 {
				t.Fatalf("accepted an RTT of %d µs", us)
			}
		}
	})
}

// announceRTTs has author announce its RTTs (ms, by peer) to o, through
// the checks of a received announcement; nil announces none.
func announceRTTs(t *testing.T, o *Overlay, author peer.ID, ms map[peer.ID]int) {
	t.Helper()
	a := &pb.Announce{Version: wireVersion, Snapshot: o.sid[:], Capacity: 1, AtMs: time.Now().UnixMilli()}
	for p, d := range ms {
		a.Rtts = append(a.Rtts, &pb.PeerRTT{Peer: []byte(p), RttMicros: int64(d) * 1000})
	}
	got, err := checkAnnounce(o.sid[:], a, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	o.noteAnnounce(author, got)
}

// between and measuredBy read o's RTT map as the guided search and the
// claim check do, in ms, -1 when unknown.
func between(o *Overlay, a, b peer.ID) int {
	d, ok := o.Between(a, b)
	if !ok {
		return -1
	}
	return int(d / time.Millisecond)
}

func measuredBy(o *Overlay, by, of peer.ID) int {
	d, ok := o.MeasuredBy(by, of)
	if !ok {
		return -1
	}
	return int(d / time.Millisecond)
}

// TestAnnouncedRTTsBounded: the RTT map holds at most maxRowRTTs of each
// peer, the RTTs of at most maxAnnouncedPeers peers and maxRTTEntries RTTs
// in all, the newest rows kept, however many announce and however much
// each announces.
func TestAnnouncedRTTsBounded(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		o := r.swarm(1, Announce(time.Hour))[0].o
		others := randomPeers(t, 2*maxRowRTTs, 1)
		ms := map[peer.ID]int{}
		for _, p := range others {
			ms[p] = 20
		}
		authors := randomPeers(t, maxAnnouncedPeers+50, 2)
		for _, author := range authors {
			time.Sleep(time.Millisecond) // rows apart in time: the oldest go first
			announceRTTs(t, o, author, ms)
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		if len(o.peers) != maxAnnouncedPeers {
			t.Errorf("%d peers, want %d", len(o.peers), maxAnnouncedPeers)
		}
		sum := 0
		for p, a := range o.rtts {
			sum += len(a.us)
			if len(a.us) > maxRowRTTs {
				t.Fatalf("%d RTTs kept of %s, over %d", len(a.us), p, maxRowRTTs)
			}
		}
		if sum != o.rttEntries || sum > maxRTTEntries {
			t.Errorf("%d RTTs held, counted %d, bound %d", sum, o.rttEntries, maxRTTEntries)
		}
		// The peer table filled with the first maxAnnouncedPeers authors;
		// of those, the rows of the newest fill the entries left.
		rows := maxRTTEntries / maxRowRTTs
		for i, author := range authors[:maxAnnouncedPeers] {
			_, kept := o.rtts[author]
			if want := i >= maxAnnouncedPeers-rows; kept != want {
				t.Fatalf("the row of author %d of %d kept: %v, want %v", i, maxAnnouncedPeers, kept, want)
			}
		}
	})
}

// TestAnnouncedRTTsStale: an announced RTT stops being used, and leaves
// the map, when its author has not announced RTTs for rttMaxAge though it
// still announces its state; an RTT to a peer gone (silent for three
// rounds) leaves the map with the peer.
func TestAnnouncedRTTsStale(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		const every = time.Hour
		o := r.swarm(1, Announce(every))[0].o
		ps := randomPeers(t, 3, 3)
		a, b, c := ps[0], ps[1], ps[2]
		t0 := time.Now()
		announceRTTs(t, o, a, map[peer.ID]int{b: 30, c: 40})
		announceRTTs(t, o, b, nil)
		announceRTTs(t, o, c, nil)
		if got := [...]int{between(o, a, b), between(o, b, a), between(o, a, c), measuredBy(o, a, b)}; got != [...]int{30, 30, 40, 30} {
			t.Fatalf("fresh RTTs a–b, b–a, a–c, a's of b: %v ms, want 30, 30, 40, 30", got)
		}
		// c falls silent; a and b go on announcing their state (no RTTs)
		// every round.
		for range 4 {
			time.Sleep(every)
			announceRTTs(t, o, a, nil)
			announceRTTs(t, o, b, nil)
		}
		o.expireAnnounced()
		if got := [...]int{between(o, a, b), between(o, a, c), measuredBy(o, a, c)}; got != [...]int{30, -1, -1} {
			t.Errorf("c gone: a–b, a–c, a's of c %v ms, want 30, -1, -1", got)
		}
		// a's RTTs stand until rttMaxAge, then age out though a still
		// announces its state.
		for time.Since(t0) <= o.rttMaxAge()-every {
			time.Sleep(every)
			announceRTTs(t, o, a, nil)
			announceRTTs(t, o, b, nil)
			if got := between(o, a, b); got != 30 {
				t.Fatalf("a–b announced %v ago: %d ms, want 30", time.Since(t0), got)
			}
		}
		time.Sleep(every + time.Second)
		announceRTTs(t, o, a, nil)
		announceRTTs(t, o, b, nil)
		if got := between(o, a, b); got != -1 {
			t.Errorf("a–b announced %v ago: %d ms, want unknown", time.Since(t0), got)
		}
		o.expireAnnounced()
		o.mu.Lock()
		_, kept := o.rtts[a]
		o.mu.Unlock()
		if kept {
			t.Error("a's stale RTTs are still in the map")
		}
		announceRTTs(t, o, a, map[peer.ID]int{b: 35})
		if got := between(o, a, b); got != 35 {
			t.Errorf("a–b announced again: %d ms, want 35", got)
		}
	})
}

// TestAnnouncedRTTsChecked: an announced RTT that the triangle inequality
// with this node's own measurements to both ends refutes is not used, nor,
// by Between, one that the other end's announcement of the pair
// contradicts; MeasuredBy never takes the other end's word.
func TestAnnouncedRTTsChecked(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		o := r.swarm(1, Announce(time.Hour))[0].o
		ps := randomPeers(t, 3, 4)
		a, b, c := ps[0], ps[1], ps[2]
		o.pingMu.Lock()
		o.pings[a] = pinged{least: 10 * time.Millisecond, at: time.Now()}
		o.pings[b] = pinged{least: 100 * time.Millisecond, at: time.Now()}
		o.pingMu.Unlock()
		announceRTTs(t, o, b, nil)
		// Measured here: a at 10 ms, b at 100 ms, so a–b lies in [90, 110]
		// ms, widened by rttFactor and rttSlack to [42.5, 225].
		for claim, want := range map[int]int{20: -1, 42: -1, 45: 45, 80: 80, 220: 220, 230: -1, 400: -1} {
			announceRTTs(t, o, a, map[peer.ID]int{b: claim})
			if got := [...]int{between(o, a, b), measuredBy(o, a, b)}; got != [...]int{want, want} {
				t.Errorf("a claims a–b %d ms: Between, MeasuredBy %v, want %d", claim, got, want)
			}
		}
		// c is not measured here: the ends' announcements are checked
		// against each other.
		announceRTTs(t, o, a, map[peer.ID]int{c: 50})
		announceRTTs(t, o, c, map[peer.ID]int{a: 200})
		if got := [...]int{between(o, a, c), between(o, c, a), measuredBy(o, a, c), measuredBy(o, c, a)}; got != [...]int{-1, -1, 50, 200} {
			t.Errorf("a says a–c 50 ms, c says 200: Between both ways, a's of c, c's of a %v, want -1, -1, 50, 200", got)
		}
		announceRTTs(t, o, c, map[peer.ID]int{a: 60})
		if got := [...]int{between(o, a, c), between(o, c, a)}; got != [...]int{50, 60} {
			t.Errorf("a says a–c 50 ms, c says 60: Between a–c, c–a %v, want 50, 60 (the first end's word)", got)
		}
	})
}
