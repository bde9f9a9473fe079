package evaluate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/internal/world"
)

// ModeCrawl is the crawler's mode: each node runs micra's crawler, with
// its politeness and concurrency, on the sites assigned to it, each from
// its front page to a fixed depth.
const ModeCrawl = "crawl"

// CrawlModes are the modes Crawl measures, in report order.
var CrawlModes = []string{ModeSequential, ModeCrawl}

// DefaultCrawlDepth is the link hops the crawl mode follows from each
// front page when CrawlConfig.Depth is 0.
const DefaultCrawlDepth = 1

// Settings of the crawl mode's crawlers. The politeness is the crawler's
// default, 1 s between two requests to a host (or twice the host's last
// response time when longer), in modelled time. A robots.txt Crawl-delay
// (the world asks 1 to 10 s) is a number of wall seconds, so it is capped
// at 2 s modelled: uncapped, the one largest site that asks for one sets
// the makespan of every strategy alike.
const (
	crawlMinDelay      = time.Second
	crawlMaxCrawlDelay = 2 * time.Second
	// crawlLimit bounds one node's crawl in wall time: a node whose
	// crawler is still busy then fails the experiment.
	crawlLimit = 20 * time.Minute
	// crawlPoll is how often a crawler's queues are looked at to see
	// whether it is done; the makespan is rounded up to it.
	crawlPoll = 10 * time.Millisecond
)

// elsewhere is the crawl mode's Router: a link to another host leaves the
// node (the outgoing store), as a link to another node's subnet does in a
// network. Each site is crawled from its own front page by its own node,
// so the pages crawled are the same under every assignment; a link into
// another site would reach that site's pages at another depth.
type elsewhere struct{}

func (elsewhere) Route(*url.URL, netip.Addr) bool { return false }

// pageSink collects one crawler's records.
type pageSink struct {
	mu      sync.Mutex
	records []crawl.Record
	err     error
}

func (s *pageSink) Results(_ context.Context, b crawl.Batch) error {
	recs, err := crawl.DecodeBatch(b.Data)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		// The crawler's own batch: a decoding error is a bug, not a
		// reason to retry.
		s.err = errors.Join(s.err, err)
		return nil
	}
	s.records = append(s.records, recs...)
	return nil
}

// nodeCrawl is what one node's crawler did.
type nodeCrawl struct {
	records []crawl.Record
	elapsed time.Duration // wall time from the seeds to idle
	err     error
}

// crawlDeep crawls every site, from its front page to depth link hops,
// by the real crawler of its assigned node: one crawler per node, all at
// once, each bound to its node's address and resolving with the world's
// DNS from there. The times are the records' fetch times (connect to last
// body byte; the politeness waits between fetches are not in them) and
// each node's wall time until its crawler was idle, both divided by the
// world's time scale. The model covers every request the crawl made to
// the sites (robots.txt and sitemaps too), on one kept-alive connection
// per site and node.
func crawlDeep(ctx context.Context, run *world.Running, nodes []netip.Addr, assign map[int]netip.Addr, sites []world.Site, depth int) (CrawlResult, error) {
	w := run.World()
	scale := run.TimeScale()
	queue := map[netip.Addr][]world.Site{}
	for _, s := range sites {
		queue[assign[s.ID]] = append(queue[assign[s.ID]], s)
	}
	run.ResetCounters()
	results := make([]nodeCrawl, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		if len(queue[n]) == 0 {
			continue
		}
		wg.Go(func() { results[i] = crawlNode(ctx, run, n, queue[n], depth) })
	}
	wg.Wait()
	var r CrawlResult
	var times []float64
	var urls []string
	for i, nc := range results {
		if nc.err != nil {
			return r, fmt.Errorf("the crawler of node %s: %w", nodes[i], nc.err)
		}
		var sum time.Duration
		for _, rec := range nc.records {
			t := time.Duration(float64(rec.Timing.Total) / scale)
			sum += t
			times = append(times, ms(t))
			urls = append(urls, rec.FinalURL)
		}
		r.Pages += len(nc.records)
		r.DownloadS += sum.Seconds()
		r.MakespanS = max(r.MakespanS, nc.elapsed.Seconds()/scale)
	}
	for _, s := range sites {
		c := run.Counters(s)
		n := assign[s.ID]
		r.Bytes += c.Bytes
		if c.Requests > 0 {
			r.ModelS += float64(c.Requests+1)*w.RTT(n, s).Seconds() + float64(c.Bytes)/w.Bandwidth(s.Addrs[0], n)
		}
		r.sites = append(r.sites, s.ID)
	}
	if len(times) > 0 {
		r.MeanPageMS = r.DownloadS * 1000 / float64(len(times))
		slices.Sort(times)
		r.P90PageMS = times[min(len(times)-1, len(times)*9/10)]
	}
	// Pages by their final URLs: a page that a redirect leads to is
	// recorded under the redirecting URL too when the redirect was fetched
	// before the page's own URL was known, which the order of the fetches
	// decides, not the assignment.
	slices.Sort(urls)
	r.urls = slices.Compact(urls)
	return r, ctx.Err()
}

// crawlNode runs one node's crawler on its sites until it is idle.
func crawlNode(ctx context.Context, run *world.Running, node netip.Addr, sites []world.Site, depth int) nodeCrawl {
	resolver, err := run.Resolver(node)
	if err != nil {
		return nodeCrawl{err: err}
	}
	db, err := badger.Open(crawl.BadgerOptions("").WithInMemory(true).WithLogger(nil))
	if err != nil {
		return nodeCrawl{err: err}
	}
	defer db.Close()
	sink := &pageSink{}
	c, err := crawl.New(db, sink,
		crawl.SourceAddr(node), crawl.DNS(resolver), crawl.AllowPrivateNetworks(uint16(run.Port())),
		crawl.Politeness(run.Scaled(crawlMinDelay), run.Scaled(crawlMaxCrawlDelay)),
		crawl.MaxDepth(depth), crawl.Routing(elsewhere{}), crawl.ExpectedURLs(1<<16),
		crawl.Logger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		return nodeCrawl{err: err}
	}
	seeds := make([]crawl.Request, 0, len(sites))
	for _, s := range sites {
		seeds = append(seeds, crawl.Request{Link: run.URL(s), Depth: depth})
	}
	start := time.Now()
	if err := c.Submit(ctx, seeds...); err != nil {
		c.Close()
		return nodeCrawl{err: err}
	}
	var out nodeCrawl
	out.err = waitIdle(ctx, c, start.Add(crawlLimit))
	out.elapsed = time.Since(start)
	// Close delivers the records still in the batcher.
	if err := c.Close(); err != nil && out.err == nil {
		out.err = err
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if out.err == nil {
		out.err = sink.err
	}
	out.records = sink.records
	return out
}

// waitIdle returns when c has nothing queued nor in flight, or an error
// at deadline or when ctx ends.
func waitIdle(ctx context.Context, c *crawl.Crawler, deadline time.Time) error {
	tick := time.NewTicker(crawlPoll)
	defer tick.Stop()
	for {
		st := c.Stats()
		if st.Queued == 0 && st.InFlight == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still crawling after %v: %d queued, %d in flight", crawlLimit, st.Queued, st.InFlight)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
