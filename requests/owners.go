package requests

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/subnet"
)

// Overlay is what requests asks of the overlay about the owners of
// addresses. *overlay.Overlay satisfies it; node passes one that follows
// its snapshot switches. Cached, EgressPolicy and Tree never touch the
// network.
type Overlay interface {
	Cached(a netip.Addr) (overlay.Delegation, bool)
	Resolve(ctx context.Context, a netip.Addr) (overlay.Delegation, bool, error)
	Delegate(ctx context.Context, link string, a netip.Addr) (overlay.Delegation, error)
	Invalidate(r subnet.Range)
	EgressPolicy() egress.Policy
	Tree() *subnet.Tree
}

var _ Overlay = (*overlay.Overlay)(nil)

// known returns the node this peer knows to hold a without asking anyone
// (Overlay.Cached); false when none is known or its owner left.
func known(o Overlay, a netip.Addr) (peer.ID, bool) {
	d, ok := o.Cached(a)
	if !ok || d.Orphaned {
		return "", false
	}
	return d.Node, true
}

// owner returns the node holding a, the address link's host resolved to:
// the delegation its subnet's coordinator (or the cache) answers, or,
// when nobody holds the subnet or its owner left, the one the delegation
// procedure decides. The overlay caches what it finds.
func owner(ctx context.Context, o Overlay, link string, a netip.Addr) (peer.ID, error) {
	d, ok, err := o.Resolve(ctx, a)
	if err != nil {
		return "", fmt.Errorf("resolving the delegation of %v: %w", a, err)
	}
	if ok && !d.Orphaned {
		return d.Node, nil
	}
	if d, err = o.Delegate(ctx, link, a); err != nil {
		return "", fmt.Errorf("delegating the subnet of %v: %w", a, err)
	}
	return d.Node, nil
}

// forget drops what o's cache holds of a's subnet, so that its owner is
// asked afresh.
func forget(o Overlay, a netip.Addr) {
	t := o.Tree()
	o.Invalidate(t.Range(t.SmallestNonUnary(a)))
}

// check returns why r can never go to an owner from this peer: it breaks
// the crawl-request protocol's bounds, or the egress policy refuses a, the
// address its host resolved to, or, before it is resolved (a invalid), its
// host (an IP literal, or localhost). This is the sending side's egress
// check, made where a URL enters: a seed in Submit (its host, then its
// address: checkAddr), a crawler's link in the hand-on loop.
func check(p *egress.Policy, r crawl.Request, a netip.Addr) error {
	if err := CheckRequest(r); err != nil {
		return err
	}
	u, _ := url.Parse(r.Link) // CheckRequest parsed it
	if a.IsValid() {
		return checkAddr(p, u.Hostname(), a)
	}
	return p.CheckHost(u.Hostname())
}

// checkAddr returns the egress policy's refusal of a, the address host
// resolved to, naming both.
func checkAddr(p *egress.Policy, host string, a netip.Addr) error {
	if err := p.CheckAddr(a); err != nil {
		return fmt.Errorf("host %s resolves to %s: %w", host, a, err)
	}
	return nil
}

// Sender sends crawl requests and watches from one host, looking up the
// addresses of an owner it knows none of first. It is safe for
// concurrent use.
type Sender struct {
	h    host.Host
	find func(ctx context.Context, p peer.ID) (peer.AddrInfo, error)
	log  *slog.Logger
}

// NewSender returns a Sender from h that looks owners' addresses up with
// find (the DHT's FindPeer; it may fail at once when there is no DHT).
func NewSender(h host.Host, find func(ctx context.Context, p peer.ID) (peer.AddrInfo, error), log *slog.Logger) *Sender {
	return &Sender{h: h, find: find, log: log}
}

// Looking up an owner's addresses: findPeerLimit bounds the DHT lookup,
// and the peerstore is checked every findPeerPoll meanwhile.
const (
	findPeerLimit = 20 * time.Second
	findPeerPoll  = 100 * time.Millisecond
)

// Crawl sends reqs to p, the node owning their subnets, and returns its
// receipts (SendCrawlReceipts), looking p up first (findAddrs).
func (s *Sender) Crawl(ctx context.Context, p peer.ID, reqs []crawl.Request) ([]Receipt, error) {
	s.findAddrs(ctx, p)
	return SendCrawlReceipts(ctx, s.h, p, reqs)
}

// handOn sends reqs, which the hand-on loop checked against the protocol's
// bounds as it read them (check), to their owner p as Crawl does, without
// checking them again.
func (s *Sender) handOn(ctx context.Context, p peer.ID, reqs []crawl.Request) ([]Receipt, error) {
	s.findAddrs(ctx, p)
	return sendFrames(ctx, s.h, p, reqs, spotReceipts)
}

// askCrawlTimeout bounds a coordinator's crawl request to a node that
// refused an indexer's (overlay.AskCrawl).
const askCrawlTimeout = 30 * time.Second

// AskCrawl sends p, as the coordinator of a refused withholding notice, a
// crawl request for link (the page only) and returns p's receipt, or nil
// when p did not take it (overlay.AskCrawl).
func (s *Sender) AskCrawl(ctx context.Context, p peer.ID, link string) ([]byte, time.Time) {
	ctx, cancel := context.WithTimeout(ctx, askCrawlTimeout)
	defer cancel()
	rs, err := s.Crawl(ctx, p, []crawl.Request{{Link: link}})
	if err != nil || len(rs) != 1 || rs[0].Sig == nil {
		s.log.Debug("a node did not take a coordinator's crawl request", "peer", p, "url", link, "error", err)
		return nil, time.Time{}
	}
	return rs[0].Sig, rs[0].At
}

// Watch reports w to each of indexers (those that take its link's result
// shard); it fails when none took it.
func (s *Sender) Watch(ctx context.Context, indexers []peer.ID, w Watch) error {
	var errs []error
	sent := 0
	for _, p := range indexers {
		if err := SendWatches(ctx, s.h, p, []Watch{w}); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			continue
		}
		sent++
	}
	if sent == 0 {
		return fmt.Errorf("no indexer took the watch: %w", errors.Join(errs...))
	}
	return nil
}

// findAddrs looks p up in the DHT when this node is not connected to p and
// knows no address of it. An owner behind NAT is a DHT client, in no
// routing table, so a node that never met it has no address to dial; the
// DHT servers connected to it (its relay among them) answer a FindPeer
// with its addresses, relayed ones included, which findAddrs adds to the
// peerstore. The lookup then goes on to query the owner itself, which a
// client does not answer (over a relay it waits for a direct connection
// that a symmetric NAT never allows): findAddrs returns as soon as the
// peerstore has an address. When none comes the send fails and the links
// wait for the next pass.
func (s *Sender) findAddrs(ctx context.Context, p peer.ID) {
	known := func() bool {
		c := s.h.Network().Connectedness(p)
		return c == network.Connected || c == network.Limited || len(s.h.Peerstore().Addrs(p)) > 0
	}
	if known() || s.find == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, findPeerLimit)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	done := make(chan struct{})
	wg.Go(func() {
		defer close(done)
		ai, err := s.find(ctx, p)
		if err != nil {
			s.log.Debug("owner's addresses not found", "peer", p, "error", err)
			return
		}
		s.h.Peerstore().AddAddrs(ai.ID, ai.Addrs, peerstore.TempAddrTTL)
	})
	tick := time.NewTicker(findPeerPoll)
	defer tick.Stop()
	for !known() {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
