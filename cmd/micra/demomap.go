package main

import (
	"net/netip"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/subnet"
)

// demoLatencyMap returns the demo's latency map (demo --map,
// delegate.LatencyMap): each volunteer's location is the emulated
// Internet's (byPeer: peer.ID → its address), as an operator would
// declare it; the access delays are estimated from between, the RTTs
// between the nodes. Peers of unknown location (the indexer) are left
// out of the map.
func demoLatencyMap(w *world.World, byPeer *sync.Map, between func(a, b peer.ID) (time.Duration, bool)) func([]peer.ID) []subnet.MapPlace {
	at := map[netip.Addr]world.Location{}
	for _, n := range w.Nodes() {
		at[n.Addr] = n.Loc
	}
	return func(peers []peer.ID) []subnet.MapPlace {
		var names []string
		var locs []world.Location
		for _, p := range peers {
			a, ok := byPeer.Load(p)
			if !ok {
				continue
			}
			names = append(names, string(p))
			locs = append(locs, at[a.(netip.Addr)])
		}
		return world.LatencyMap(w, names, locs, func(a, b string) (time.Duration, bool) { return between(peer.ID(a), peer.ID(b)) })
	}
}
