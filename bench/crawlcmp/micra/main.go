// Command micra is the micra side of the crawler comparison: it crawls one site
// from a start URL and prints a benchutil.Result. See ../main.go.
package main

import (
	"log"

	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"github.com/micra-net/micra/bench/internal/benchutil"
	"io"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/micra-net/micra/crawl"
)

// fileSink stores sealed batches in a file, as a node's outbox would.
// Links to other hosts stay in the crawler's outgoing store, as a node's
// do until it hands them on.
type fileSink struct {
	w                *bufio.Writer
	bytes, raw, recs atomic.Int64
}

func (s *fileSink) Results(_ context.Context, b crawl.Batch) error {
	s.bytes.Add(int64(len(b.Data)))
	s.raw.Add(int64(b.RawBytes))
	s.recs.Add(int64(b.Records))
	var n [binary.MaxVarintLen64]byte
	s.w.Write(n[:binary.PutUvarint(n[:], uint64(len(b.Data)))])
	_, err := s.w.Write(b.Data)
	return err
}

// localRouter keeps the start host local; everything else goes to "other
// nodes".
type localRouter struct{ host string }

func (r localRouter) Route(u *url.URL, _ netip.Addr) bool { return u.Host == r.host }

// farResolver answers every name with one address that is never dialled:
// other hosts' links are routed, not fetched, and no real DNS is asked.
type farResolver struct{}

func (farResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("192.0.2.1")}, nil
}

func crawlMicra(cc benchutil.Config) (benchutil.Result, error) {
	start, err := url.Parse(cc.Start)
	if err != nil {
		return benchutil.Result{}, err
	}
	port, err := strconv.ParseUint(start.Port(), 10, 16)
	if err != nil {
		return benchutil.Result{}, fmt.Errorf("start URL needs a port: %w", err)
	}
	db, err := badger.Open(crawl.BadgerOptions(filepath.Join(cc.WorkDir, "badger")).WithLogger(nil))
	if err != nil {
		return benchutil.Result{}, err
	}
	defer db.Close()
	bf, err := os.Create(filepath.Join(cc.WorkDir, "batches.bin"))
	if err != nil {
		return benchutil.Result{}, err
	}
	defer bf.Close()
	sink := &fileSink{w: bufio.NewWriter(bf)}
	c, err := crawl.New(db, sink,
		crawl.AllowPrivateNetworks(uint16(port)),
		crawl.Politeness(0, 0), // benchmark against our own server only
		crawl.HostConnections(cc.Concurrency),
		crawl.Workers(cc.Concurrency, runtime.GOMAXPROCS(0), 2*cc.Concurrency),
		crawl.MaxDepth(64),
		crawl.ExpectedURLs(1<<16),
		crawl.Routing(localRouter{host: start.Host}),
		crawl.DNS(farResolver{}),
		crawl.Logger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))),
	)
	if err != nil {
		return benchutil.Result{}, err
	}
	stopProf, err := benchutil.StartProfile(cc.Profile)
	if err != nil {
		return benchutil.Result{}, err
	}
	t0 := time.Now()
	if err := c.Submit(context.Background(), crawl.Request{Link: cc.Start, Depth: crawl.DefaultDepth}); err != nil {
		return benchutil.Result{}, err
	}
	var st crawl.Stats
	for {
		time.Sleep(5 * time.Millisecond)
		st = c.Stats()
		if st.Queued == 0 && st.InFlight == 0 {
			break
		}
	}
	elapsed := time.Since(t0)
	stopProf()
	if err := c.Close(); err != nil { // seals the last batch
		return benchutil.Result{}, err
	}
	if err := sink.w.Flush(); err != nil {
		return benchutil.Result{}, err
	}
	r := benchutil.Result{
		Crawler: "micra", Pages: st.Fetched + st.NotModified, Seconds: elapsed.Seconds(), PeakRSS: benchutil.PeakRSS(), RSSDetail: benchutil.RSSDetail(),
		WireBytes: st.WireBytes, RecordBytes: sink.bytes.Load(), RawRecBytes: sink.raw.Load(), Records: sink.recs.Load(),
	}
	// After the measurement: read the batches back for the URL list.
	urls, size, err := batchURLs(bf.Name())
	if err != nil {
		return benchutil.Result{}, err
	}
	r.BodyBytes = size
	return r, benchutil.WriteURLs(cc.URLsFile, urls)
}

// batchURLs decodes the stored batches and returns the final URLs of the
// records and the sum of their body sizes.
func batchURLs(path string) ([]string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var urls []string
	var size int64
	for {
		n, err := binary.ReadUvarint(br)
		if err == io.EOF {
			return urls, size, nil
		}
		if err != nil {
			return nil, 0, err
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(br, data); err != nil {
			return nil, 0, err
		}
		recs, err := crawl.DecodeBatch(data)
		if err != nil {
			return nil, 0, err
		}
		for _, rec := range recs {
			if rec.Status >= 200 && rec.Status < 300 {
				urls = append(urls, rec.FinalURL)
				size += rec.Size
			}
		}
	}
}

func main() {
	log.SetFlags(0)
	if err := benchutil.Main(crawlMicra); err != nil {
		log.Fatal(err)
	}
}
