package requests

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"net/url"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/subnet"
)

// The path of a discovered link. The crawler asks the Router whether the
// link's address is this node's; the router answers from what the overlay
// knows without asking anyone (overlay.Cached). A link that is not known to
// be local goes to the crawler's outgoing store, in the transaction that
// completes its page. The hand-on loop below pages through that store:
// a link whose owner is known goes to it with the crawl-request protocol
// (SendCrawlReceipts) and is deleted once the owner acknowledged it; a link
// whose subnet turns out to be this node's is kept (crawl.Keep); a link
// whose owner is not known waits in the store while its subnet is
// delegated by a few workers in the background (owner), fed by a bounded
// queue of subnets. The owner a delegation finds is cached by the overlay,
// which is where the next pass reads it (known). Nothing is resolved
// twice: the crawler stored the address the host resolved to. A link whose
// address the overlay's egress policy refuses (a special-purpose address,
// which the crawler's own guard lets through only under a different
// setting) is dropped: no owner would take it (check).
//
// Watches: the owner signs a receipt of every link it takes,
// and about one frame in watchEvery has one of its links, with its
// receipt, reported to the indexers taking the link's result shard
// (SendWatches), which hold the owner to it as to their own
// crawl requests. The owner cannot tell which links are watched.

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

// OutStore is the crawler's outgoing store (*crawl.Crawler).
type OutStore interface {
	Outgoing(after crawl.Outlink, n int) ([]crawl.Outlink, error)
	Handed(links ...crawl.Outlink) error
	Keep(links ...crawl.Outlink) error
	Discard(links ...crawl.Outlink) error
	OutgoingStored() <-chan struct{}
}

