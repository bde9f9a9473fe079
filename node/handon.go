package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/requests"
	"github.com/micra-net/micra/subnet"
)

// The path of a discovered link. The crawler asks the router whether the
// link's address is this node's; the router answers from what the overlay
// knows without asking anyone (overlay.Cached). A link that is not known to
// be local goes to the crawler's outgoing store, in the transaction that
// completes its page. The hand-on loop below pages through that store:
// a link whose owner is known goes to it with the crawl-request protocol
// (requests.SendCrawlReceipts) and is deleted once the owner acknowledged it; a link
// whose subnet turns out to be this node's is kept (crawl.Keep); a link
// whose owner is not known waits in the store while its subnet is
// delegated by a few workers in the background, fed by a bounded queue of
// subnets. The owner a delegation finds is cached by the overlay, which is
// where the next pass reads it. Nothing is resolved twice: the crawler
// stored the address the host resolved to. A link whose address the
// overlay's egress policy refuses (a special-purpose address, which the
// crawler's own guard lets through only under a different setting) is
// dropped: no owner would take it.
//
// Watches: the owner signs a receipt of every link it takes,
// and about one frame in watchEvery has one of its links, with its
// receipt, reported to the indexers taking the link's result shard
// (requests.SendWatches), which hold the owner to it as to their own
// crawl requests. The owner cannot tell which links are watched.

// router is the crawler's Router.
type router struct {
	cur  *atomic.Pointer[live] // the node's; nil until the overlay is built, when nothing is known
	self peer.ID
}

