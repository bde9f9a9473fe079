package footprint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/indexer"
	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/node"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/subnet"
)

// labConfig describes the network the measured node joins.
type labConfig struct {
	sites int
	seed  int64
	scale float64
	data  string
	log   *slog.Logger
}

// lab is the emulated Internet and the peers, in this process.
type lab struct {
	w       *world.World
	run     *world.Running
	snap    string     // the world's snapshot file, for the measured node
	addr    netip.Addr // the measured node's world address
	helpers []*node.Node
	ix      *node.Indexer
	closers []func() error // in closing order
}

// startLab serves the world and starts the peers: numHelpers
// nodes that coordinate shards like any peer but never crawl (NoCrawl,
// capacity 0 announced), so that every subnet is delegated to the measured
// node, and an indexer.
func startLab(ctx context.Context, dir string, cfg labConfig) (fn *lab, err error) {
	fn = &lab{}
	defer func() {
		if err != nil {
			err = errors.Join(err, fn.close())
			fn = nil
		}
	}()
	p := world.DefaultParams()
	p.Seed, p.Sites, p.Nodes, p.DataDir, p.Port = cfg.seed, cfg.sites, numHelpers+1, cfg.data, 0
	w, err := world.Generate(ctx, p)
	if err != nil {
		return fn, fmt.Errorf("generating the emulated Internet: %w", err)
	}
	run, err := w.Start(ctx, world.TimeScale(cfg.scale), world.Port(0), world.Logger(cfg.log.With("subsystem", "world")))
	if err != nil {
		return fn, err
	}
	fn.w, fn.run = w, run
	fn.closers = append(fn.closers, run.Close)
	tree, err := w.Tree(ctx)
	if err != nil {
		return fn, fmt.Errorf("loading the world's registry: %w", err)
	}
	fn.snap = filepath.Join(dir, "world.snapshot")
	if err := writeSnapshot(fn.snap, tree); err != nil {
		return fn, err
	}
	fn.addr = w.Nodes()[0].Addr
	noLoad := func() (uint64, uint64) { return 0, 0 }
	for i := 1; i <= numHelpers; i++ {
		a := w.Nodes()[i].Addr
		res, err := run.Resolver(a)
		if err != nil {
			return fn, err
		}
		c := node.DefaultConfig()
		c.DataDir = filepath.Join(dir, fmt.Sprintf("peer-%d", i))
		c.Listen = []string{"/ip4/" + a.String() + "/tcp/0"}
		c.Bootstrap = fn.bootstrap()
		c.AllowPrivateNetworks, c.AllowPorts = true, []uint16{uint16(run.Port())}
		c.Dashboard, c.MemoryLimit, c.Bandwidth = "", "0", "0" // the limit would be this process's
		n, err := node.New(c, node.Tree(tree), node.Resolver(res), node.Logger(cfg.log.With("peer", i)),
			node.HostOptions(overlay.Reachability(network.ReachabilityPublic), overlay.NoRelayService()),
			// Announced every 10 s, so that the measured node soon knows
			// them for peers that do not crawl and never delegates them a
			// subnet (a network of a thousand nodes announcing every
			// 5 min sends a node more announcements than these three).
			// Without a prober they are no candidates of the shards they
			// coordinate either (NoCrawl alone leaves this peer one).
			node.OverlayOptions(overlay.NoCrawl(), overlay.WithLoad(noLoad), overlay.WithProber(nil), overlay.Announce(10*time.Second)))
		if err != nil {
			return fn, fmt.Errorf("peer %d: %w", i, err)
		}
		fn.helpers = append(fn.helpers, n)
		fn.closers = append(fn.closers, n.Close)
		jctx, cancel := context.WithTimeout(ctx, time.Minute)
		err = n.Join(jctx)
		cancel()
		if err != nil {
			return fn, fmt.Errorf("peer %d: %w", i, err)
		}
	}
	resolver, err := run.Resolver(netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		return fn, err
	}
	h0 := fn.helpers[0].Overlay().Host()
	fn.ix, err = node.StartIndexer(ctx, node.IndexerConfig{
		DataDir: filepath.Join(dir, "indexer"), Listen: []string{"/ip4/127.0.0.1/tcp/0"}, AllowPrivateNetworks: true, // the emulated Internet is on loopback
		Bootstrap: []peer.AddrInfo{{ID: h0.ID(), Addrs: h0.Addrs()}}, HTTP: "127.0.0.1:0",
		Tree: tree, Logger: cfg.log.With("subsystem", "indexer"), JoinNow: true,
		Host: []overlay.HostOption{overlay.Reachability(network.ReachabilityPublic), overlay.NoRelayService()},
		// Announced every 10 s, as the helpers.
		Overlay: []overlay.Option{overlay.Announce(10 * time.Second)},
		Indexer: []indexer.Option{indexer.AnnounceEvery(10 * time.Second), indexer.DNS(resolver)},
	})
	if err != nil {
		return fn, fmt.Errorf("indexer: %w", err)
	}
	fn.closers = append(fn.closers, fn.ix.Close)
	return fn, nil
}

