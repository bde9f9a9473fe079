// Package overlaytest is an importable test rig for packages built on the
// overlay: a subnet tree inside 127/8, a deterministic delegation
// procedure, and Mesh, which starts n nodes that join through one
// bootstrap peer, on a simulated network in virtual time (p2ptest.Net,
// inside a testing/synctest bubble) or on real loopback hosts.
//
// Everything listens and dials on 127.0.0.0/8 only. Nodes run with fast
// upkeep rates (see Options); swarms of 50 nodes and more belong behind an
// environment variable.
package overlaytest

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/bootstrap"
	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/internal/p2ptest"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/subnet"
)

// Tree returns p2ptest.Tree: a hierarchy inside 127/8, four /16
// allocations 127.0-3.0.0/16 (organisations "arin:org-0" to "arin:org-3",
// one shard each) and all 256 /24 assignments in each.
func Tree(t testing.TB) *subnet.Tree { return p2ptest.Tree(t) }

// Addr returns the address node i of a Mesh listens on: 127.(i%4).(i/4+1).1,
// which spreads nodes over Tree's four shards.
func Addr(i int) netip.Addr { return p2ptest.Addr(i) }

// DB opens an in-memory badger database closed at cleanup.
func DB(t testing.TB) *badger.DB { return p2ptest.DB(t) }

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

// Options are the overlay options Mesh uses before the caller's: private
// networks allowed (Tree and its sites are in 127/8), diversity limits for
// one loopback /16, fast maintenance (0.5 s) and liveness
// (heartbeat 0.2 s, timeout 4 s), announcements every 30 s, no DHT record
// publication, and a logger that discards.
func Options() []overlay.Option {
	return []overlay.Option{
		overlay.Egress(egress.Policy{AllowPrivate: true}),
		overlay.DiversityLimits(64, 1024),
		overlay.Maintenance(500*time.Millisecond, 2*time.Second),
		overlay.Liveness(200*time.Millisecond, 4*time.Second),
		overlay.Announce(30 * time.Second),
		overlay.PublishRecords(false, false),
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

// NewNode starts node i of a mesh, listening on Addr(i), with a
// RequesterDelegator, Options and opts. On net (a simulated network, see
// p2ptest.Net; the caller runs inside its synctest bubble) the host speaks
// QUIC over it; with a nil net it is a real loopback host (TCP and QUIC),
// for tests whose subject is the transport. It does not join anyone.
func NewNode(t testing.TB, net *p2ptest.Net, i int, opts ...overlay.Option) *Node {
	t.Helper()
	a := Addr(i)
	var h host.Host
	if net != nil {
		h = net.Host(t, nil, a)
	} else {
		sk, _, err := crypto.GenerateEd25519Key(nil)
		if err != nil {
			t.Fatal(err)
		}
		h, err = overlay.NewHost(sk, overlay.BindAddress(a, 0), overlay.Reachability(network.ReachabilityPublic),
			overlay.NoRelayService(), overlay.ConnLimits(200, 400))
		if err != nil {
			t.Fatal(err)
		}
	}
	n := &Node{Host: h, Addr: a, DB: DB(t), Delegator: &RequesterDelegator{}}
	all := append(append(Options(), overlay.WithDelegator(n.Delegator)), opts...)
	var err error
	n.Overlay, err = overlay.New(h, Tree(t), n.DB, all...)
	if err != nil {
		h.Close()
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n
}

// Mesh starts n nodes on net (nil: loopback, see NewNode); every node
// joins through node 0 with bootstrap.Join and runs Overlay.Bootstrap.
// Nodes stop at cleanup.
func Mesh(t testing.TB, net *p2ptest.Net, n int, opts ...overlay.Option) []*Node {
	t.Helper()
	nodes := make([]*Node, n)
	for i := range n {
		nodes[i] = NewNode(t, net, i, opts...)
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
