package overlay

import (
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/internal/p2ptest"
)

// TestOwnRTTLeastOfPings: a node's own RTT to a peer is the least of its
// pings over RTTScale, whatever the peerstore's EWMA holds (the DHT's
// requests' whole durations), and it announces that value.
func TestOwnRTTLeastOfPings(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		const oneWay = 30 * time.Millisecond
		net := p2ptest.NewNetWith(t, func(from, to netip.Addr) time.Duration { return oneWay })
		r := &rig{t: t, net: net}
		nodes := r.swarm(2, RTTScale(0.5))
		o, b := nodes[0].o, nodes[1].h.ID()
		// A slow DHT request in the EWMA: the pings' least must not see it.
		for range 20 {
			o.h.Peerstore().RecordLatency(b, 2*time.Second)
		}
		o.pingPeers(t.Context())
		want := 2 * oneWay * 2 // the RTT over the scale 0.5
		got := o.ownRTT(b)
		if got < want || got > want+want/10 {
			t.Fatalf("own RTT to the peer: %v, want the least ping over the scale, %v (+10 %%)", got, want)
		}
		if d, ok := o.Between(o.h.ID(), b); !ok || d != got {
			t.Errorf("Between self and the peer: %v %v, want %v", d, ok, got)
		}
		announced := map[peer.ID]int64{}
		for _, pr := range o.measuredRTTs(maxAnnouncedRTTs) {
			announced[peer.ID(pr.Peer)] = pr.RttMicros
		}
		if announced[b] != got.Microseconds() {
			t.Errorf("announced RTT to the peer: %d µs, want %d", announced[b], got.Microseconds())
		}
	})
}

// TestPingsUnconnectedPeers: a node pings the crawlers it knows though it
// holds no connection to them: one that announces itself for the first
// time at once, one already in its table at the next RTT round; and its
// row (what it answers want_rtts with) carries them.
func TestPingsUnconnectedPeers(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		const oneWay = 20 * time.Millisecond
		net := p2ptest.NewNetWith(t, func(from, to netip.Addr) time.Duration { return oneWay })
		r := &rig{t: t, net: net}
		nodes := r.swarm(4, Announce(time.Hour))
		a, c, d := nodes[0].o, nodes[2].h.ID(), nodes[3].h.ID()
		// Past the first RTT round (firstAnnounce), which pings every
		// peer; the next is half an hour away. a forgets its pings and
		// the peers' announcements.
		time.Sleep(firstAnnounce)
		a.pingMu.Lock()
		clear(a.pings)
		a.pingMu.Unlock()
		a.mu.Lock()
		clear(a.peers)
		a.mu.Unlock()
		for _, p := range []peer.ID{c, d} {
			if err := a.h.Network().ClosePeer(p); err != nil {
				t.Fatal(err)
			}
			if slices.Contains(a.h.Network().Peers(), p) {
				t.Fatal("still connected to the peer")
			}
		}
		want := 2 * oneWay
		// c announces itself: pinged at once, without a round.
		a.noteAnnounce(c, announcement{capacity: 1, at: time.Now()})
		eventually(t, 10*time.Second, func() error {
			if got := a.ownRTT(c); got < want || got > want+want/10 {
				return fmt.Errorf("own RTT to an unconnected peer that announced itself: %v, want %v (+10 %%)", got, want)
			}
			return nil
		})
		// d is in the table already: the round pings it.
		a.mu.Lock()
		a.peers[d] = PeerInfo{ID: d, Capacity: 1, Seen: time.Now()}
		a.mu.Unlock()
		a.pingPeers(t.Context())
		if got := a.ownRTT(d); got < want || got > want+want/10 {
			t.Fatalf("own RTT to an unconnected known peer after a round: %v, want %v (+10 %%)", got, want)
		}
		row := map[peer.ID]bool{}
		for _, pr := range a.measuredRTTs(maxRowRTTs) {
			row[peer.ID(pr.Peer)] = true
		}
		if !row[c] || !row[d] {
			t.Errorf("the row carries c %v, d %v; want both", row[c], row[d])
		}
	})
}

