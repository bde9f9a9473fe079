// Package swarm starts a network of micra volunteer nodes on an emulated
// Internet, all in one process: the rig of `micra demo` and of the crawl
// benchmark's overlay-decided assignment. Each node is a whole node.Node
// (badger, libp2p host, overlay, delegation, crawler, results), bound to
// its world address and resolving names through the world's DNS. The
// coordinators' guided search learns the RTTs between nodes either from
// the world (libp2p's traffic on loopback does not see the emulated
// latencies) or, with Config.Links, as a real network does: the nodes'
// libp2p traffic crosses emulated links with the world's latencies, and
// the overlays measure it.
//
// swarm is a rig: it imports node and internal/world and is imported only
// by cmd/micra and tests.
package swarm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/internal/memnet"
	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/node"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/overlay/delegate"
	"github.com/micra-net/micra/results"
	"github.com/micra-net/micra/subnet"
)

// Config describes a swarm.
type Config struct {
	// Dir holds the nodes' data directories (node-00, node-01, ...).
	Dir string
	// Nodes are the world addresses of the nodes, the first the bootstrap
	// node; all of the world's nodes when empty.
	Nodes []netip.Addr
	// Scale is the world's time scale; probes are divided by it, so that
	// the coordinators compare modelled RTTs with Threshold.
	Scale float64
	// Threshold is the delegation procedure's probing threshold.
	Threshold time.Duration
	// Split is the nodes' split margin (node.SplitMargin; 0: the default,
	// negative: off).
	Split time.Duration
	// LatencyMap gives the guided search a latency map of the nodes' world
	// locations (delegate.LatencyMap; demo --map).
	LatencyMap bool
	// Links carries the nodes' libp2p traffic over emulated links with
	// the world's RTTs times Scale (internal/memnet, in real time)
	// instead of loopback TCP, and leaves the coordinators' guided search
	// the RTTs the overlays measure over them (Overlay.Between: the least
	// of their pings and the RTTs neighbours announce, divided by Scale)
	// instead of the world's. Another peer that joins the swarm must take
	// HostOptions and OverlayOptions.
	Links bool
	// Dashboards starts each node's dashboard on a loopback port.
	Dashboards bool
	// SnapshotKeys are the nodes' release keys (node.Config.SnapshotKeys):
	// they switch to the snapshots released with them.
	SnapshotKeys []string
	// Liveness is the nodes' liveness timeout (node.Config.Liveness; 0:
	// the default).
	Liveness time.Duration
	// NodeOptions are appended to every node's options.
	NodeOptions []node.Option
	// Logger receives the nodes' logs (attribute node=i); none when nil.
	Logger *slog.Logger
	// Trace, when set, also receives the delegation procedures' logs at
	// every level (attribute node=i, subsystem=delegate).
	Trace slog.Handler
}

// Node is one volunteer of a swarm.
type Node struct {
	*node.Node
	Addr netip.Addr
	Loc  world.Location
}

// Swarm is a running set of nodes. Close stops them.
type Swarm struct {
	Nodes []*Node

	w      *world.World
	cfg    Config
	byPeer sync.Map        // peer.ID → netip.Addr
	links  *memnet.Network // Config.Links; nil without
}

// joinTimeout bounds one node's join.
const joinTimeout = time.Minute