func (r *router) Route(_ *url.URL, addr netip.Addr) bool {
	l := r.cur.Load()
	if l == nil {
		return false
	}
	d, ok := l.o.Cached(addr)
	return ok && !d.Orphaned && d.Node == r.self
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
func (r *router) Disowned(addr netip.Addr, queued time.Time) bool {
	l := r.cur.Load()
	if l == nil {
		return false
	}
	if d, ok := l.o.Cached(addr); ok {
		return !d.Orphaned && d.Node != r.self && d.Decided.After(queued)
	}
	return l.gone(addr)
}

// Hand-on limits.
const (
	handOnPage      = 256              // links read from the store at a time
	handOnPass      = 4096             // links looked at in one pass
	handOnGap       = time.Second      // at least this long between two sweeps of the whole store
	handOnTick      = 5 * time.Second  // a pass at least this often while links wait
	handOnSend      = 30 * time.Second // one owner's acknowledgement
	delegateWorkers = 2
	delegateQueue   = 1024             // subnets waiting for a delegation
	delegateRetry   = 30 * time.Second // a subnet whose delegation failed is tried again after this
	delegateLimit   = 2 * time.Minute  // one delegation
	watchEvery      = 16               // about one frame in this many has a link watched
	watchQueue      = 64               // watches waiting to be sent; beyond, new ones are dropped
	watchPerHour    = 120              // watches sent an hour, at most
	watchSend       = 20 * time.Second // one indexer's answer
)

// outStore is the crawler's outgoing store (*crawl.Crawler).
type outStore interface {
	Outgoing(after crawl.Outlink, n int) ([]crawl.Outlink, error)
	Handed(links ...crawl.Outlink) error
	Keep(links ...crawl.Outlink) error
	Discard(links ...crawl.Outlink) error
	OutgoingStored() <-chan struct{}
}

// owners is what the hand-on loop asks of the overlay (*overlay.Overlay).
type owners interface {
	Cached(a netip.Addr) (overlay.Delegation, bool)
	Resolve(ctx context.Context, a netip.Addr) (overlay.Delegation, bool, error)
	Delegate(ctx context.Context, link string, a netip.Addr) (overlay.Delegation, error)
	Invalidate(r subnet.Range)
}

// liveOwners asks the node's running overlay, whichever snapshot it runs.
type liveOwners struct{ n *Node }

func (l liveOwners) Cached(a netip.Addr) (overlay.Delegation, bool) { return l.n.ov().Cached(a) }
func (l liveOwners) Resolve(ctx context.Context, a netip.Addr) (overlay.Delegation, bool, error) {
	return l.n.ov().Resolve(ctx, a)
}
func (l liveOwners) Delegate(ctx context.Context, link string, a netip.Addr) (overlay.Delegation, error) {
	return l.n.ov().Delegate(ctx, link, a)
}
func (l liveOwners) Invalidate(r subnet.Range) { l.n.ov().Invalidate(r) }

// handOn is the node's hand-on loop and its delegation queue.
type handOn struct {
	store  outStore
	owners owners
	send   func(ctx context.Context, p peer.ID, reqs []crawl.Request) ([]requests.Receipt, error) // to the owner p, acknowledged, with its receipts
	// watch reports w to the indexers of its link's shard; nil: no
	// watches. Called by one goroutine, off the hand-on loop.
	watch   func(ctx context.Context, w requests.Watch) error
	watches chan requests.Watch
	rng     func(n int) int // rand.IntN
	self    peer.ID
	tree    func() *subnet.Tree    // the running snapshot
	refuse  func(netip.Addr) error // the egress policy's refusal of a link's address; nil: none
	log     *slog.Logger
	joined  <-chan struct{}

	queue chan delegation
	wake  chan struct{} // a delegation finished

	mu    sync.Mutex
	asked map[subnet.Range]time.Time // queued or running (zero time), or failed: not before then

	failed map[peer.ID]backoff // owners that did not acknowledge: not sent to before then (pass only)

	cursor crawl.Outlink // where the next pass starts; the zero value is the store's start
	swept  time.Time     // when the last sweep of the whole store ended
}

type backoff struct {
	until time.Time
	wait  time.Duration
}

type delegation struct {
	r    subnet.Range
	link string
	addr netip.Addr
}

func newHandOn(n *Node) *handOn {
	return &handOn{store: n.cr, owners: liveOwners{n}, self: n.h.ID(), tree: n.snapshot, log: n.log.With("subsystem", "handon"), joined: n.joined,
		refuse: func(a netip.Addr) error {
			p := n.ov().EgressPolicy()
			return p.CheckAddr(a)
		},
		send: func(ctx context.Context, p peer.ID, reqs []crawl.Request) ([]requests.Receipt, error) {
			n.findAddrs(ctx, p)
			return requests.SendCrawlReceipts(ctx, n.h, p, reqs)
		},
		watch: n.sendWatch, watches: make(chan requests.Watch, watchQueue), rng: rand.IntN,
		queue: make(chan delegation, delegateQueue), wake: make(chan struct{}, 1),
		asked: map[subnet.Range]time.Time{}, failed: map[peer.ID]backoff{}}
}

// Looking up an owner's addresses: findPeerLimit bounds the DHT lookup,
// and the peerstore is checked every findPeerPoll meanwhile.
const (
	findPeerLimit = 20 * time.Second
	findPeerPoll  = 100 * time.Millisecond
)

// findAddrs looks p up in the DHT when this node is not connected to p and
// knows no address of it. An owner behind NAT is a DHT client, in no
// routing table, so a node that never met it has no address to dial; the
// DHT servers connected to it (its relay among them) answer a FindPeer
// with its addresses, relayed ones included, which the DHT adds to the
// peerstore. The lookup then goes on to query the owner itself, which a
// client does not answer (over a relay it waits for a direct connection
// that a symmetric NAT never allows): findAddrs returns as soon as the
// peerstore has an address. When none comes the send fails and the links
// wait for the next pass.
func (n *Node) findAddrs(ctx context.Context, p peer.ID) {
	known := func() bool {
		c := n.h.Network().Connectedness(p)
		return c == network.Connected || c == network.Limited || len(n.h.Peerstore().Addrs(p)) > 0
	}
	o := n.ov()
	if known() || o == nil || o.DHT() == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, findPeerLimit)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	done := make(chan struct{})
	wg.Go(func() {
		defer close(done)
		ai, err := o.DHT().FindPeer(ctx, p)
		if err != nil {
			n.log.Debug("owner's addresses not found", "peer", p, "error", err)
			return
		}
		n.h.Peerstore().AddAddrs(ai.ID, ai.Addrs, peerstore.TempAddrTTL)
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

// run hands links on until ctx ends, from the moment the node joined.
func (h *handOn) run(ctx context.Context) {
	select {
	case <-h.joined:
	case <-ctx.Done():
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for range delegateWorkers {
		wg.Go(func() { h.delegate(ctx) })
	}
	if h.watch != nil {
		wg.Go(func() { h.sendWatches(ctx) })
	}
	tick := time.NewTicker(handOnTick)
	defer tick.Stop()
	for {
		wrapped := h.pass(ctx)
		if ctx.Err() != nil {
			return
		}
		if !wrapped {
			continue // the rest of the store first
		}
		if wait := time.Until(h.swept.Add(handOnGap)); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return
			}
		}
		select {
		case <-h.store.OutgoingStored():
		case <-h.wake:
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// pass looks at up to handOnPass links from the cursor and hands on those
// whose owner is known; it reports whether it reached the store's end
// (the cursor is back at the start).
func (h *handOn) pass(ctx context.Context) (wrapped bool) {
	o, cr, self := h.owners, h.store, h.self
	groups := map[peer.ID][]crawl.Outlink{}
	for seen := 0; seen < handOnPass; {
		links, err := cr.Outgoing(h.cursor, handOnPage)
		if err != nil {
			h.log.Error("reading the outgoing links failed", "error", err)
			return true
		}
		if len(links) == 0 {
			wrapped = true
			break
		}
		seen += len(links)
		h.cursor = links[len(links)-1]
		for _, l := range links {
			if err := h.check(l); err != nil {
				// Beyond the crawl-request protocol's bounds (owners,
				// depth), or to an address the policy refuses: no owner
				// would ever take it.
				h.log.Warn("link cannot be handed on; dropped", "link", l.Link, "error", err)
				if err := cr.Discard(l); err != nil {
					h.log.Error("deleting a link failed", "error", err)
				}
				continue
			}
			d, ok := o.Cached(l.Addr)
			if !ok || d.Orphaned {
				h.ask(l)
				continue
			}
			groups[d.Node] = append(groups[d.Node], l)
		}
	}
	if wrapped {
		h.cursor, h.swept = crawl.Outlink{}, time.Now()
		for p, b := range h.failed {
			if time.Now().After(b.until.Add(time.Hour)) {
				delete(h.failed, p)
			}
		}
	}
	now := time.Now()
	for p, links := range groups {
		if ctx.Err() != nil {
			return wrapped
		}
		if b, ok := h.failed[p]; ok && now.Before(b.until) {
			continue
		}
		if p == self {
			if err := cr.Keep(links...); err != nil {
				h.log.Warn("queueing own links failed", "count", len(links), "error", err)
			}
			continue
		}
		reqs := make([]crawl.Request, len(links))
		for i, l := range links {
			reqs[i] = l.Request
		}
		sctx, cancel := context.WithTimeout(ctx, handOnSend)
		receipts, err := h.send(sctx, p, reqs)
		cancel()
		if err != nil {
			// The owner may have gone: it is not sent to again for a while
			// (doubling up to 5 min), and its subnets are resolved afresh,
			// so that links whose subnet moved go to the new owner.
			b := h.failed[p]
			b.wait = min(max(2*b.wait, delegateRetry), 5*time.Minute)
			b.until = time.Now().Add(b.wait)
			h.failed[p] = b
			h.log.Debug("handing links on failed; they wait", "peer", p, "count", len(links), "retry", b.wait, "error", err)
			for _, l := range links {
				t := h.tree()
				o.Invalidate(t.Range(t.SmallestNonUnary(l.Addr)))
			}
			continue
		}
		delete(h.failed, p)
		// A link the owner did not take (it would not crawl it in
		// time: its queue for the host is full) stays, and is handed on
		// again in a later pass.
		var handed []crawl.Outlink
		var took []crawl.Request
		var tookReceipts []requests.Receipt
		for i, l := range links {
			if receipts != nil && receipts[i].Sig == nil {
				continue
			}
			handed, took = append(handed, l), append(took, reqs[i])
			if receipts != nil {
				tookReceipts = append(tookReceipts, receipts[i])
			}
		}
		if err := cr.Handed(handed...); err != nil {
			h.log.Error("deleting handed links failed", "error", err)
		}
		if n := len(links) - len(handed); n > 0 {
			h.log.Debug("owner did not take some links now; they wait", "peer", p, "count", n)
		}
		h.sample(p, took, tookReceipts)
	}
	return wrapped
}

// sample queues a watch of one of reqs, which p took with receipts, about
// one time in watchEvery.
func (h *handOn) sample(p peer.ID, reqs []crawl.Request, receipts []requests.Receipt) {
	if h.watch == nil || len(receipts) != len(reqs) || len(reqs) == 0 || h.rng(watchEvery) != 0 {
		return
	}
	i := h.rng(len(reqs))
	select {
	case h.watches <- requests.Watch{Request: reqs[i], Holder: p, Receipt: receipts[i]}:
	default:
	}
}

// sendWatches sends the watches queued, at most watchPerHour an hour,
// until ctx ends.
func (h *handOn) sendWatches(ctx context.Context) {
	gap := time.Hour / watchPerHour
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case w := <-h.watches:
			if wait := time.Until(last.Add(gap)); wait > 0 {
				continue // over the budget: dropped
			}
			last = time.Now()
			wctx, cancel := context.WithTimeout(ctx, watchSend)
			if err := h.watch(wctx, w); err != nil {
				h.log.Debug("watch not delivered", "link", w.Request.Link, "holder", w.Holder, "error", err)
			}
			cancel()
		}
	}
}

// check returns why l can never be handed on: it breaks the crawl-request
// protocol's bounds, or the egress policy refuses its address.
func (h *handOn) check(l crawl.Outlink) error {
	if err := requests.CheckRequest(l.Request); err != nil {
		return err
	}
	if h.refuse == nil {
		return nil
	}
	return h.refuse(l.Addr)
}

// ask queues the delegation of l's subnet unless it is queued, running,
// or failed less than delegateRetry ago. A full queue leaves it for a
// later pass.
func (h *handOn) ask(l crawl.Outlink) {
	t := h.tree()
	r := t.Range(t.SmallestNonUnary(l.Addr))
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if at, ok := h.asked[r]; ok && (at.IsZero() || now.Before(at)) {
		return
	}
	select {
	case h.queue <- delegation{r: r, link: l.Link, addr: l.Addr}:
		h.asked[r] = time.Time{}
	default:
		return
	}
	if len(h.asked) > 4*delegateQueue {
		for k, at := range h.asked {
			if !at.IsZero() && now.After(at) {
				delete(h.asked, k)
			}
		}
	}
}

// delegate works the delegation queue: it resolves each subnet and, when
// nobody holds it (or its owner left), runs its delegation. The overlay
// caches what it finds; the hand-on loop is woken to use it.
func (h *handOn) delegate(ctx context.Context) {
	for {
		var q delegation
		select {
		case q = <-h.queue:
		case <-ctx.Done():
			return
		}
		dctx, cancel := context.WithTimeout(ctx, delegateLimit)
		d, ok, err := h.owners.Resolve(dctx, q.addr)
		if err == nil && (!ok || d.Orphaned) {
			_, err = h.owners.Delegate(dctx, q.link, q.addr)
		}
		cancel()
		h.mu.Lock()
		if err != nil {
			h.asked[q.r] = time.Now().Add(delegateRetry)
		} else {
			delete(h.asked, q.r)
		}
		h.mu.Unlock()
		if err != nil {
			if ctx.Err() == nil {
				h.log.Debug("delegation for waiting links failed; retried later", "subnet", q.r, "error", err)
			}
			continue
		}
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
}

// sendWatch reports w to every live indexer that takes its link's result
// shard; it fails when none took it.
func (n *Node) sendWatch(ctx context.Context, w requests.Watch) error {
	u, err := url.Parse(w.Request.Link)
	if err != nil {
		return err
	}
	var errs []error
	sent := 0
	for _, p := range n.ob.IndexersFor(u.Hostname()) {
		if err := requests.SendWatches(ctx, n.h, p, []requests.Watch{w}); err != nil {
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
