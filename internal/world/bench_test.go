package world_test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/internal/world/worldtest"
)

// BenchmarkServe measures what one process serves: a world of 5,000 sites
// (one listener each) at time scale 0.1 with latency injection and body
// pacing on, under 256 concurrent clients spread over 16 node addresses.
// Each client fetches a burst of 1 to 8 pages of a random site over one
// kept-alive connection, as a crawler does, then moves on. The clients
// run in the same process and share its CPUs. It reports requests per
// second, mean latency per request (wall, scaled), sites hit and served.
//
//	go test -run XXX -bench Serve -benchtime 20000x ./internal/world/
func BenchmarkServe(b *testing.B) {
	const (
		sites   = 5000
		nodes   = 16
		workers = 256
		scale   = 0.1
	)
	p := worldtest.Params(1, sites, nodes)
	p.Hostile = 0
	w := worldtest.Generate(b, p)
	run, err := w.Start(b.Context(), world.Port(0), world.TimeScale(scale))
	if err != nil {
		b.Fatal(err)
	}
	defer run.Close()
	all := w.Sites()
	type target struct {
		addr  netip.Addr
		host  string
		paths []string
	}
	targets := make([]target, len(all))
	for i, s := range all {
		t := target{addr: s.Addrs[0], host: s.Name}
		for _, pg := range w.Pages(s)[:min(s.Pages, 8)] {
			t.paths = append(t.paths, pg.Path)
		}
		targets[i] = t
	}
	clients := make([]*http.Client, nodes)
	for i, n := range w.NodeAddrs() {
		d, err := run.Dialer(n)
		if err != nil {
			b.Fatal(err)
		}
		clients[i] = &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConns: 64, MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Second}}
	}
	var (
		next    atomic.Int64
		lat     atomic.Int64
		errs    atomic.Int64
		hitMu   sync.Mutex
		hit     = map[string]bool{}
		wg      sync.WaitGroup
		firstEr atomic.Value
	)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for k := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(k), 1))
			c := clients[k%nodes]
			for next.Load() < int64(b.N) {
				t := targets[r.IntN(len(targets))]
				hitMu.Lock()
				hit[t.host] = true
				hitMu.Unlock()
				burst := 1 + r.IntN(len(t.paths))
				for j := 0; j < burst && next.Add(1) <= int64(b.N); j++ {
					url := fmt.Sprintf("http://%s:%d%s", t.addr, run.Port(), t.paths[j])
					req, _ := http.NewRequest(http.MethodGet, url, nil)
					req.Host = t.host
					t0 := time.Now()
					resp, err := c.Do(req)
					if err != nil {
						errs.Add(1)
						firstEr.CompareAndSwap(nil, err)
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					lat.Add(int64(time.Since(t0)))
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	for _, c := range clients {
		c.CloseIdleConnections()
	}
	if e := errs.Load(); e > 0 {
		b.Fatalf("%d requests failed, first: %v", e, firstEr.Load())
	}
	tot := run.Totals()
	b.ReportMetric(float64(b.N)/el.Seconds(), "req/s")
	b.ReportMetric(float64(lat.Load())/float64(b.N)/1e6, "ms/req")
	b.ReportMetric(float64(len(hit)), "sites-hit")
	b.ReportMetric(float64(sites), "sites")
	b.ReportMetric(float64(tot.Bytes)/el.Seconds()/1e6, "MB/s")
}
