package overlay

import (
	"fmt"
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
