package overlay

import (
	"context"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/routing"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkSwarm measures a loopback swarm: convergence (every node joined,
// its own subnet delegated, and the coordinator of that subnet known to it)
// and the latency of resolving a delegation that is not cached, with the
// requests, DHT lookups and messages each resolve costs. It is one
// measurement per run, not a b.N loop: run it with -benchtime=1x.
// MICRA_BENCH_NODES sets the swarm size (default 50, the goal's),
// MICRA_BENCH_RESOLVES the resolves (default 500).
//
//	go test ./overlay -run '^$' -bench BenchmarkSwarm -benchtime=1x
func BenchmarkSwarm(b *testing.B) {
	n := envInt("MICRA_BENCH_NODES", 50)
	resolves := envInt("MICRA_BENCH_RESOLVES", 500)
	tree := mustTree(b)
	start := time.Now()
	// Production-like upkeep rates: the test swarms' fast rates would
	// measure maintenance load, not resolves.
	opts := []Option{Maintenance(5*time.Second, 15*time.Second), Liveness(5*time.Second, time.Minute)}
	rg := loopback(b)
	nodes := make([]*node, n)
	for i := range n {
		nodes[i] = rg.node(i, opts...)
	}
	created := time.Since(start)
	joinSwarm(b, nodes)
	joined := time.Since(start)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var claimed atomic.Int64 // ns, summed over nodes
	for _, nd := range nodes {
		wg.Go(func() {
			t0 := time.Now()
			if _, err := nd.o.Delegate(ctx, "http://"+nd.addr.String()+"/", nd.addr); err != nil {
				b.Error(err)
			}
			claimed.Add(int64(time.Since(t0)))
			nd.o.Coordinator(ctx, tree.SmallestNonUnary(nd.addr))
		})
	}
	wg.Wait()
	converged := time.Since(start)

	// What one DHT lookup costs: queries sent (one request and one answer
	// each) by closest-peer lookups of the shard keys, as resolves make
	// them.
	var queries, lookupsRun int
	for i := range min(n, 20) {
		nd := nodes[i]
		key := nd.o.coord.rangeShard(tree.SmallestNonUnary(nodes[(i+1)%n].addr)).key(tree.ID())
		cctx, cancelEvents := context.WithCancel(ctx) // closes events
		qctx, events := routing.RegisterForQueryEvents(cctx)
		done := make(chan int)
		go func() {
			c := 0
			for ev := range events {
				if ev.Type == routing.SendingQuery {
					c++
				}
			}
			done <- c
		}()
		_, err := nd.o.DHT().GetClosestPeers(qctx, string(key[:]))
		cancelEvents()
		q := <-done
		if err != nil {
			b.Logf("lookup from node %d: %v", i, err)
			continue
		}
		queries += q
		lookupsRun++
	}
	if lookupsRun == 0 {
		b.Fatal("no lookup succeeded")
	}

	// Cold resolves: each node's first question about another shard pays
	// the DHT lookup for its coordinator.
	var cold []time.Duration
	for i, nd := range nodes {
		other := nodes[(i+1)%len(nodes)]
		t0 := time.Now()
		if _, _, err := nd.o.Resolve(ctx, other.addr); err != nil {
			b.Fatal(err)
		}
		cold = append(cold, time.Since(t0))
	}

	var reqs, lookups, redirects int64
	rng := rand.New(rand.NewPCG(1, 2))
	lat := make([]time.Duration, 0, resolves)
	b.ResetTimer()
	for range resolves {
		asker := nodes[rng.IntN(len(nodes))]
		target := nodes[rng.IntN(len(nodes))]
		asker.o.Invalidate(tree.Range(tree.SmallestNonUnary(target.addr)))
		s0 := asker.o.Stats()
		t0 := time.Now()
		d, ok, err := asker.o.Resolve(ctx, target.addr)
		lat = append(lat, time.Since(t0))
		s1 := asker.o.Stats()
		reqs += s1.Requests - s0.Requests
		lookups += s1.Lookups - s0.Lookups
		redirects += s1.Redirects - s0.Redirects
		if err != nil || !ok || d.Node != target.h.ID() {
			b.Fatalf("resolve: %v %v %v", d.Node, ok, err)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	slices.Sort(cold)
	q := func(l []time.Duration, p float64) float64 {
		return float64(l[int(p*float64(len(l)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(float64(n), "nodes")
	b.ReportMetric(created.Seconds(), "create-s")
	b.ReportMetric(joined.Seconds(), "join-s")
	b.ReportMetric(converged.Seconds(), "converge-s")
	b.ReportMetric(float64(claimed.Load())/float64(n)/float64(time.Millisecond), "own-claim-mean-ms")
	b.ReportMetric(float64(queries)/float64(lookupsRun), "dht-queries/lookup")
	b.ReportMetric(q(cold, 0.5), "cold-p50-ms")
	b.ReportMetric(q(lat, 0.5), "resolve-p50-ms")
	b.ReportMetric(q(lat, 0.9), "resolve-p90-ms")
	// Counted on the asker during each resolve; its background loops
	// (heartbeats, maintenance) may add a little. A request is one stream:
	// one message each way. A resolve served by the asker itself (it
	// coordinates the shard) costs none.
	b.ReportMetric(float64(reqs)/float64(resolves), "requests/resolve")
	b.ReportMetric(float64(lookups)/float64(resolves), "lookups/resolve")
	b.ReportMetric(float64(redirects)/float64(resolves), "redirects/resolve")
	// Messages on the wire per resolve: a request and its answer per
	// stream, a query and its answer per peer a DHT lookup asks.
	b.ReportMetric((2*float64(reqs)+2*float64(queries)/float64(lookupsRun)*float64(lookups))/float64(resolves), "messages/resolve")
}
