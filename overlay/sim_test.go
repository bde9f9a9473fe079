package overlay

import (
	"context"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p"
	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/x/simlibp2p"
	"github.com/marcopolo/simnet"

	"github.com/micra-net/micra/bootstrap"
	"github.com/micra-net/micra/subnet"
)

// simLatency is a fixed one-way link latency per pair of addresses, 2 to
// 41 ms, the same in both directions.
func simLatency(p *simnet.Packet) time.Duration {
	a, b := p.From.(*net.UDPAddr).IP.String(), p.To.(*net.UDPAddr).IP.String()
	if a > b {
		a, b = b, a
	}
	h := fnv.New32a()
	h.Write([]byte(a + "|" + b))
	return time.Duration(2+h.Sum32()%40) * time.Millisecond
}

// newSimNode starts an overlay node on a host whose only transport is QUIC
// over nw (simlibp2p's): packets are delivered by the simulated network on
// the bubble's virtual clock, never by the kernel.
func newSimNode(t *testing.T, nw *simnet.Simnet, tree *subnet.Tree, a netip.Addr) *node {
	t.Helper()
	link := simnet.NodeBiDiLinkSettings{
		Downlink: simnet.LinkSettings{BitsPerSecond: 50 * simlibp2p.OneMbps},
		Uplink:   simnet.LinkSettings{BitsPerSecond: 50 * simlibp2p.OneMbps},
	}
	h, err := libp2p.New(
		libp2p.ListenAddrStrings(fmt.Sprintf("/ip4/%s/udp/4001/quic-v1", a)),
		simlibp2p.QUICSimnet(nw, link),
		libp2p.DisableIdentifyAddressDiscovery(), // stalls synctest (simlibp2p's note)
		libp2p.ResourceManager(&network.NullResourceManager{}),
	)
	if err != nil {
		t.Fatal(err)
	}
	n := &node{h: h, addr: a, db: smallDB(t), del: &requesterDelegator{}}
	opts := []Option{
		DiversityLimits(64, 1024),
		// Production-like upkeep: the run lasts a few virtual seconds.
		Maintenance(5*time.Second, 15*time.Second),
		Liveness(5*time.Second, time.Minute),
		Announce(time.Minute, false),
		PublishRecords(false),
		WithDelegator(n.del), WithProber(fixedProber{10 * time.Millisecond}),
		OwnAddress(a),
		Logger(testLogger()),
	}
	n.o, err = New(h, tree, n.db, opts...)
	if err != nil {
		h.Close()
		t.Fatal(err)
	}
	t.Cleanup(n.stop)
	return n
}

