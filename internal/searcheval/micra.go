package searcheval

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"net/url"
	"runtime"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/indexer/index"
)

// crawled is what the crawl of a site left: the index, the pages (final
// URLs of the 2xx records) and the bytes that went through the result path.
type crawled struct {
	db, idxDB   *badger.DB
	idx         *index.Index
	pages       []string // final URLs of the pages indexed
	batches     [][]byte // the batches, as the indexer received them
	batchBytes  int64    // compressed batches, as a node publishes them
	rawBytes    int64    // encoded records before compression
	records     int64
	decoded     int64 // the pages' decoded bytes
	crawlTime   time.Duration
	fetchErrors int64
}

func (c *crawled) close() {
	if c.idx != nil {
		c.idx.Close()
	}
	if c.idxDB != nil {
		c.idxDB.Close()
	}
	if c.db != nil {
		c.db.Close()
	}
}

// indexSink stores each sealed batch into the index, as an indexer does
// after verifying it, and keeps the path's byte counts.
type indexSink struct {
	idx *index.Index
	mu  sync.Mutex
	seq uint64
	c   *crawled
	err error
}

func (s *indexSink) delivered() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.records
}

func (s *indexSink) Results(ctx context.Context, b crawl.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	recs, err := crawl.DecodeBatch(b.Data)
	if err != nil {
		s.err = fmt.Errorf("decoding batch %d: %w", s.seq, err)
		return nil
	}
	res, err := s.idx.PutBatch(ctx, index.Source{Node: "searcheval", Seq: s.seq}, b.Data)
	if err != nil {
		return err // the crawler retries the batch
	}
	if res.Rejected > 0 && s.err == nil {
		s.err = fmt.Errorf("batch %d: %d records rejected: %v", s.seq, res.Rejected, res.Errors)
	}
	s.c.batches = append(s.c.batches, b.Data)
	s.c.batchBytes += int64(len(b.Data))
	s.c.rawBytes += int64(b.RawBytes)
	s.c.records += int64(b.Records)
	for _, r := range recs {
		s.c.decoded += r.Size
		if r.Status >= 200 && r.Status < 300 && r.Change != crawl.ChangeGone {
			s.c.pages = append(s.c.pages, r.FinalURL)
		}
	}
	return nil
}

// siteRouter keeps the site's host local; links elsewhere are routed away
// and never fetched.
type siteRouter struct{ host string }

func (r siteRouter) Route(u *url.URL, _ netip.Addr) bool { return u.Host == r.host }

// noDNS answers every name with an address that is never dialled: only
// the site's own loopback address is fetched, and it needs no lookup.
type noDNS struct{}

func (noDNS) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("192.0.2.1")}, nil
}

// crawlSite crawls the site from its root with micra's crawler, politeness
// off (the server is the evaluation's own), and stores every batch in a new
// index. Both databases are in memory.
func crawlSite(ctx context.Context, base string, cfg Config) (*crawled, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	port, err := netip.ParseAddrPort(u.Host)
	if err != nil {
		return nil, fmt.Errorf("site %s: %w", base, err)
	}
	c := &crawled{}
	ok := false
	defer func() {
		if !ok {
			c.close()
		}
	}()
	if c.db, err = badger.Open(crawl.BadgerOptions("").WithInMemory(true).WithLogger(nil)); err != nil {
		return nil, err
	}
	if c.idxDB, err = badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil)); err != nil {
		return nil, err
	}
	if c.idx, err = index.New(c.idxDB, index.Logger(slog.New(slog.DiscardHandler))); err != nil {
		return nil, err
	}
	sink := &indexSink{idx: c.idx, c: c}
	conc := 8
	opts := []crawl.Option{
		crawl.AllowPrivateNetworks(port.Port()),
		crawl.Politeness(0, 0),
		crawl.HostConnections(conc),
		crawl.Workers(conc, runtime.GOMAXPROCS(0), 2*conc),
		crawl.MaxDepth(64),
		crawl.ExpectedURLs(1 << 17),
		crawl.Batching(256<<10, 2*time.Second), // the node's size: sealed by size while the crawl runs (by age only at its end), so that the ratio does not depend on the machine's load
		crawl.Routing(siteRouter{host: u.Host}),
		crawl.DNS(noDNS{}),
		crawl.Logger(logger(cfg.Log)),
	}
	if cfg.Keywords > 0 {
		opts = append(opts, crawl.MaxKeywords(cfg.Keywords))
	}
	cr, err := crawl.New(c.db, sink, opts...)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := cr.Submit(ctx, crawl.Request{Link: base + "/", Depth: crawl.DefaultDepth}); err != nil {
		cr.Close()
		return nil, err
	}
	// Wait until idle and every record made is delivered (a batch being
	// delivered when Close cancels it is kept for the next start, as a
	// node's is): bounded by the context and by a count of polls.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var st crawl.Stats
	for i := 0; ; i++ {
		st = cr.Stats()
		if st.Queued == 0 && st.InFlight == 0 && sink.delivered() == st.Records {
			break
		}
		if i > 360000 { // an hour of polls
			cr.Close()
			return nil, fmt.Errorf("crawl of %s not idle after an hour: %d queued", base, st.Queued)
		}
		select {
		case <-ctx.Done():
			cr.Close()
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
	if err := cr.Close(); err != nil { // seals and delivers the last batch
		return nil, err
	}
	c.crawlTime = time.Since(t0)
	c.fetchErrors = st.FetchErrors
	if sink.err != nil {
		return nil, sink.err
	}
	ok = true
	return c, nil
}

// logger writes the crawler's warnings to w; nil: nowhere.
func logger(w io.Writer) *slog.Logger {
	if w == nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// indexBytes is the size of the index's keys and values.
func indexBytes(db *badger.DB) (int64, error) {
	var n int64
	err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(index.KeyPrefix)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			n += int64(len(item.Key())) + item.ValueSize()
		}
		return nil
	})
	return n, err
}

// micraEngine answers queries from the index as the indexer's API does.
type micraEngine struct {
	idx index.Store
	any bool
}

func (e micraEngine) search(ctx context.Context, q string) ([]string, error) {
	res, err := e.idx.Search(ctx, index.Query{Text: q, Any: e.any, Limit: 10})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(res.Hits))
	for _, h := range res.Hits {
		u := h.FinalURL
		if u == "" {
			u = h.URL
		}
		out = append(out, u)
	}
	return out, nil
}
