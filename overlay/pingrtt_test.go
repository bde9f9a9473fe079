package overlay

import (
	"net/netip"
	"slices"
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

// TestPingsUnconnectedPeers: a node pings the crawlers that announced
// themselves to it though it holds no connection to them, and its row
// (what it answers want_rtts with) carries them.
func TestPingsUnconnectedPeers(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		const oneWay = 20 * time.Millisecond
		net := p2ptest.NewNetWith(t, func(from, to netip.Addr) time.Duration { return oneWay })
		r := &rig{t: t, net: net}
		nodes := r.swarm(3, Announce(time.Hour))
		a, c := nodes[0].o, nodes[2]
		if err := a.h.Network().ClosePeer(c.h.ID()); err != nil {
			t.Fatal(err)
		}
		a.mu.Lock()
		a.peers[c.h.ID()] = PeerInfo{ID: c.h.ID(), Capacity: 1, Seen: time.Now()}
		a.mu.Unlock()
		if slices.Contains(a.h.Network().Peers(), c.h.ID()) {
			t.Fatal("still connected to the peer")
		}
		a.pingPeers(t.Context())
		if got, want := a.ownRTT(c.h.ID()), 2*oneWay; got < want || got > want+want/10 {
			t.Fatalf("own RTT to an unconnected peer that announced itself: %v, want %v (+10 %%)", got, want)
		}
		row := map[peer.ID]bool{}
		for _, pr := range a.measuredRTTs(maxRowRTTs) {
			row[peer.ID(pr.Peer)] = true
		}
		if !row[c.h.ID()] {
			t.Error("the row does not carry the unconnected peer")
		}
	})
}
