package overlay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/micra-net/micra/bootstrap"
	"github.com/micra-net/micra/subnet"
)

// testTree builds a hierarchy inside 127/8: IANA's block, four /16
// allocations (127.0-3.0.0/16, organisations org-0..org-3) and 256 /24
// assignments in each, of the /16's organisation.
var testTree = sync.OnceValues(func() (*subnet.Tree, error) {
	var iana, rir strings.Builder
	iana.WriteString("2|iana|20240101|1|19700101|20240101|+0000\n")
	iana.WriteString("iana||ipv4|127.0.0.0|16777216|19810901|arin\n")
	rir.WriteString("2.3|arin|20240101|1028|19700101|20240101|+0000\n")
	for a := range 4 {
		fmt.Fprintf(&rir, "arin|US|ipv4|127.%d.0.0|65536|20200101|allocated|org-%d\n", a, a)
		for b := range 256 {
			fmt.Fprintf(&rir, "arin|US|ipv4|127.%d.%d.0|256|20200101|assigned|org-%d\n", a, b, a)
		}
	}
	bld, err := subnet.NewBuilder(subnet.Strict())
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	if _, err := bld.Add(ctx, "iana", strings.NewReader(iana.String()), subnet.FormatDelegated); err != nil {
		return nil, err
	}
	if _, err := bld.Add(ctx, "arin", strings.NewReader(rir.String()), subnet.FormatDelegated); err != nil {
		return nil, err
	}
	t, _, err := bld.Build()
	return t, err
})

func mustTree(t testing.TB) *subnet.Tree {
	t.Helper()
	tr, err := testTree()
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func memDB(t testing.TB) *badger.DB {
	t.Helper()
	opts := badger.DefaultOptions("").WithInMemory(true).WithLogger(nil).
		WithMemTableSize(4 << 20).WithNumMemtables(2).WithBlockCacheSize(1 << 20).WithIndexCacheSize(1 << 20).
		WithNumCompactors(2).WithValueThreshold(1 << 10)
	db, err := badger.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// requesterDelegator is the deterministic test procedure: the subnet goes to
// the node that asked, unless excluded; then to the smallest peer id among
// the coordinator's live peers that is not excluded. It counts its runs.
type requesterDelegator struct {
	mu   sync.Mutex
	runs map[subnet.ID]int
}

func (d *requesterDelegator) Delegate(ctx context.Context, req DelegateRequest, env DelegationEnv) (peer.ID, error) {
	d.mu.Lock()
	if d.runs == nil {
		d.runs = map[subnet.ID]int{}
	}
	d.runs[req.Subnet]++
	d.mu.Unlock()
	if !slices.Contains(req.Exclude, req.From) {
		return req.From, nil
	}
	for _, p := range env.Peers() {
		if !slices.Contains(req.Exclude, p.ID) {
			return p.ID, nil
		}
	}
	return "", ErrNoCandidate
}

// fixedProber answers every probe with rtt.
type fixedProber struct{ rtt time.Duration }

func (p fixedProber) Probe(ctx context.Context, url string) (time.Duration, error) {
	if strings.Contains(url, "fail") {
		return 0, fmt.Errorf("connection refused")
	}
	return p.rtt, nil
}

// node is one member of a test swarm.
type node struct {
	h    host.Host
	o    *Overlay
	addr netip.Addr
	db   *badger.DB
	del  *requesterDelegator
	once sync.Once
}

// stop closes the node's overlay and host (the database is closed by
// cleanup).
func (n *node) stop() {
	n.once.Do(func() {
		n.o.Close()
		n.h.Close()
	})
}

// nodeAddr spreads nodes over the test tree's /16 allocations: node i
// listens on 127.(i%4).(i/4+1).1.
func nodeAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, byte(i % 4), byte(i/4 + 1), 1})
}

// swarmOpts are overlay options fast enough for tests.
func swarmOpts() []Option {
	return []Option{
		DiversityLimits(64, 1024), // every test peer shares 127.x.0.0/16 groups
		Maintenance(500*time.Millisecond, 2*time.Second),
		Liveness(200*time.Millisecond, 4*time.Second), // generous: -race on two cores is slow
		Announce(30*time.Second, false),
		PublishRecords(false),
	}
}

func newNode(t testing.TB, i int, extra ...Option) *node {
	t.Helper()
	return newNodeAt(t, nodeAddr(i), extra...)
}

// newNodeAt starts a node listening on a.
func newNodeAt(t testing.TB, a netip.Addr, extra ...Option) *node {
	t.Helper()
	return newNodeWith(t, a, os.Getenv("MICRA_TCP_ONLY") != "", extra...)
}

