package crawl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/micra-net/micra/crawl/internal/urlnorm"
	"github.com/micra-net/micra/internal/check"
)

// DefaultDepth in a Request means "use the crawler's MaxDepth".
const DefaultDepth = -1

// Request is a runtime crawl request, as in WebRACE: fetch Link (found on
// ParentLink, "" for seeds), follow its links Depth hops further, on behalf
// of Owners. The node submits seeds and URLs forwarded by other nodes; the
// crawler stores URLs of other nodes' subnets in this form (Outlink).
type Request struct {
	Link       string
	ParentLink string
	Depth      int
	Owners     []string
	// Record: the requester lacks the page's record (an indexer that
	// missed it). The page is fetched unconditionally and makes a record
	// even when it has not changed since it was last indexed. Not on the
	// wire: the node sets it by who sent the request.
	Record bool
}

// Router tells the crawler whether a discovered URL is crawled by this
// node. addr is the address the URL's host resolved to. Route answers at
// once from what the node knows and never waits on the network: false
// means the URL belongs to another node or its owner is not known yet,
// and the URL goes to the outgoing store (Outgoing), where the node finds
// its owner and hands it on. Route is called from several goroutines and
// must be safe for concurrent use.
type Router interface {
	Route(u *url.URL, addr netip.Addr) (local bool)
}

// Disowner is a Router that also knows the addresses this node no longer
// crawls: their subnet was delegated to another node, or removed or merged
// away, after requests for them were queued. Disowned answers at once from
// what the node knows, without the network, and must be safe for
// concurrent use. When the Router is a Disowner, the dispatcher asks it
// about each request's resolved address before fetching: a disowned
// request leaves the frontier for the outgoing store (Stats.HandedOff), as
// if the Router had not kept it, and the node hands it on from there.
//
// queued is when the request entered this node's queue: submitted (a seed,
// or a request another node handed on), found on a page, or kept; zero for
// a revisit, which this node scheduled itself. A request that entered the
// queue after its address went to another node was sent here by a node
// that resolved its host elsewhere (a CDN's name resolves to a different
// point of presence for each node): Disowned must not hand it back, or two
// such nodes pass it between them for ever.
type Disowner interface {
	Router
	Disowned(addr netip.Addr, queued time.Time) bool
}

// Sink receives the crawler's records. Results is called from a single
// goroutine, never concurrently with itself.
type Sink interface {
	// Results receives a sealed batch of records. On error the crawler
	// retries the same batch with backoff, so a node should store the batch
	// in its outbox and return nil.
	Results(ctx context.Context, b Batch) error
}

// Stats are cumulative counters since New, and the current size of the
// queues.
type Stats struct {
	Fetched, NotModified, FetchErrors, RobotsDenied int64
	Records, Batches, Forwarded, Dropped            int64
	WireBytes, RecordBytes                          int64

	// Outgoing is the number of links in the outgoing store: links for
	// other nodes not handed on yet (Forwarded counts those handed on).
	Outgoing int64
	// HandedOff counts queued requests that the dispatcher moved to the
	// outgoing store instead of fetching them, because the Disowner said
	// this node no longer crawls their address.
	HandedOff int64

	// Queued is the number of requests waiting in the host queues, those
	// being fetched or processed included; it survives restarts.
	Queued int64
	// Hosts is the number of hosts in the ready index: hosts with queued
	// requests (a host whose queue ran empty leaves at its next turn).
	Hosts int64
	// HostsReady is the number of those hosts that politeness lets the
	// crawler fetch from now.
	HostsReady int64
	// InFlight is the number of requests taken from the queues and not yet
	// done: being fetched, waiting for a processor or being processed.
	// Queued == 0 && InFlight == 0 means the crawler is idle.
	InFlight int64

	// Statements counts the statements of structured data put into
	// records; StructuredMalformed the JSON-LD blocks, items and RDF/XML
	// documents skipped as malformed (StructuredData).
	Statements, StructuredMalformed int64

	// Held is why crawling is paused by the Hold check, "" when it is not.
	Held string
	// Crawling are the hosts (host[:port], as the URLs name them) with
	// requests being fetched or processed now, sorted, at most 32.
	Crawling []string
	// TodayBytes are the bytes downloaded today (in the Windows location),
	// which the daily transfer cap DailyCap bounds (0: none).
	TodayBytes, DailyCap int64
}

