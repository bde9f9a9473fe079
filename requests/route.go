package requests

import (
	"net/netip"
	"net/url"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
)

// Router is the crawler's Router and Disowner: it answers from what the
// overlay knows without asking anyone (Overlay.Cached). It is safe for
// concurrent use.
type Router struct {
	ov   Overlay
	self peer.ID
	gone func(a netip.Addr) bool
}

var (
	_ crawl.Router   = (*Router)(nil)
	_ crawl.Disowner = (*Router)(nil)
)

// NewRouter returns the router of node self over o, whose Cached reports
// nothing known until the node's overlay is built. gone reports whether
// an address is in a range self held under a snapshot before the running
// one that the carry did not bring along.
func NewRouter(o Overlay, self peer.ID, gone func(a netip.Addr) bool) *Router {
	return &Router{ov: o, self: self, gone: gone}
}

// Route reports whether addr is known to be this node's: its link goes
// into the frontier, else into the outgoing store.
func (r *Router) Route(_ *url.URL, addr netip.Addr) bool {
	p, ok := known(r.ov, addr)
	return ok && p == r.self
}

// Disowned reports that this node no longer crawls addr (crawl.Disowner):
// its overlay knows another node holds addr's range or part under a
// delegation decided after the request was queued (a re-delegation, a
// split, a merge carried to another node), or addr is in a range this node
// held before a snapshot switch that the carry did not bring along.
// Unknown addresses stay with the node.
//
// A delegation decided before the request was queued does not disown it:
// the node that sent the request here resolved its host to an address of
// this node's, and this node to one of the other's, as two nodes do for a
// CDN's name (nearest point of presence first). The sender's resolution
// decides, as for any link handed on; handing the request back would pass
// it between the two for ever, and it would never be fetched.
func (r *Router) Disowned(addr netip.Addr, queued time.Time) bool {
	if d, ok := r.ov.Cached(addr); ok {
		return !d.Orphaned && d.Node != r.self && d.Decided.After(queued)
	}
	return r.gone(addr)
}