// bootstrap lists the helpers' multiaddrs.
func (fn *lab) bootstrap() []string {
	var out []string
	for _, n := range fn.helpers {
		out = append(out, n.Addrs()...)
	}
	return out
}

// close stops the indexer, the peers and the world, in that order.
func (fn *lab) close() error {
	var err error
	for _, c := range slices.Backward(fn.closers) {
		err = errors.Join(err, c())
	}
	fn.closers = nil
	return err
}

// nodeArgs returns the command line, after "micra", of the measured node
// at fn.addr with its data in dataDir and bandwidth cap bw, joined to the
// helpers.
func (fn *lab) nodeArgs(dataDir string, bw int64) []string {
	return []string{"node",
		"--data-dir", dataDir,
		"--listen", "/ip4/" + fn.addr.String() + "/tcp/0",
		"--source-addr", fn.addr.String(),
		"--dns", fn.run.DNS().String(),
		"--allow-private-networks", "--allow-ports", strconv.Itoa(fn.run.Port()),
		"--snapshot", fn.snap,
		"--dashboard", "127.0.0.1:0",
		"--bandwidth", strconv.FormatInt(bw, 10),
		// Pages per day offered: the default, 10,000, is what a day of a
		// home line's light load fetches in minutes at the cap; a node
		// over its capacity gets no new subnets, and the crawl would run
		// dry of hosts instead of running at the cap.
		"--capacity", "10000000",
		"--bootstrap", strings.Join(fn.bootstrap(), ","),
	}
}

// othersFetched returns the pages the helpers fetched, logging each that
// fetched any (a peer that does not crawl should not).
func (fn *lab) othersFetched(log *slog.Logger) int64 {
	var others int64
	for i, h := range fn.helpers {
		f := h.CrawlStats().Fetched
		others += f
		if f > 0 {
			var holds []string
			for _, d := range h.Overlay().Owned() {
				holds = append(holds, d.Subnet.String())
			}
			log.Warn("a peer that does not crawl fetched pages", "peer", i+1, "fetched", f, "holds", holds)
		}
	}
	return others
}

// seedsOf are the home pages of the sites a polite crawler may
// crawl: not hostile, not flaky, robots.txt readable, home page 200.
func seedsOf(run *world.Running, depth int) []crawl.Request {
	w := run.World()
	var out []crawl.Request
	for _, s := range w.Sites() {
		if s.Hostile != world.NotHostile || s.Flaky || s.Pages == 0 || s.Robots == world.RobotsError {
			continue
		}
		if home := w.Pages(s)[0]; home.Disallowed || home.Status != http.StatusOK {
			continue
		}
		out = append(out, crawl.Request{Link: run.URL(s), Depth: depth})
	}
	return out
}

// seeding is submitSeeds running in the background.
type seeding struct {
	submitted, failed atomic.Int64
	cancel            context.CancelFunc
	wg                sync.WaitGroup
}

// startSeeding runs submitSeeds through n until ctx is done or stop.
func startSeeding(ctx context.Context, n *node.Node, seeds []crawl.Request, log *slog.Logger) *seeding {
	s := &seeding{}
	ctx, s.cancel = context.WithCancel(ctx)
	s.wg.Go(func() { submitSeeds(ctx, n, seeds, &s.submitted, &s.failed, log) })
	return s
}

// stop stops the seeding and waits for it.
func (s *seeding) stop() { s.cancel(); s.wg.Wait() }

// submitSeeds submits seeds through n, a few at a time and several at
// once (each new subnet's delegation runs probes), trying each failed
// chunk again up to twice.
func submitSeeds(ctx context.Context, n *node.Node, seeds []crawl.Request, submitted, failed *atomic.Int64, log *slog.Logger) {
	const chunk, parallel = 4, 8
	work := make(chan []crawl.Request)
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for part := range work {
				for attempt := 0; ; attempt++ {
					sctx, cancel := context.WithTimeout(ctx, time.Minute)
					res, err := n.Submit(sctx, part...)
					cancel()
					if err == nil && len(res.Failed) == 0 {
						submitted.Add(int64(len(part)))
						break
					}
					if ctx.Err() != nil {
						return
					}
					if attempt == 2 {
						failed.Add(int64(len(part)))
						log.Warn("seeds not submitted", "error", err, "failed", len(res.Failed))
						break
					}
					if sleepCtx(ctx, 2*time.Second) != nil {
						return
					}
				}
			}
		})
	}
	for i := 0; i < len(seeds); i += chunk {
		select {
		case work <- seeds[i:min(i+chunk, len(seeds))]:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
}

// writeSnapshot writes tree's snapshot file to path.
func writeSnapshot(path string, tree *subnet.Tree) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := tree.WriteSnapshot(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