// Start starts a node at each of cfg.Nodes on run, the first alone and
// the others bootstrapping from it at once, and returns when all joined
// and each has heard every other announce itself. On error it closes
// what it started.
func Start(ctx context.Context, run *world.Running, tree *subnet.Tree, cfg Config) (_ *Swarm, err error) {
	w := run.World()
	at := map[netip.Addr]world.Location{}
	for _, n := range w.Nodes() {
		at[n.Addr] = n.Loc
	}
	if len(cfg.Nodes) == 0 {
		for _, n := range w.Nodes() {
			cfg.Nodes = append(cfg.Nodes, n.Addr)
		}
	}
	for _, a := range cfg.Nodes {
		if _, ok := at[a]; !ok {
			return nil, fmt.Errorf("swarm: %s is not a node address of the world", a)
		}
	}
	switch {
	case len(cfg.Nodes) == 0:
		return nil, errors.New("swarm: no nodes")
	case cfg.Scale <= 0 || cfg.Threshold <= 0 || cfg.Dir == "":
		return nil, errors.New("swarm: Scale, Threshold and Dir must be set")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Swarm{Nodes: make([]*Node, len(cfg.Nodes)), w: w, cfg: cfg}
	if cfg.Links {
		s.links = memnet.New(s.oneWay(at), 0)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Close())
		}
	}()
	start := func(i int, boot []string) error {
		a := cfg.Nodes[i]
		n, err := s.newNode(run, tree, i, a, boot)
		if err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
		s.Nodes[i] = &Node{Node: n, Addr: a, Loc: at[a]}
		s.byPeer.Store(n.ID(), a)
		jctx, cancel := context.WithTimeout(ctx, joinTimeout)
		defer cancel()
		if err := n.Join(jctx); err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
		return nil
	}
	if err := start(0, nil); err != nil {
		return nil, err
	}
	boot := s.Nodes[0].Addrs()
	errs := make([]error, len(cfg.Nodes))
	var wg sync.WaitGroup
	for i := 1; i < len(cfg.Nodes); i++ {
		wg.Go(func() { errs[i] = start(i, boot) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := s.settle(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// settleTimeout bounds the wait for the nodes' first announcements; they
// come every two seconds. settleConnect is how long the nodes have to
// find each other through the DHT before the rig connects the pairs that
// have not heard each other.
const (
	settleTimeout = 30 * time.Second
	settleConnect = 5 * time.Second
)

// settle waits until every node has heard every other node announce
// itself. Until then a coordinator's searches know only some of the
// nodes, and a new network's first decisions would measure its start-up
// instead of its search. A node announces to the peers of its routing
// table and, in a network this small, to every peer it is connected to;
// two nodes that neither met in the DHT's first lookups nor are connected
// (a lookup that timed out on a busy machine: the next routing-table
// refresh is minutes away) would not hear each other for that long, so
// after settleConnect the rig connects them, as a longer-lived network's
// lookups would have.
func (s *Swarm) settle(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	began := time.Now()
	for {
		missing := 0
		for _, n := range s.Nodes {
			heard := map[peer.ID]bool{}
			for _, pi := range n.Overlay().Peers() {
				heard[pi.ID] = true
			}
			for _, m := range s.Nodes {
				if m != n && !heard[m.ID()] {
					missing++
					if time.Since(began) >= settleConnect {
						connect(ctx, n, m)
					}
				}
			}
		}
		if missing == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("swarm: %d announcements of %d nodes to each other not heard: %w", missing, len(s.Nodes), ctx.Err())
		case <-t.C:
		}
	}
}

// connect connects n to m unless they are connected.
func connect(ctx context.Context, n, m *Node) {
	h := n.Overlay().Host()
	if h.Network().Connectedness(m.ID()) == network.Connected {
		return
	}
	mh := m.Overlay().Host()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = h.Connect(ctx, peer.AddrInfo{ID: mh.ID(), Addrs: mh.Addrs()})
}

// newNode builds node i at a, bootstrapping from boot.
func (s *Swarm) newNode(run *world.Running, tree *subnet.Tree, i int, a netip.Addr, boot []string) (*node.Node, error) {
	res, err := run.Resolver(a)
	if err != nil {
		return nil, err
	}
	cfg := node.DefaultConfig()
	cfg.DataDir = filepath.Join(s.cfg.Dir, fmt.Sprintf("node-%02d", i))
	// TCP only: on loopback QUIC dials leave from 127.0.0.1, not the
	// node's address, which own-subnet claims check.
	cfg.Listen = []string{"/ip4/" + a.String() + "/tcp/0"}
	cfg.Bootstrap = boot
	cfg.SourceAddr = a.String()
	cfg.AllowPrivateNetworks = true // the emulated Internet is on loopback
	cfg.AllowPorts = []uint16{uint16(run.Port())}
	if s.cfg.Dashboards {
		cfg.Dashboard = "127.0.0.1:0"
	} else {
		cfg.Dashboard = ""
	}
	cfg.MemoryLimit = "0" // many nodes share the process
	cfg.Bandwidth = "0"
	// A swarm's crawl is compressed in time: two minutes extrapolate to
	// some 200,000 pages a day per node, and with a volunteer's default
	// capacity every node soon looks full, so load balancing sends subnets
	// to far nodes (a Korean site 278 ms away instead of 70). The swarm
	// measures the search; load balancing has its tests.
	cfg.Capacity = 10_000_000
	cfg.Threshold = s.cfg.Threshold.String()
	cfg.SnapshotKeys = s.cfg.SnapshotKeys
	if s.cfg.Liveness > 0 {
		cfg.Liveness = s.cfg.Liveness.String()
	}
	opts := []node.Option{node.Tree(tree), node.Resolver(res), node.ProbeScale(s.cfg.Scale)}
	if s.cfg.Split != 0 {
		opts = append(opts, node.SplitMargin(s.cfg.Split))
	}
	opts = append(opts,
		node.Logger(s.cfg.Logger.With("node", i)),
		node.HostOptions(append(s.HostOptions(), overlay.Reachability(network.ReachabilityPublic), overlay.NoRelayService())...),
		node.DelegateOptions(s.DelegateOptions(i)...),
		node.OverlayOptions(append(s.OverlayOptions(), overlay.Announce(2*time.Second))...),
		// Batches sealed within seconds, so that an indexer fills while
		// the swarm runs (a volunteer's default waits up to 5 minutes).
		node.CrawlOptions(crawl.Batching(256<<10, 3*time.Second)),
		node.ResultOptions(results.Republish(time.Second, 5*time.Second)))
	return node.New(cfg, append(opts, s.cfg.NodeOptions...)...)
}

// DelegateOptions are the delegation options of the swarm's nodes: the
// world's latencies between them (without Config.Links), the latency map
// when configured, and the trace logger (attribute node=who). Another peer
// that joins the swarm and coordinates shards (an indexer) needs them too.
func (s *Swarm) DelegateOptions(who any) []delegate.Option {
	var opts []delegate.Option
	if s.links == nil {
		opts = append(opts, delegate.Between(s.Between))
	}
	if s.cfg.LatencyMap {
		opts = append(opts, delegate.LatencyMap(s.latencyMap))
	}
	if s.cfg.Trace != nil {
		opts = append(opts, delegate.Logger(slog.New(s.cfg.Trace).With("node", who, "subsystem", "delegate")))
	}
	return opts
}

// HostOptions are the host options a peer needs to reach the swarm's
// nodes: with Config.Links, the emulated links' transport (listen on
// /ip4/A/tcp/P addresses).
func (s *Swarm) HostOptions() []overlay.HostOption {
	if s.links == nil {
		return nil
	}
	return []overlay.HostOption{overlay.Transport(s.links.Transport())}
}

// OverlayOptions are the overlay options of every peer in the swarm: with
// Config.Links, the RTTs measured over the links divided by Scale, as the
// probes are (node.ProbeScale).
func (s *Swarm) OverlayOptions() []overlay.Option {
	if s.links == nil {
		return nil
	}
	return []overlay.Option{overlay.RTTScale(s.cfg.Scale)}
}

// oneWay is the links' latency (Config.Links): half the world's RTT
// between the two addresses, times Scale. A peer that is not one of the
// world's nodes (an indexer on 127.0.0.1) is where the first node is.
func (s *Swarm) oneWay(at map[netip.Addr]world.Location) func(from, to netip.Addr) time.Duration {
	place := func(a netip.Addr) netip.Addr {
		if _, ok := at[a]; ok {
			return a
		}
		return s.cfg.Nodes[0]
	}
	return func(from, to netip.Addr) time.Duration {
		return time.Duration(float64(s.w.RTTAddr(place(from), place(to))) * s.cfg.Scale / 2)
	}
}

// Between returns the world's RTT between two of the swarm's nodes; false
// when either is not one.
func (s *Swarm) Between(a, b peer.ID) (time.Duration, bool) {
	x, ok1 := s.byPeer.Load(a)
	y, ok2 := s.byPeer.Load(b)
	if !ok1 || !ok2 {
		return 0, false
	}
	return s.w.RTTAddr(x.(netip.Addr), y.(netip.Addr)), true
}

// Addr returns the world address of the swarm's node p.
func (s *Swarm) Addr(p peer.ID) (netip.Addr, bool) {
	a, ok := s.byPeer.Load(p)
	if !ok {
		return netip.Addr{}, false
	}
	return a.(netip.Addr), true
}

// latencyMap is the swarm's latency map (delegate.LatencyMap): each node's
// location is the world's, as an operator would declare it; the access
// delays are estimated from the RTTs between the nodes. Peers of unknown
// location (an indexer) are left out of the map.
func (s *Swarm) latencyMap(peers []peer.ID) []subnet.MapPlace {
	at := map[netip.Addr]world.Location{}
	for _, n := range s.w.Nodes() {
		at[n.Addr] = n.Loc
	}
	var names []string
	var locs []world.Location
	for _, p := range peers {
		a, ok := s.Addr(p)
		if !ok {
			continue
		}
		names = append(names, string(p))
		locs = append(locs, at[a])
	}
	return world.LatencyMap(s.w, names, locs, func(a, b string) (time.Duration, bool) { return s.Between(peer.ID(a), peer.ID(b)) })
}

// Close stops every node at once and waits for them.
func (s *Swarm) Close() error {
	errs := make([]error, len(s.Nodes))
	var wg sync.WaitGroup
	for i, n := range s.Nodes {
		if n != nil {
			wg.Go(func() { errs[i] = n.Close() })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}