// smallDB is memDB with the smallest tables badger accepts: 200 nodes share
// the test process.
func smallDB(t testing.TB) *badger.DB {
	t.Helper()
	opts := badger.DefaultOptions("").WithInMemory(true).WithLogger(nil).
		WithMemTableSize(1 << 20).WithNumMemtables(1).WithBlockCacheSize(256 << 10).WithIndexCacheSize(256 << 10).
		WithNumCompactors(2).WithValueThreshold(1 << 10).WithBaseTableSize(1 << 20).WithValueLogFileSize(1 << 20)
	db, err := badger.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestSimSwarm runs a swarm on simlibp2p's simulated network under
// testing/synctest: QUIC between every pair of nodes with a per-pair link
// latency (2–41 ms one way), on virtual time, so that the run measures the
// protocol's round trips rather than the machine's two cores. Every node
// joins through node 0 and claims its own subnet; then the shard
// coordinators agree with the global truth (the XOR-closest node), every
// node's own subnet resolves to it from another node, and concurrent
// delegate requests for one empty subnet from every node yield one
// decision. 30 nodes; MICRA_LONG=1: 200.
func TestSimSwarm(t *testing.T) {
	if raceEnabled {
		t.Skip("testing/synctest crashes the race runtime (go.dev/issue/78156); see race_on_test.go")
	}
	size := 30
	if os.Getenv("MICRA_LONG") != "" {
		size = 200
	}
	tree := mustTree(t)
	synctest.Test(t, func(t *testing.T) {
		var packets atomic.Int64 // every packet the simulated network carries
		nw := &simnet.Simnet{LatencyFunc: func(p *simnet.Packet) time.Duration { packets.Add(1); return simLatency(p) }}
		nw.Start()
		t.Cleanup(func() { nw.Close() }) // after the nodes' cleanups (LIFO)
		nodes := make([]*node, size)
		for i := range size {
			nodes[i] = newSimNode(t, nw, tree, nodeAddr(i))
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute) // virtual
		defer cancel()
		t0 := time.Now()

		boot := []peer.AddrInfo{{ID: nodes[0].h.ID(), Addrs: nodes[0].h.Addrs()}}
		var wg sync.WaitGroup
		for _, n := range nodes[1:] {
			wg.Go(func() {
				if _, err := bootstrap.Join(ctx, n.h, n.h.ID(), boot); err != nil {
					t.Errorf("join %s: %v", n.addr, err)
				}
			})
		}
		wg.Wait()
		joined := time.Since(t0)
		for _, n := range nodes {
			wg.Go(func() {
				if err := n.o.Bootstrap(ctx); err != nil {
					t.Errorf("bootstrap %s: %v", n.addr, err)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		// Converged when every node's own claim succeeded and it knows its
		// shard's coordinator.
		for _, n := range nodes {
			wg.Go(func() {
				for i := 0; !n.o.ownDone.Load() && i < 60; i++ {
					time.Sleep(time.Second) // the heartbeats retry failed claims
				}
				if !n.o.ownDone.Load() {
					t.Errorf("node %s: own subnet never claimed", n.addr)
				}
				n.o.Coordinator(ctx, tree.SmallestNonUnary(n.addr))
			})
		}
		wg.Wait()
		converged := time.Since(t0)
		t.Logf("%d nodes: joined node 0 in %v, converged in %v (virtual), %d packets", size, joined, converged, packets.Load())

		// Coordinators agree, with each other and with the truth: the
		// node closest to the shard key.
		ids := make([]peer.ID, size)
		for i, n := range nodes {
			ids[i] = n.h.ID()
		}
		shards := map[[32]byte]netip.Addr{}
		for i := range 4 {
			a := netip.AddrFrom4([4]byte{127, byte(i), 250, 9})
			shards[nodes[0].o.coord.rangeShard(tree.SmallestNonUnary(a)).key(tree.ID())] = a
		}
		// Every node looks each shard up afresh, all at once: the virtual
		// clock then advances by a few lookups, not 4 × size of them (the
		// swarm's upkeep runs on the same clock and costs real CPU).
		for key, a := range shards {
			want := kb.SortClosestPeers(ids, kb.ConvertKey(string(key[:])))[0]
			for _, n := range nodes {
				wg.Go(func() {
					if got := n.o.coord.closestPeers(ctx, key, true)[0]; got != want {
						t.Errorf("shard of %s: node %s names %s, the closest node is %s", a, n.addr, got, want)
					}
				})
			}
		}
		wg.Wait()

		// Every node's own subnet is delegated to it, as another node
		// resolves it.
		for i, n := range nodes {
			other := nodes[(i+7)%size]
			wg.Go(func() {
				d, ok, err := other.o.Resolve(ctx, n.addr)
				if err != nil || !ok || d.Node != n.h.ID() || !d.Own {
					t.Errorf("node %s resolves %s to %s (own %v), %v, %v", other.addr, n.addr, d.Node, d.Own, ok, err)
				}
			})
		}
		wg.Wait()
		t.Logf("checked agreement and own subnets at %v (virtual)", time.Since(t0))

		// Every node asks at once for the same empty subnet: one decision.
		target := netip.MustParseAddr("127.1.250.9")
		id := tree.SmallestNonUnary(target)
		answers := make([]Delegation, size)
		for i, n := range nodes {
			wg.Go(func() {
				d, err := n.o.Delegate(ctx, "http://"+target.String()+"/", target)
				if err != nil {
					t.Errorf("delegate from %s: %v", n.addr, err)
				}
				answers[i] = d
			})
		}
		wg.Wait()
		runs := 0
		for i, n := range nodes {
			n.del.mu.Lock()
			runs += n.del.runs[id]
			n.del.mu.Unlock()
			if answers[i].Node != answers[0].Node || answers[i].Seq != answers[0].Seq || answers[i].Epoch != answers[0].Epoch {
				t.Errorf("two decisions for %s: %s and %s", target, answers[0].Node, answers[i].Node)
			}
		}
		if runs != 1 {
			t.Errorf("the delegation procedure ran %d times for one subnet", runs)
		}
		t.Logf("done at %v (virtual)", time.Since(t0))
	})
}
