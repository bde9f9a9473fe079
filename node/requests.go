package node

import (
	"context"
	"errors"
	"net/netip"
	"net/url"
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/requests"
	"github.com/micra-net/micra/subnet"
)

// The wiring of a URL's path (the requests package): the crawler's router,
// the hand-on loop, the crawl-request handler with its promise policy, and
// the sender they and the overlay's coordinator use.

// liveOverlay is the node's running overlay, whichever snapshot it runs
// (requests.Overlay). Before the overlay is built it knows no owner.
type liveOverlay struct{ n *Node }

var _ requests.Overlay = liveOverlay{}

func (l liveOverlay) Cached(a netip.Addr) (overlay.Delegation, bool) {
	o := l.n.ov()
	if o == nil {
		return overlay.Delegation{}, false
	}
	return o.Cached(a)
}

func (l liveOverlay) Resolve(ctx context.Context, a netip.Addr) (overlay.Delegation, bool, error) {
	return l.n.ov().Resolve(ctx, a)
}

func (l liveOverlay) Delegate(ctx context.Context, link string, a netip.Addr) (overlay.Delegation, error) {
	return l.n.ov().Delegate(ctx, link, a)
}

func (l liveOverlay) Invalidate(r subnet.Range)   { l.n.ov().Invalidate(r) }
func (l liveOverlay) EgressPolicy() egress.Policy { return l.n.ov().EgressPolicy() }
func (l liveOverlay) Tree() *subnet.Tree          { return l.n.snapshot() }

// errNoDHT: the running overlay has no DHT to look a peer up in.
var errNoDHT = errors.New("no DHT to look the peer up in")

// findPeer looks p's addresses up in the running overlay's DHT.
func (n *Node) findPeer(ctx context.Context, p peer.ID) (peer.AddrInfo, error) {
	o := n.ov()
	if o == nil || o.DHT() == nil {
		return peer.AddrInfo{}, errNoDHT
	}
	return o.DHT().FindPeer(ctx, p)
}

// gone reports whether a is in a range this node held under the snapshot
// before the running one that the carry did not bring along.
func (n *Node) gone(a netip.Addr) bool {
	l := n.cur.Load()
	return l != nil && l.gone(a)
}

// isIndexer reports whether p is a live indexer of link's result shard.
func (n *Node) isIndexer(p peer.ID, link string) bool {
	u, err := url.Parse(link)
	return err == nil && slices.Contains(n.ob.IndexersFor(u.Hostname()), p)
}

// serveRequests registers the crawl-request handler, whose promise policy
// takes what the crawler can fetch in time, and starts the hand-on loop.
func (n *Node) serveRequests() error {
	promise := requests.NewPromiser(requests.PromiseConfig{
		JudgeEvery: n.judgeEvery, Promise: n.cr.Promise, Fresh: n.cr.Fresh, Indexer: n.isIndexer, Resolve: n.resolve,
		Judges: func(ctx context.Context, a netip.Addr, p peer.ID) bool { return n.ov().Judges(ctx, a, p) },
		Place:  func(p peer.ID) string { return n.ov().PlaceKey(p) },
	})
	var err error
	if n.removeReq, err = requests.ServeCrawlRequests(n.h, n.crawlLocal, requests.Egress(n.egressPolicy()), requests.Promises(promise)); err != nil {
		return err
	}
	hand := requests.NewHandOn(requests.HandOnConfig{Store: n.cr, Overlay: liveOverlay{n}, Sender: n.send,
		Indexers: n.ob.IndexersFor, Joined: n.joined, Log: n.log.With("subsystem", "handon")})
	n.wg.Go(func() { hand.Run(n.ctx) })
	return nil
}
