package overlay

import (
	"net/netip"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// TestProbePullsRow: a coordinator that probes a node asks it for its
// whole row of RTTs beside the probe, beyond the 96 a routine
// announcement carries, keeps it, and does not ask again while it is
// fresh; a routine sample that follows updates the row's entries without
// cutting it; a row short of the peers the coordinator knows is asked for
// again sooner.
func TestProbePullsRow(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		const rowLen = 2 * maxAnnouncedRTTs
		nodes := make([]*node, 4)
		for i := range nodes {
			nodes[i] = r.node(i, Announce(time.Hour), WithDelegator(&probingDelegator{}))
		}
		// b measured rowLen peers that announced themselves to it (peers
		// of no address: they stay in its row, unpinged again, while
		// fresh).
		b := nodes[1]
		fakes := randomPeers(t, rowLen, 7)
		b.o.mu.Lock()
		b.o.pingMu.Lock()
		for i, p := range fakes {
			b.o.peers[p] = PeerInfo{ID: p, Capacity: 1, Seen: time.Now()}
			b.o.pings[p] = pinged{least: time.Duration(10+i) * time.Millisecond, at: time.Now()}
		}
		b.o.pingMu.Unlock()
		b.o.mu.Unlock()
		joinSwarm(t, nodes)

		// b asks for subnets until one is decided by another node, which
		// probes b (probingDelegator) and so pulls b's row.
		var w *node
		var d Delegation
		for i := 0; w == nil && i < 64; i++ {
			target := netip.AddrFrom4([4]byte{127, byte(i), 77, 7})
			var err error
			if d, err = b.o.Delegate(t.Context(), "http://"+target.String()+"/", target); err != nil {
				t.Fatalf("delegate %s: %v", target, err)
			}
			for _, n := range nodes {
				if n != b && n.h.ID() == d.Writer {
					w = n
				}
			}
		}
		if w == nil {
			t.Fatal("every subnet was decided by b itself")
		}
		row := func() announcedRTTs {
			w.o.mu.Lock()
			defer w.o.mu.Unlock()
			return w.o.rtts[b.h.ID()]
		}
		got := row()
		if len(got.us) < rowLen || !got.whole {
			t.Fatalf("the coordinator holds %d RTTs of the probed node (whole: %v), want its whole row of at least %d", len(got.us), got.whole, rowLen)
		}
		if d, ok := w.o.MeasuredBy(b.h.ID(), fakes[0]); !ok || d != 10*time.Millisecond {
			t.Errorf("the probed node's RTT to a peer, as the coordinator reads it: %v %v, want 10ms", d, ok)
		}
		// While the row is fresh, a probe of b by w does not ask again.
		at := got.at
		time.Sleep(time.Minute)
		if w.o.rowWanted(b.h.ID()) {
			t.Error("a fresh whole row is wanted again a minute later")
		}
		if now := row(); !now.at.Equal(at) || len(now.us) < rowLen {
			t.Errorf("a minute later the row is of %v with %d RTTs, want the pull's, of %v", now.at, len(now.us), at)
		}
		// A routine sample updates the row's entries, and keeps the rest.
		sample := map[peer.ID]int{}
		for _, p := range fakes[:maxAnnouncedRTTs] {
			sample[p] = 50
		}
		announceRTTs(t, w.o, b.h.ID(), sample)
		now := row()
		if len(now.us) < rowLen {
			t.Errorf("a routine sample cut the row to %d RTTs", len(now.us))
		}
		if d, ok := w.o.MeasuredBy(b.h.ID(), fakes[0]); !ok || d != 50*time.Millisecond {
			t.Errorf("after a routine sample: %v %v, want its 50ms", d, ok)
		}
		if d, ok := w.o.MeasuredBy(b.h.ID(), fakes[rowLen-1]); !ok || d != time.Duration(10+rowLen-1)*time.Millisecond {
			t.Errorf("an RTT the sample did not carry: %v %v, want %v", d, ok, time.Duration(10+rowLen-1)*time.Millisecond)
		}
		// Once the coordinator knows more than twice as many peers as the
		// row holds, the row is a node still measuring: asked for again
		// after a quarter of an announcement interval, not an hour.
		w.o.mu.Lock()
		for _, p := range randomPeers(t, 2*len(now.us)+1, 9) {
			w.o.peers[p] = PeerInfo{ID: p, Capacity: 1, Seen: time.Now()}
		}
		w.o.mu.Unlock()
		time.Sleep(time.Hour / 4)
		if !w.o.rowWanted(b.h.ID()) {
			t.Fatal("a short row is not wanted again a quarter of an interval later")
		}
		w.o.exchangeAnnounce(t.Context(), b.h.ID(), true)
		if again := row(); !again.at.After(now.at) {
			t.Errorf("a short row was not asked for again a quarter of an interval later")
		}
	})
}