type stats struct {
	fetched, notModified, fetchErrors, robotsDenied atomic.Int64
	records, batches, forwarded, dropped            atomic.Int64
	wireBytes, recordBytes                          atomic.Int64
	inFlight, handedOff                             atomic.Int64
	statements, structuredBad                       atomic.Int64
}

// Crawler crawls the URLs submitted to it and those it discovers that the
// Router keeps local, politely and persistently: fetch → detect →
// transform → index → extract, with bounded queues between the stages.
//
// New starts it; Close stops it. All methods are safe for concurrent use.
type Crawler struct {
	cfg    *config
	db     *badger.DB
	sink   Sink
	fetch  *Fetcher
	front  *frontier
	robots *robotsCache
	polite *politeness
	disown Disowner // the Router, if it is one
	meter  *meter
	sched  schedule
	log    *slog.Logger
	stats  stats

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // dispatcher and fetchers
	pwg    sync.WaitGroup // processors
	owg    sync.WaitGroup // batcher

	work    chan *job
	fetched chan *job
	records chan pendingRecord
	wake    chan struct{}
	outWake chan struct{}
	// outFull is set while hand-offs find the outgoing store full, so that
	// the warning is logged once per episode.
	outFull atomic.Bool
	// holdWhy is the hold check's last reason, "" when it let crawling go.
	holdWhy atomic.Pointer[string]
	active  activeHosts // hosts being crawled now (active.go)
	// promMu serialises Promise, so that two frames do not both count
	// the same free places of a host's queue; it guards senders.
	promMu  sync.Mutex
	senders senderLedger // requests taken by sender (promisesenders.go)

	closeOnce sync.Once
	closeErr  error
}

// job is one URL moving through the pipeline.
type job struct {
	l    *lease
	u    *url.URL
	addr netip.Addr
	res  *Response
	st   pageState
	seen bool
}