// newNodeWith starts a node listening on a, with TCP only when tcpOnly
// (its dials then leave from a, which QUIC's do not on loopback).
func newNodeWith(t testing.TB, a netip.Addr, tcpOnly bool, extra ...Option) *node {
	t.Helper()
	sk, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	hopts := []HostOption{BindAddress(a, 0), Reachability(network.ReachabilityPublic), NoRelayService(), ConnLimits(200, 400)}
	if tcpOnly {
		hopts = append(hopts, ListenAddrs(ma.StringCast("/ip4/"+a.String()+"/tcp/0")))
	}
	h, err := NewHost(sk, hopts...)
	if err != nil {
		t.Fatal(err)
	}
	n := &node{h: h, addr: a, db: memDB(t), del: &requesterDelegator{}}
	opts := append(append(swarmOpts(), WithDelegator(n.del), WithProber(fixedProber{10 * time.Millisecond})), extra...)
	if lg := testLogger(); lg != nil {
		opts = append(opts, Logger(lg))
	}
	n.o, err = New(h, mustTree(t), n.db, opts...)
	if err != nil {
		h.Close()
		t.Fatal(err)
	}
	t.Cleanup(n.stop)
	return n
}

// newSwarm starts n nodes; every node joins through node 0.
func newSwarm(t testing.TB, n int, extra ...Option) []*node {
	t.Helper()
	nodes := make([]*node, n)
	t0 := time.Now()
	for i := range n {
		nodes[i] = newNode(t, i, extra...)
	}
	if testing.Verbose() {
		t.Logf("swarm: %d nodes created in %v", n, time.Since(t0))
	}
	// Runs before the nodes' own cleanups close them: a failed swarm test
	// leaves the stacks of the live swarm for diagnosis.
	t.Cleanup(func() {
		if t.Failed() {
			dumpGoroutines(t)
		}
	})
	joinSwarm(t, nodes)
	return nodes
}

// dumpGoroutines writes every goroutine's stack to a file in
// $MICRA_ARTIFACTS (CI keeps it) or the system's temporary directory, and
// logs where.
func dumpGoroutines(t testing.TB) {
	dir := os.Getenv("MICRA_ARTIFACTS")
	if dir == "" {
		dir = os.TempDir()
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	f, err := os.CreateTemp(dir, name+"-goroutines-*.txt")
	if err != nil {
		t.Logf("goroutine dump: %v", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("goroutine").WriteTo(f, 2); err != nil {
		t.Logf("goroutine dump: %v", err)
		return
	}
	t.Logf("goroutines at the failure: %s", f.Name())
}

// joinSwarm has every node join through nodes[0] and bootstrap.
func joinSwarm(t testing.TB, nodes []*node) {
	t.Helper()
	t0 := time.Now()
	n := len(nodes)
	defer func() {
		if testing.Verbose() {
			t.Logf("swarm: joined and bootstrapped in %v", time.Since(t0))
		}
	}()
	boot := []peer.AddrInfo{{ID: nodes[0].h.ID(), Addrs: nodes[0].h.Addrs()}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, nd := range nodes[1:] {
		wg.Go(func() {
			if _, err := bootstrap.Join(ctx, nd.h, nd.h.ID(), boot, bootstrap.Backoff(50*time.Millisecond, 200*time.Millisecond)); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if testing.Verbose() {
		t.Logf("swarm: joined node 0 at %v", time.Since(t0))
	}
	// One Kademlia join: each node looks itself up through node 0.
	// On a loaded machine a fresh connection to node 0 is sometimes gone
	// again by then (the node has no peer left to bootstrap from): such a
	// node joins again, at most twice more.
	for _, nd := range nodes {
		wg.Go(func() {
			for attempt := 0; ; attempt++ {
				err := nd.o.Bootstrap(ctx)
				if err == nil || !errors.Is(err, ErrNoPeers) || attempt == 2 {
					if err != nil {
						t.Logf("bootstrap: %v", err)
					}
					return
				}
				if _, err := bootstrap.Join(ctx, nd.h, nd.h.ID(), boot, bootstrap.Backoff(50*time.Millisecond, 200*time.Millisecond)); err != nil {
					t.Logf("rejoin: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func testLogger() *slog.Logger {
	if os.Getenv("MICRA_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// eventually polls f every 50 ms until it returns nil or d passes.
func eventually(t testing.TB, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not reached within %v: %v", d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
