package node

import (
	"net/netip"
	"testing"

	"github.com/micra-net/micra/internal/worldmap"
	"github.com/micra-net/micra/subnet/embedded"
)

// TestPlaces: this node, each peer once (by its direct connection's
// address) and each delegated subnet are put at their registry country;
// relayed connections and addresses without a country have no place.
func TestPlaces(t *testing.T) {
	tree, err := embedded.Tree()
	if err != nil {
		t.Fatal(err)
	}
	conns := []Conn{
		{Peer: "peerUS", Remote: "/ip4/8.8.8.8/tcp/7466"},
		{Peer: "peerUS", Remote: "/ip4/8.8.4.4/udp/7466/quic-v1"}, // the same peer again
		{Peer: "peerJP", Remote: "/ip4/133.11.0.1/tcp/7466"},
		{Peer: "relayed", Remote: "/ip4/8.8.8.8/tcp/7466/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN/p2p-circuit", Relayed: true},
		{Peer: "local", Remote: "/ip4/127.0.0.1/tcp/7466"},
	}
	subnets := []Subnet{{Range: "193.0.0.0/21"}, {Range: "10.0.0.0/8"}}
	got := places(tree, netip.MustParseAddr("193.0.6.139"), conns, subnets)
	want := []struct{ kind, label, cc string }{
		{"self", "this node", "NL"}, {"peer", "peerUS", "US"}, {"peer", "peerJP", "JP"}, {"subnet", "193.0.0.0/21", "NL"},
	}
	if len(got) != len(want) {
		t.Fatalf("places %+v", got)
	}
	for i, w := range want {
		x, y, _ := worldmap.Country(w.cc)
		if p := got[i]; p.Kind != w.kind || p.Label != w.label || p.Country != w.cc || p.X != x || p.Y != y {
			t.Errorf("place %d = %+v, want %s %s in %s", i, p, w.kind, w.label, w.cc)
		}
	}
}