// New opens the crawler's state in db (under KeyPrefix) and starts
// crawling. db stays owned by the caller and must outlive Close.
func New(db *badger.DB, sink Sink, opts ...Option) (*Crawler, error) {
	if db == nil || sink == nil {
		return nil, errors.New("crawl: db and sink are required")
	}
	cfg := defaults()
	if err := check.Apply(cfg, opts, cfg.validate); err != nil {
		return nil, err
	}
	var err error
	c := &Crawler{
		cfg: cfg, db: db, sink: sink, log: cfg.logger,
		fetch:   newFetcher(cfg),
		polite:  newPoliteness(cfg.perHost),
		meter:   &meter{rate: float64(cfg.bwCap), daily: cfg.dailyCap, loc: cfg.location},
		sched:   schedule{windows: cfg.windows, loc: cfg.location},
		work:    make(chan *job),
		fetched: make(chan *job, cfg.queueSize),
		records: make(chan pendingRecord, cfg.queueSize),
		wake:    make(chan struct{}, 1),
		outWake: make(chan struct{}, 1),
	}
	c.disown, _ = cfg.router.(Disowner)
	c.robots = newRobotsCache(db, c.fetch, cfg.product, cfg.robotsTTL, cfg.minDelay, c.log)
	// A host that had a request in flight when the process died is ready
	// again after its delay from now, as after any request of it.
	c.front, err = openFrontier(db, cfg.expectedURLs, 2*cfg.fetchTO+time.Minute, cfg.perHost, func(host string) time.Duration {
		return c.hostDelay(c.robots.storedCrawlDelay(host), nil, host)
	})
	if err != nil {
		return nil, err
	}
	c.front.outCap = cfg.outCap
	_ = db.View(func(txn *badger.Txn) error {
		if it, err := txn.Get(keyTraffic); err == nil {
			_ = it.Value(func(v []byte) error { return c.meter.restore(v) })
		}
		return nil
	})
	// Records made before a crash (or a shutdown whose last delivery
	// failed) and not delivered: they go out first.
	var carried []pendingRecord
	if err := c.front.pendingRecords(func(k, v []byte) bool {
		carried = append(carried, pendingRecord{raw: v, key: k, time: time.Now()})
		return true
	}); err != nil {
		return nil, fmt.Errorf("loading pending records: %w", err)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Go(c.dispatch)
	for range cfg.workers {
		c.wg.Go(c.fetcher)
	}
	for range cfg.procWorkers {
		c.pwg.Go(c.processor)
	}
	c.owg.Go(func() { c.batcher(carried) })
	c.log.Info("crawler started", "workers", cfg.workers, "agent", cfg.userAgent())
	return c, nil
}

// Close stops dispatching, aborts fetches in flight (they are retried after
// a restart), lets the processors finish what was fetched, flushes the last
// batch to the sink (waiting up to 10 s; records the sink
// did not take stay in the DB and go out after the next New), and saves the
// frontier's Bloom filter. It does not close the DB. Safe to call more than
// once; later calls return the first result.
func (c *Crawler) Close() error {
	c.closeOnce.Do(func() {
		c.cancel()
		c.wg.Wait()
		close(c.fetched)
		c.pwg.Wait()
		close(c.records)
		c.owg.Wait()
		err := c.front.close()
		err = errors.Join(err, c.db.Update(func(txn *badger.Txn) error {
			return txn.Set(keyTraffic, c.meter.state())
		}))
		c.closeErr = errors.Join(err, c.fetch.Close())
		c.log.Info("crawler stopped")
	})
	return c.closeErr
}

// Stats returns the counters and queue sizes. Counting HostsReady reads the
// ready index up to the first host that is not ready, so the cost of a call
// grows with the number of ready hosts (a key-only scan); the other figures
// are kept counts.
func (c *Crawler) Stats() Stats {
	s := &c.stats
	st := Stats{
		Fetched: s.fetched.Load(), NotModified: s.notModified.Load(), FetchErrors: s.fetchErrors.Load(),
		RobotsDenied: s.robotsDenied.Load(), Records: s.records.Load(), Batches: s.batches.Load(),
		Forwarded: s.forwarded.Load(), Dropped: s.dropped.Load(), WireBytes: s.wireBytes.Load(),
		RecordBytes: s.recordBytes.Load(), InFlight: s.inFlight.Load(), Outgoing: max(c.front.nOut.Load(), 0),
		HandedOff: s.handedOff.Load(), Statements: s.statements.Load(), StructuredMalformed: s.structuredBad.Load(),
	}
	if why := c.holdWhy.Load(); why != nil {
		st.Held = *why
	}
	st.Crawling = c.crawling()
	st.TodayBytes, st.DailyCap = c.meter.today(time.Now()), c.cfg.dailyCap
	st.Queued, st.Hosts = c.front.counts()
	if n, err := c.front.readyHosts(time.Now()); err == nil {
		st.HostsReady = n
	}
	return st
}

// Fetcher returns the crawler's fetcher, so that the node can probe with
// the same egress guard, source address and timing.
func (c *Crawler) Fetcher() *Fetcher { return c.fetch }

// Submit queues runtime crawl requests. Links are normalised; a link that
// was crawled before is queued again (the fetch is conditional). Submit
// does not consult the Router: the node routes before submitting.
func (c *Crawler) Submit(ctx context.Context, reqs ...Request) error {
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	var errs []error
	for _, r := range reqs {
		if err := ctx.Err(); err != nil {
			return err
		}
		u, err := urlnorm.Parse(r.Link)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %q: %w", ErrBadRequest, r.Link, err))
			continue
		}
		d := r.Depth
		if d < 0 {
			d = c.cfg.maxDepth
		}
		if len(r.Owners) > maxRecOwners {
			errs = append(errs, fmt.Errorf("%w: %d owners", ErrBadRequest, len(r.Owners)))
			continue
		}
		e := entry{URL: u.String(), Parent: r.ParentLink, Depth: d, Owners: r.Owners, Record: r.Record}
		if _, err := c.front.add(e, u, true, time.Now()); err != nil {
			return err
		}
	}
	c.poke()
	return errors.Join(errs...)
}

func (c *Crawler) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// sleep waits until t, a wake-up or shutdown; false on shutdown.
func (c *Crawler) sleep(t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return c.ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-c.ctx.Done():
		return false
	case <-c.wake:
		return true
	case <-tm.C:
		return true
	}
}
