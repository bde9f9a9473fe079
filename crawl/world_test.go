package crawl_test

import (
	"context"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/internal/world/worldtest"
)

// worldSink collects records and counts compressed batch bytes.
type worldSink struct {
	mu         sync.Mutex
	records    []crawl.Record
	batchBytes int64
	forwards   int
}

func (s *worldSink) Results(_ context.Context, b crawl.Batch) error {
	recs, err := crawl.DecodeBatch(b.Data)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records = append(s.records, recs...)
	s.batchBytes += int64(len(b.Data))
	return nil
}

func (s *worldSink) Forward(_ context.Context, reqs []crawl.Request) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forwards += len(reqs)
	return nil
}

// TestCrawlWorld crawls an emulated Internet, hostile sites included, from
// one node's own address (every URL local: no Router), and checks what the sites saw: politeness (one
// connection per host, the minimum delay, robots.txt), that the hostile
// sites did not stop the crawl nor blow its memory, and the result ratio.
func TestCrawlWorld(t *testing.T) {
	p := worldtest.Params(7, 40, 3)
	p.Hostile = 5
	if os.Getenv("MICRA_LONG") != "" {
		// Scenario 5 of issue 9 at scale: a quarter of the sites hostile,
		// each kind ten times.
		p = worldtest.Params(7, 200, 3)
		p.Hostile = 50
	}
	p.MeanPages, p.MaxPages = 12, 60
	heapBefore, rssBefore := memNow()
	const scale = 0.02
	run := worldtest.Start(t, p, world.TimeScale(scale), world.Hostile(true), world.HostileLimits(30*time.Second, 64<<20))
	w := run.World()
	node := w.Nodes()[0].Addr
	resolver, err := run.Resolver(node)
	if err != nil {
		t.Fatal(err)
	}
	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })

	const minDelay = 40 * time.Millisecond
	sink := &worldSink{}
	c, err := crawl.New(db, sink,
		crawl.SourceAddr(node), crawl.DNS(resolver), crawl.AllowPrivateNetworks(uint16(run.Port())),
		crawl.Politeness(minDelay, 100*time.Millisecond), crawl.MaxDepth(2),
		crawl.MaxBodySize(1<<20, 2<<20), crawl.Timeouts(2*time.Second, 3*time.Second, 4*time.Second),
		crawl.Workers(16, 2, 32), crawl.Batching(64<<10, 100*time.Millisecond),
		crawl.Logger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	var seeds []crawl.Request
	for _, s := range w.Sites() {
		seeds = append(seeds, crawl.Request{Link: run.URL(s), Depth: crawl.DefaultDepth})
	}
	var peakHeap uint64
	sample := func() {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		peakHeap = max(peakHeap, m.HeapInuse)
	}
	if err := c.Submit(t.Context(), seeds...); err != nil {
		t.Fatal(err)
	}
	limit := 3 * time.Minute
	if p.Hostile > 5 {
		limit = 10 * time.Minute
	}
	deadline := time.Now().Add(limit)
	idleSince := time.Time{}
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		sample()
		st := c.Stats()
		if st.Queued == 0 && st.InFlight == 0 && st.Fetched > 0 {
			if idleSince.IsZero() {
				idleSince = time.Now()
			} else if time.Since(idleSince) > time.Second {
				break
			}
		} else {
			idleSince = time.Time{}
		}
	}
	st := c.Stats()
	if st.Queued != 0 || st.InFlight != 0 {
		t.Fatalf("the crawl did not finish in %v: %+v", limit, st)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	byURL := map[string]crawl.Record{}
	sink.mu.Lock()
	for _, r := range sink.records {
		byURL[r.URL] = r
	}
	sink.mu.Unlock()

	// Every normal site was crawled, the hostile ones notwithstanding.
	missing := 0
	for _, s := range w.Sites() {
		if s.Hostile != world.NotHostile || s.Robots == world.RobotsError || s.Flaky {
			continue
		}
		if _, ok := byURL[run.URL(s)]; !ok {
			missing++
			t.Errorf("home page of %s (%s) has no record", s.Name, s.Kind)
		}
	}

	// What each site saw from the node.
	for _, s := range w.Sites() {
		cs := run.Counters(s)
		src, ok := cs.Sources[node]
		if !ok {
			continue
		}
		if src.Disallowed != 0 {
			t.Errorf("%s: %d requests for URLs its robots.txt forbids", s.Name, src.Disallowed)
		}
		// One request at a time per host and server address; a site with
		// an alias name (www.x redirecting to x) may also hold the alias'
		// idle keep-alive connection.
		if limit := 1 + min(len(s.Aliases), 1); src.MaxConns > limit {
			t.Errorf("%s: %d connections at once from the node, want at most %d", s.Name, src.MaxConns, limit)
		}
		// The gap is reported unscaled; the crawler waits at least
		// minDelay of real time, a lower bound that load cannot break.
		if gap := time.Duration(float64(src.MinGap) * scale); src.Requests > 1 && gap < minDelay*9/10 {
			t.Errorf("%s: requests %v apart, want at least %v", s.Name, gap, minDelay)
		}
		switch s.Hostile {
		case world.LinkTrap:
			// 20 new links a page, two levels deep: 421 pages at most.
			if src.Requests > 421+2 {
				t.Errorf("link trap: %d requests", src.Requests)
			}
		case world.RedirectLoop:
			if src.Requests > 100 {
				t.Errorf("redirect loop: %d requests", src.Requests)
			}
		}
	}
	if peakHeap > 256<<20 {
		t.Errorf("peak heap %d MiB, bounded at 256", peakHeap>>20)
	}
	for _, r := range sink.records {
		if r.Size > 2<<20 {
			t.Errorf("%s: %d decoded bytes kept past the 2 MiB cap", r.URL, r.Size)
		}
	}
	// The result ratio over the normal sites' records: a link trap's
	// endless tiny pages say nothing about the Web.
	hostile := map[string]bool{}
	for _, s := range w.Sites() {
		if s.Hostile != world.NotHostile {
			hostile[s.Name] = true
		}
	}
	var bodies, links, kws, normal int64
	var normalRecs []crawl.Record
	for _, r := range sink.records {
		if u, err := url.Parse(r.URL); err == nil && hostile[u.Hostname()] {
			continue
		}
		normal++
		normalRecs = append(normalRecs, r)
		bodies += r.Size
		links += int64(len(r.Links))
		kws += int64(len(r.Keywords))
	}
	// Re-batched as the crawler batches by default (256 KiB raw).
	var compressed int64
	for len(normalRecs) > 0 {
		n, raw := 0, 0
		for n < len(normalRecs) {
			one, err := crawl.EncodeBatch(normalRecs[n : n+1])
			if err != nil {
				t.Fatal(err)
			}
			if n > 0 && raw+one.RawBytes > 256<<10 {
				break
			}
			raw += one.RawBytes
			n++
		}
		b, err := crawl.EncodeBatch(normalRecs[:n])
		if err != nil {
			t.Fatal(err)
		}
		compressed += int64(len(b.Data))
		normalRecs = normalRecs[n:]
	}
	if testing.Verbose() {
		byType := map[crawl.DocType][2]int64{}
		for _, r := range sink.records {
			v := byType[r.Type]
			byType[r.Type] = [2]int64{v[0] + 1, v[1] + r.Size}
		}
		for k, v := range byType {
			t.Logf("%s: %d records, %d bytes", k, v[0], v[1])
		}
	}
	ratio := float64(compressed) / float64(max(bodies, 1))
	t.Logf("%d sites (%d missing), %d records, %d fetched, %d on the wire, batches %d bytes; peak heap %d MiB",
		len(w.Sites()), missing, len(sink.records), st.Fetched, st.WireBytes, sink.batchBytes, peakHeap>>20)
	heapAfter, rssAfter := memNow()
	t.Logf("%d hostile sites; heap in use %d → %d MiB (peak %d), RSS %d → %d MiB",
		p.Hostile, heapBefore>>20, heapAfter>>20, peakHeap>>20, rssBefore>>20, rssAfter>>20)
	t.Logf("normal sites: %d records (%.1f links, %.1f keywords each), bodies %d bytes, records %d bytes compressed: result ratio 1/%.1f",
		normal, float64(links)/float64(normal), float64(kws)/float64(normal), bodies, compressed, 1/ratio)
	// Goal (issue 6): 1/25 or better; on the PostgreSQL manual it is 1/28
	// (bench/README.md).
	if ratio > 1.0/25 {
		t.Errorf("result ratio %.3f: records are not compact", ratio)
	}
}

// memNow returns the heap in use and the process's resident set (Linux;
// 0 elsewhere), in bytes.
func memNow() (heap, rss uint64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return m.HeapInuse, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			rss = kb << 10
		}
	}
	return m.HeapInuse, rss
}
