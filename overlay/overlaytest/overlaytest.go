// Package overlaytest is an importable test rig for packages built on the
// overlay: a subnet tree inside 127/8, a deterministic delegation
// procedure, and Mesh, which starts n real loopback nodes that join through
// one bootstrap peer.
//
// Everything listens and dials on 127.0.0.0/8 only. Nodes run with fast
// upkeep rates (see Options); swarms of 50 nodes and more belong behind an
// environment variable.
package overlaytest

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
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

	"github.com/micra-net/micra/bootstrap"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/subnet"
)

var tree = sync.OnceValues(func() (*subnet.Tree, error) {
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

// Tree returns a hierarchy inside 127/8: IANA's /8, four /16 allocations
// 127.0-3.0.0/16 (organisations "arin:org-0" to "arin:org-3", one shard
// each) and all 256 /24 assignments in each, of the /16's organisation. It
// is built once and shared.
func Tree(t testing.TB) *subnet.Tree {
	t.Helper()
	tr, err := tree()
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// Addr returns the address node i of a Mesh listens on: 127.(i%4).(i/4+1).1,
// which spreads nodes over Tree's four shards.
func Addr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, byte(i % 4), byte(i/4 + 1), 1})
}

// DB opens an in-memory badger database closed at cleanup.
func DB(t testing.TB) *badger.DB {
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

// RequesterDelegator is a deterministic delegation procedure for tests: the
// subnet goes to the node that asked unless it is excluded, and otherwise
// to the smallest peer id among the coordinator's live peers that is not
// excluded. Runs counts its runs per subnet. It is safe for concurrent use.
type RequesterDelegator struct {
	mu   sync.Mutex
	runs map[subnet.ID]int
}

// Delegate implements overlay.Delegator.
func (d *RequesterDelegator) Delegate(ctx context.Context, req overlay.DelegateRequest, env overlay.DelegationEnv) (peer.ID, error) {
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
	return "", overlay.ErrNoCandidate
}

// Runs returns how often the procedure ran for subnet id.
func (d *RequesterDelegator) Runs(id subnet.ID) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.runs[id]
}

// Options are the overlay options Mesh uses before the caller's: diversity
// limits for one loopback /16, fast maintenance (0.5 s) and liveness
// (heartbeat 0.2 s, timeout 4 s), announcements every 30 s, no DHT record
// publication, and a logger that discards.
func Options() []overlay.Option {
	return []overlay.Option{
		overlay.DiversityLimits(64, 1024),
		overlay.Maintenance(500*time.Millisecond, 2*time.Second),
		overlay.Liveness(200*time.Millisecond, 4*time.Second),
		overlay.Announce(30*time.Second, false),
		overlay.PublishRecords(false),
		overlay.Logger(slog.New(slog.DiscardHandler)),
	}
}

// Node is one member of a Mesh.
type Node struct {
	Host      host.Host
	Overlay   *overlay.Overlay
	Addr      netip.Addr
	DB        *badger.DB
	Delegator *RequesterDelegator
	once      sync.Once
}

// Stop closes the node's overlay and host; the database is closed at
// cleanup. It is safe to call more than once.
func (n *Node) Stop() {
	n.once.Do(func() {
		n.Overlay.Close()
		n.Host.Close()
	})
}

// NewNode starts node i of a mesh (listening on Addr(i), TCP and QUIC) with
// a RequesterDelegator, Options and opts. It does not join anyone.
func NewNode(t testing.TB, i int, opts ...overlay.Option) *Node {
	t.Helper()
	sk, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	a := Addr(i)
	h, err := overlay.NewHost(sk, overlay.BindAddress(a, 0), overlay.Reachability(network.ReachabilityPublic),
		overlay.NoRelayService(), overlay.ConnLimits(200, 400))
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{Host: h, Addr: a, DB: DB(t), Delegator: &RequesterDelegator{}}
	all := append(append(Options(), overlay.WithDelegator(n.Delegator)), opts...)
	n.Overlay, err = overlay.New(h, Tree(t), n.DB, all...)
	if err != nil {
		h.Close()
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n
}

// Mesh starts n nodes; every node joins through node 0 with bootstrap.Join
// and runs Overlay.Bootstrap. Nodes stop at cleanup.
func Mesh(t testing.TB, n int, opts ...overlay.Option) []*Node {
	t.Helper()
	nodes := make([]*Node, n)
	for i := range n {
		nodes[i] = NewNode(t, i, opts...)
	}
	boot := []peer.AddrInfo{{ID: nodes[0].Host.ID(), Addrs: nodes[0].Host.Addrs()}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for _, nd := range nodes[1:] {
		wg.Go(func() {
			if _, err := bootstrap.Join(ctx, nd.Host, nd.Host.ID(), boot, bootstrap.Backoff(50*time.Millisecond, 200*time.Millisecond)); err != nil {
				errs <- err
				return
			}
			if err := nd.Overlay.Bootstrap(ctx); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return nodes
}