// TestPingsLeastOverRounds: a peer pinged once, while its link was slow
// (a joining node's state transfer queues pings), is pinged again at the
// next announcement round, and its own RTT is the least over its last
// pingRounds rounds: a slow later round does not raise it, and an RTT that
// grew for good shows once the earlier rounds aged out.
func TestPingsLeastOverRounds(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		const every = time.Hour
		oneWay, r := varyingLinks(t, 50*time.Millisecond)
		nodes := r.swarm(2, Announce(every))
		a, b := nodes[0].o, nodes[1].h.ID()
		within := func(want time.Duration) error {
			if got := a.ownRTT(b); got < want || got > want+want/10 {
				return fmt.Errorf("own RTT %v, want %v (+10 %%)", got, want)
			}
			return nil
		}
		// The first round (firstAnnounce) pings the peer on the slow link.
		eventually(t, time.Minute, func() error { return within(100 * time.Millisecond) })
		// The link is quick now: the next round confirms the first ping.
		oneWay.Store(int64(20 * time.Millisecond))
		time.Sleep(every + time.Minute)
		if err := within(40 * time.Millisecond); err != nil {
			t.Fatalf("after the next announcement round: %v", err)
		}
		// A confirmed peer is not pinged again until pingFresh.
		a.confirmPings(t.Context())
		a.pingMu.Lock()
		rounds := len(a.pings[b].rounds)
		a.pingMu.Unlock()
		if rounds != 2 {
			t.Fatalf("%d rounds kept after another confirmation pass, want 2", rounds)
		}
		// Slower rounds from now: the least holds until the quick one is
		// among the last pingRounds no more.
		oneWay.Store(int64(30 * time.Millisecond))
		for i := range pingRounds {
			a.pingOne(t.Context(), b)
			want := 40 * time.Millisecond
			if i == pingRounds-1 {
				want = 60 * time.Millisecond
			}
			if err := within(want); err != nil {
				t.Fatalf("after %d slower rounds: %v", i+1, err)
			}
		}
	})
}

// TestNewAnnouncerPingedAgain: a crawler pinged at once when it first
// announces itself, while its link is slow (it has just joined), is pinged
// again pingConfirm later, well before the next announcement round.
func TestNewAnnouncerPingedAgain(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		oneWay, r := varyingLinks(t, 20*time.Millisecond)
		nodes := r.swarm(2, Announce(time.Hour))
		a, b := nodes[0].o, nodes[1].h.ID()
		time.Sleep(firstAnnounce)
		a.pingMu.Lock()
		clear(a.pings)
		a.pingMu.Unlock()
		oneWay.Store(int64(80 * time.Millisecond))
		a.queueNewPing(b)
		time.Sleep(pingTimeout)
		if got := a.ownRTT(b); got < 160*time.Millisecond {
			t.Fatalf("own RTT after the first ping round %v, want the slow link's 160 ms", got)
		}
		oneWay.Store(int64(20 * time.Millisecond))
		time.Sleep(pingConfirm + pingTimeout)
		if got, want := a.ownRTT(b), 40*time.Millisecond; got < want || got > want+want/10 {
			t.Fatalf("own RTT a confirmation later %v, want %v (+10 %%)", got, want)
		}
	})
}

// varyingLinks returns a rig whose links all take *oneWay each way,
// initially initial, for a test to change.
func varyingLinks(t *testing.T, initial time.Duration) (*atomic.Int64, *rig) {
	oneWay := new(atomic.Int64)
	oneWay.Store(int64(initial))
	net := p2ptest.NewNetWith(t, func(from, to netip.Addr) time.Duration { return time.Duration(oneWay.Load()) })
	return oneWay, &rig{t: t, net: net}
}
