package overlay

import (
	"net/netip"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
)

// TestShareByPlace: nodes in one /24 count as one for load balancing —
// the place's greatest capacity and the sum of its loads — while nodes
// elsewhere, and nodes whose place is unknown, keep their own; PlaceKey
// names the /24.
func TestShareByPlace(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		sybil := func(i byte) netip.Addr { return netip.AddrFrom4([4]byte{127, 3, 50, i}) }
		nodes := []*node{r.node(0), r.nodeWith(sybil(1), nil, nil), r.nodeWith(sybil(2), nil, nil), r.nodeWith(sybil(3), nil, nil), r.node(2)}
		joinSwarm(t, nodes)
		me := nodes[0]
		for _, n := range nodes[1:] {
			if err := me.h.Connect(t.Context(), peer.AddrInfo{ID: n.h.ID(), Addrs: n.h.Addrs()}); err != nil {
				t.Fatal(err)
			}
		}
		const absent = peer.ID("not-connected")
		ps := []PeerInfo{
			{ID: nodes[1].h.ID(), Capacity: 100, Load: 60},
			{ID: nodes[2].h.ID(), Capacity: 300, Load: 70},
			{ID: nodes[3].h.ID()}, // no capacity declared: left alone
			{ID: nodes[4].h.ID(), Capacity: 100, Load: 60},
			{ID: absent, Capacity: 100, Load: 10},
		}
		// Their place keys: the sybils' one /24 (the test tree has no
		// IP-to-ASN ranges), another for the node elsewhere, none for
		// one not connected.
		k1, k2, k4 := me.o.PlaceKey(nodes[1].h.ID()), me.o.PlaceKey(nodes[2].h.ID()), me.o.PlaceKey(nodes[4].h.ID())
		if k1 != "127.3.50.0/24" || k2 != k1 || k4 == k1 || k4 == "" || me.o.PlaceKey(absent) != "" {
			t.Errorf("place keys: %q, %q, %q, absent %q", k1, k2, k4, me.o.PlaceKey(absent))
		}
		got := me.o.shareByPlace(ps)
		for i, want := range []struct{ capacity, load uint64 }{{300, 130}, {300, 130}, {0, 0}, {100, 60}, {100, 10}} {
			if got[i].Capacity != want.capacity || got[i].Load != want.load {
				t.Errorf("peer %d: capacity %d, load %d; want %d, %d", i, got[i].Capacity, got[i].Load, want.capacity, want.load)
			}
		}
	})
}