// HandOn is a node's hand-on loop and its delegation queue. Run it once.
type HandOn struct {
	store OutStore
	ov    Overlay
	send  func(ctx context.Context, p peer.ID, reqs []crawl.Request) ([]Receipt, error) // to the owner p, acknowledged, with its receipts
	// watch reports w to the indexers of its link's shard; nil: no
	// watches. Called by one goroutine, off the hand-on loop.
	watch   func(ctx context.Context, w Watch) error
	watches chan Watch
	rng     func(n int) int // rand.IntN
	self    peer.ID
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

// HandOnConfig is what a hand-on loop works with.
type HandOnConfig struct {
	Store   OutStore // the crawler's outgoing store
	Overlay Overlay  // the owners of addresses, and the egress policy their links must pass
	Sender  *Sender  // sends the links and the watches; its host is this node
	// Indexers returns the live indexers that take the result shard of
	// host, which the watches of its links go to; nil: no watches.
	Indexers func(host string) []peer.ID
	Joined   <-chan struct{} // closed when the node joined the overlay: nothing moves before
	Log      *slog.Logger
}

// NewHandOn returns a hand-on loop over c; Run starts it.
func NewHandOn(c HandOnConfig) *HandOn {
	h := &HandOn{store: c.Store, ov: c.Overlay, send: c.Sender.handOn, self: c.Sender.h.ID(), log: c.Log, joined: c.Joined,
		watches: make(chan Watch, watchQueue), rng: rand.IntN,
		queue: make(chan delegation, delegateQueue), wake: make(chan struct{}, 1),
		asked: map[subnet.Range]time.Time{}, failed: map[peer.ID]backoff{}}
	if c.Indexers != nil {
		h.watch = func(ctx context.Context, w Watch) error {
			u, err := url.Parse(w.Request.Link)
			if err != nil {
				return err
			}
			return c.Sender.Watch(ctx, c.Indexers(u.Hostname()), w)
		}
	}
	return h
}

// Run hands links on until ctx ends, from the moment the node joined.
func (h *HandOn) Run(ctx context.Context) {
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
func (h *HandOn) pass(ctx context.Context) (wrapped bool) {
	groups, wrapped, err := h.read()
	if err != nil {
		h.log.Error("reading the outgoing links failed", "error", err)
		return true
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
		if p == h.self {
			if err := h.store.Keep(links...); err != nil {
				h.log.Warn("queueing own links failed", "count", len(links), "error", err)
			}
			continue
		}
		h.handTo(ctx, p, links)
	}
	return wrapped
}

// read reads up to handOnPass links from the cursor, which it moves on,
// and groups those whose owner is known by owner; it queues the
// delegation of the others' subnets and drops the links no owner would
// take. It reports whether it reached the store's end, or why it could not
// read the store.
func (h *HandOn) read() (groups map[peer.ID][]crawl.Outlink, wrapped bool, err error) {
	policy := h.ov.EgressPolicy()
	groups = map[peer.ID][]crawl.Outlink{}
	for seen := 0; seen < handOnPass; {
		links, err := h.store.Outgoing(h.cursor, handOnPage)
		if err != nil {
			return nil, false, err
		}
		if len(links) == 0 {
			return groups, true, nil
		}
		seen += len(links)
		h.cursor = links[len(links)-1]
		for _, l := range links {
			if err := check(&policy, l.Request, l.Addr); err != nil {
				// Beyond the crawl-request protocol's bounds (owners,
				// depth), or to an address the policy refuses: no owner
				// would ever take it.
				h.log.Warn("link cannot be handed on; dropped", "link", l.Link, "error", err)
				if err := h.store.Discard(l); err != nil {
					h.log.Error("deleting a link failed", "error", err)
				}
				continue
			}
			p, ok := known(h.ov, l.Addr)
			if !ok {
				h.ask(l)
				continue
			}
			groups[p] = append(groups[p], l)
		}
	}
	return groups, false, nil
}

// handTo sends links to their owner p and deletes from the store those it
// took. When p does not answer, it is not sent to again for a while and
// the links' subnets are resolved afresh.
func (h *HandOn) handTo(ctx context.Context, p peer.ID, links []crawl.Outlink) {
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
			forget(h.ov, l.Addr)
		}
		return
	}
	delete(h.failed, p)
	// A link the owner did not take (it would not crawl it in
	// time: its queue for the host is full) stays, and is handed on
	// again in a later pass.
	var handed []crawl.Outlink
	var took []crawl.Request
	var tookReceipts []Receipt
	for i, l := range links {
		if receipts != nil && receipts[i].Sig == nil {
			continue
		}
		handed, took = append(handed, l), append(took, reqs[i])
		if receipts != nil {
			tookReceipts = append(tookReceipts, receipts[i])
		}
	}
	if err := h.store.Handed(handed...); err != nil {
		h.log.Error("deleting handed links failed", "error", err)
	}
	if n := len(links) - len(handed); n > 0 {
		h.log.Debug("owner did not take some links now; they wait", "peer", p, "count", n)
	}
	h.sample(p, took, tookReceipts)
}

// sample queues a watch of one of reqs, which p took with receipts, about
// one time in watchEvery.
func (h *HandOn) sample(p peer.ID, reqs []crawl.Request, receipts []Receipt) {
	if h.watch == nil || len(receipts) != len(reqs) || len(reqs) == 0 || h.rng(watchEvery) != 0 {
		return
	}
	i := h.rng(len(reqs))
	select {
	case h.watches <- Watch{Request: reqs[i], Holder: p, Receipt: receipts[i]}:
	default:
	}
}

// sendWatches sends the watches queued, at most watchPerHour an hour,
// until ctx ends.
func (h *HandOn) sendWatches(ctx context.Context) {
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

// ask queues the delegation of l's subnet unless it is queued, running,
// or failed less than delegateRetry ago. A full queue leaves it for a
// later pass.
func (h *HandOn) ask(l crawl.Outlink) {
	t := h.ov.Tree()
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
func (h *HandOn) delegate(ctx context.Context) {
	for {
		var q delegation
		select {
		case q = <-h.queue:
		case <-ctx.Done():
			return
		}
		dctx, cancel := context.WithTimeout(ctx, delegateLimit)
		_, err := owner(dctx, h.ov, q.link, q.addr)
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
