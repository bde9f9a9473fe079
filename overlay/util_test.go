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
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/bootstrap"
	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/internal/p2ptest"
	"github.com/micra-net/micra/subnet"
)

func mustTree(t testing.TB) *subnet.Tree { return p2ptest.Tree(t) }

func memDB(t testing.TB) *badger.DB { return p2ptest.DB(t) }

// eventually is p2ptest.WaitFor: virtual time inside a synctest bubble.
func eventually(t testing.TB, d time.Duration, f func() error) {
	t.Helper()
	p2ptest.WaitFor(t, d, f)
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

// nodeAddr is p2ptest.Addr: node i listens on 127.(i%4).(i/4+1).1.
func nodeAddr(i int) netip.Addr { return p2ptest.Addr(i) }

// swarmOpts are overlay options for tests: upkeep a few times faster than
// a volunteer's, so that a test covers several rounds of it in a few
// virtual seconds, and private networks allowed (the test tree and its
// sites are in 127/8).
func swarmOpts() []Option {
	return []Option{
		Egress(egress.Policy{AllowPrivate: true}),
		DiversityLimits(64, 1024), // every test peer shares 127.x.0.0/16 groups
		Maintenance(time.Second, 3*time.Second),
		Liveness(time.Second, swarmLiveness),
		Announce(30 * time.Second),
		PublishRecords(false, false),
	}
}

// swarmLiveness is swarmOpts' liveness timeout.
const swarmLiveness = 5 * time.Second

// rig makes the nodes of one test: on a simulated network in virtual time
// (simulate), or on real loopback hosts (loopback) where the transport
// itself is the subject.
type rig struct {
	t    testing.TB
	net  *p2ptest.Net // nil: loopback
	tree *subnet.Tree // the nodes' hierarchy; nil: mustTree's
}

// simulate runs f in a testing/synctest bubble with a simulated network:
// every timeout, heartbeat and liveness expiry of the nodes f starts runs
// on the bubble's virtual clock.
func simulate(t *testing.T, f func(t *testing.T, r *rig)) {
	p2ptest.Bubble(t, func(t *testing.T) {
		f(t, &rig{t: t, net: p2ptest.NewNet(t)})
	})
}

// loopback makes nodes on real loopback hosts (TCP and QUIC).
func loopback(t testing.TB) *rig { return &rig{t: t} }

// db opens a node's database. In virtual time it is p2ptest.SimDB, without
// compaction: badger's compactors wake every 50 ms of the bubble's clock,
// which in a test of idle hours is most of its CPU.
func (r *rig) db() *badger.DB {
	if r.net != nil {
		return p2ptest.SimDB(r.t)
	}
	return memDB(r.t)
}

func (r *rig) node(i int, extra ...Option) *node {
	r.t.Helper()
	return r.nodeWith(nodeAddr(i), nil, nil, extra...)
}

// nodeWith starts a node at a with identity sk (fresh when nil) whose host
// consults gater (when not nil), with swarmOpts, the requester delegator,
// a fixed 10 ms prober and extra.
func (r *rig) nodeWith(a netip.Addr, sk crypto.PrivKey, gater connmgr.ConnectionGater, extra ...Option) *node {
	t := r.t
	t.Helper()
	var h host.Host
	if r.net != nil {
		var hopts []libp2p.Option
		if gater != nil {
			hopts = append(hopts, libp2p.ConnectionGater(gater))
		}
		h = r.net.Host(t, sk, a, hopts...)
	} else {
		if sk == nil {
			var err error
			if sk, _, err = crypto.GenerateEd25519Key(nil); err != nil {
				t.Fatal(err)
			}
		}
		hopts := []HostOption{BindAddress(a, 0), Reachability(network.ReachabilityPublic), NoRelayService(), ConnLimits(200, 400)}
		if gater != nil {
			hopts = append(hopts, ConnectionGater(gater))
		}
		var err error
		if h, err = NewHost(sk, hopts...); err != nil {
			t.Fatal(err)
		}
	}
	n := &node{h: h, addr: a, db: r.db(), del: &requesterDelegator{}}
	opts := append(append(swarmOpts(), WithDelegator(n.del), WithProber(fixedProber{10 * time.Millisecond})), extra...)
	if lg := testLogger(); lg != nil {
		opts = append(opts, Logger(lg))
	}
	var err error
	tree := r.tree
	if tree == nil {
		tree = mustTree(t)
	}
	if n.o, err = New(h, tree, n.db, opts...); err != nil {
		h.Close()
		t.Fatal(err)
	}
	t.Cleanup(n.stop)
	return n
}

// swarm starts n nodes; every node joins through node 0.
func (r *rig) swarm(n int, extra ...Option) []*node {
	t := r.t
	t.Helper()
	nodes := make([]*node, n)
	for i := range n {
		nodes[i] = r.node(i, extra...)
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
	n := len(nodes)
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
	// One Kademlia join: each node looks itself up through node 0. A
	// node whose connection to node 0 is gone again by then (no peer left
	// to bootstrap from) joins again, at most twice more.
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

// nearestFirst returns nodes ordered by XOR distance of their peer IDs to
// shard key, nearest first (the coordinator, then its replicas).
func nearestFirst(nodes []*node, key [32]byte) []*node {
	out := slices.Clone(nodes)
	slices.SortFunc(out, func(x, y *node) int {
		switch {
		case closer(x.h.ID(), y.h.ID(), key):
			return -1
		case closer(y.h.ID(), x.h.ID(), key):
			return 1
		}
		return 0
	})
	return out
}
