package overlay

import (
	"time"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
)

// beatTag names the connection manager's decaying tag on the peers this
// node exchanges heartbeats with: the coordinators of the shards it holds
// subnets in, and the crawlers of the shards it coordinates.
const beatTag = "micra-heartbeat"

// beatTagValue ranks a heartbeat peer's connection above a routing-table
// peer's (kad-dht tags those 5; its nearest buckets it protects), as a
// gossipsub mesh peer's (20). When the connection manager trims, it keeps
// the low watermark's worth of unprotected connections with the highest
// values: a heartbeat connection is used every heartbeat, and one trimmed
// is dialled again within one, with a new handshake, identify and the
// DHT's check of a new peer (a FIND_NODE). At 300 nodes holding ten
// thousand subnets a node opened 345 connections an hour untagged and
// 243 to 289 tagged, keeping about twice as many open (docs/scale.md).
const beatTagValue = 20

// beatKeeper bumps the heartbeat tag. Its zero value (no connection
// manager that decays tags) does nothing.
type beatKeeper struct {
	tag connmgr.DecayingTag
}

// newBeatKeeper registers the heartbeat tag with h's connection manager,
// when it decays tags (go-libp2p's basic connection manager does). A bump
// sets a peer's value to 1.5 × beatTagValue; every interval (the heartbeat
// rounded up to whole minutes, the manager's resolution) takes half of
// beatTagValue off, and the tag goes at zero: between heartbeats a peer
// ranks at beatTagValue or more, and three intervals without one, it is
// an ordinary peer again. (The decayer stamps every tick as a visit, so
// the value, not the last visit, has to carry the expiry.)
func newBeatKeeper(h host.Host, heartbeat time.Duration) beatKeeper {
	d, ok := h.ConnManager().(connmgr.Decayer)
	if !ok {
		return beatKeeper{}
	}
	interval := (heartbeat + time.Minute - 1) / time.Minute * time.Minute
	tag, err := d.RegisterDecayingTag(beatTag, interval, connmgr.DecayFixed(beatTagValue/2), connmgr.BumpOverwrite())
	if err != nil {
		return beatKeeper{}
	}
	return beatKeeper{tag: tag}
}

// bump marks p as a heartbeat peer now.
func (k beatKeeper) bump(p peer.ID) {
	if k.tag != nil {
		_ = k.tag.Bump(p, beatTagValue*3/2) // fails only once the manager closed
	}
}

// close removes the tag from the connection manager.
func (k beatKeeper) close() {
	if k.tag != nil {
		_ = k.tag.Close()
	}
}
