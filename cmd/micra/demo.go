package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/crawl/index"
	"github.com/micra-net/micra/internal/swarm"
	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/results"
	"github.com/micra-net/micra/subnet"
)

func init() {
	commands["demo"] = command{"the whole system in one process: an emulated Internet, volunteer nodes, an indexer", runDemo}
}

const demoSynopsis = `[flags]

Starts the emulated Internet (sites, DNS and the real latency matrix, on
loopback), N volunteer nodes bootstrapping from the first, and one indexer,
all in this process; seeds a crawl of every site; shows the progress; and
ends, when the crawl is done or at --duration, with the quality of the
delegations (optimal %, probes, excess RTT) and a sample search. Every
node's dashboard is reachable while the demo runs (--linger keeps them up
after the summary). Private networks are allowed for the demo's nodes only.

It needs the shared data (../shared/data beside the checkout, or
$MICRA_DATA, or --data).

Flags:`

// demoConfig is what one demo run does.
type demoConfig struct {
	nodes      int
	sites      int
	seed       int64
	scale      float64
	threshold  time.Duration
	depth      int
	duration   time.Duration
	dataDir    string
	geo        string
	keep       string
	linger     bool
	latencyMap bool
	submitters int
	verbose    bool
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", demoSynopsis, stderr)
	var c demoConfig
	fs.IntVar(&c.nodes, "nodes", 12, "volunteer nodes (2 to 50)")
	fs.IntVar(&c.sites, "sites", 150, "web sites of the emulated Internet")
	fs.Int64Var(&c.seed, "seed", 1, "seed of the emulated Internet")
	fs.Float64Var(&c.scale, "scale", 0.2, "time scale of the emulated Internet's delays (1: real latencies)")
	fs.DurationVar(&c.threshold, "threshold", 50*time.Millisecond, "IPMicra's probing threshold (unscaled)")
	fs.IntVar(&c.depth, "depth", 2, "link depth of the crawl from each site's home page")
	fs.DurationVar(&c.duration, "duration", 2*time.Minute, "longest time the crawl runs before the summary")
	fs.StringVar(&c.dataDir, "data", "", "the shared data `DIR` (default: ../shared/data or $MICRA_DATA)")
	fs.StringVar(&c.geo, "geo", "", "a real-geo world: sites drawn from the geolocation CSV `FILE` (such as DB-IP's under the data directory), at their real places, in the real hierarchy's shape mapped into 127/8")
	fs.StringVar(&c.keep, "keep", "", "keep the nodes' and the indexer's data in `DIR` (default: a temporary directory, removed)")
	fs.BoolVar(&c.latencyMap, "map", false, "give the guided search a latency map: the nodes' locations (the emulated Internet's) and the RTT matrix (see micra bench delegation --map)")
	fs.IntVar(&c.submitters, "submitters", 4, "seeds submitted at once, each through another node")
	fs.BoolVar(&c.linger, "linger", false, "after the summary, keep everything running until interrupted")
	fs.BoolVar(&c.verbose, "v", false, "log at debug level (the log goes to demo.log in the data directory)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() != 0:
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	case c.submitters < 1 || c.submitters > 64:
		return fmt.Errorf("%w: --submitters must be 1 to 64", errUsage)
	case c.nodes < 2 || c.nodes > 50:
		return fmt.Errorf("%w: --nodes must be 2 to 50", errUsage)
	case c.sites < 10 || c.sites > 5000:
		return fmt.Errorf("%w: --sites must be 10 to 5000", errUsage)
	case c.scale <= 0 || c.scale > 1:
		return fmt.Errorf("%w: --scale must be in (0, 1]", errUsage)
	case c.threshold <= 0 || c.depth < 0 || c.depth > 8 || c.duration <= 0 || c.duration > time.Hour:
		return fmt.Errorf("%w: --threshold, --depth (0-8) or --duration (up to 1h) out of range", errUsage)
	}
	return demo(ctx, c, stdout, stderr)
}

func demo(ctx context.Context, c demoConfig, stdout, stderr io.Writer) (err error) {
	start := time.Now()
	dir := c.keep
	if dir == "" {
		if dir, err = os.MkdirTemp("", "micra-demo-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(dir, "demo.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	level := slog.LevelInfo
	if c.verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: level}))
	// MICRA_DEBUG: the delegation procedure's decisions are kept to explain
	// the sub-optimal ones in the summary.
	var trace *decisionTrace
	if os.Getenv("MICRA_DEBUG") != "" {
		trace = newDecisionTrace(logger.Handler())
	}

	// The emulated Internet.
	p := world.DefaultParams()
	p.Seed, p.Sites, p.Nodes, p.FromReal, p.DataDir, p.Port, p.Geo = c.seed, c.sites, c.nodes, c.geo == "", c.dataDir, 0, c.geo
	w, err := world.Generate(ctx, p)
	if err != nil {
		return fmt.Errorf("generating the emulated Internet: %w (the demo needs the shared data: ../shared/data beside the checkout, $MICRA_DATA or --data)", err)
	}
	run, err := w.Start(ctx, world.TimeScale(c.scale), world.Port(0), world.Logger(logger.With("subsystem", "world")))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, run.Close()) }()
	tree, err := w.Tree(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "emulated Internet: %d sites, %d volunteer addresses, time scale %v, DNS %s; log in %s\n",
		len(w.Sites()), len(w.Nodes()), c.scale, run.DNS(), logFile.Name())

	// The volunteers.
	sw, err := swarm.Start(ctx, run, tree, swarm.Config{Dir: dir, Scale: c.scale, Threshold: c.threshold,
		LatencyMap: c.latencyMap, Dashboards: true, Logger: logger, Trace: traceHandler(trace)})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, sw.Close()) }()
	nodes := sw.Nodes

	// The indexer: it resolves the world's names (for its audits) from
	// 127.0.0.1.
	indexerDNS, err := run.Resolver(netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		return err
	}
	h0 := nodes[0].Overlay().Host()
	ri, err := startIndexer(ctx, indexerSetup{
		dir: filepath.Join(dir, "indexer"), listen: []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/0")},
		peers: []peer.AddrInfo{{ID: h0.ID(), Addrs: h0.Addrs()}}, httpAddr: "127.0.0.1:0",
		tree: tree, log: logger.With("subsystem", "indexer"), joinNow: true,
		hostOpts:    []overlay.HostOption{overlay.Reachability(network.ReachabilityPublic), overlay.NoRelayService()},
		overlayOpts: []overlay.Option{overlay.Announce(2*time.Second, true)},
		// The indexer coordinates shards too and delegates their subnets:
		// it needs the world's latencies between nodes like every node
		// (with libp2p's loopback RTTs its triangle-inequality bounds
		// pruned the nearest nodes: 200 ms misses).
		delegateOpts: sw.DelegateOptions("indexer"),
		opts: []results.Option{results.AnnounceEvery(2 * time.Second), results.Logger(logger.With("subsystem", "results")),
			results.DNS(indexerDNS)},
	})
	if err != nil {
		return fmt.Errorf("indexer: %w", err)
	}
	defer func() { err = errors.Join(err, ri.Close()) }()

	// Until a node hears the indexer's first announcement (capacity 0), it
	// takes the indexer, which its DHT knows, for a crawler: its first
	// decisions would ask the indexer to probe and count the refusal.
	for wait := time.Now(); time.Since(wait) < 10*time.Second; time.Sleep(100 * time.Millisecond) {
		if !slices.ContainsFunc(nodes, func(dn *swarm.Node) bool { return dn.Overlay().MayCrawl(ri.h.ID()) }) {
			break
		}
	}

	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "node\taddress\tlocation\tdashboard\n")
	for i, dn := range nodes {
		loc := w.Nodes()[i].Loc
		fmt.Fprintf(tw, "%d\t%s\t%s, %s\thttp://%s/\n", i, dn.Addr, loc.City, loc.Country, dn.DashboardAddr())
	}
	fmt.Fprintf(tw, "indexer\t127.0.0.1\t\thttp://%s/ (search)\n", ri.httpAddr)
	tw.Flush()
	fmt.Fprintf(stdout, "%d nodes and the indexer joined in %v\n", len(nodes), time.Since(start).Round(100*time.Millisecond))

	// The crawl: every site's home page is a seed, submitted through the
	// nodes in turn; each submission delegates the site's subnet when
	// nobody holds it yet (the IPMicra search, probes and all).
	var seeds []world.Site
	for _, s := range w.Sites() {
		if s.Hostile == world.NotHostile {
			seeds = append(seeds, s)
		}
	}
	crawlStart := time.Now()
	cctx, cancel := context.WithTimeout(ctx, c.duration)
	defer cancel()
	var submitted, failed atomic.Int64
	var subWG sync.WaitGroup
	for k := range c.submitters {
		dn := nodes[k%len(nodes)]
		subWG.Go(func() {
			for i := k; i < len(seeds); i += c.submitters {
				res, err := dn.Submit(cctx, crawl.Request{Link: run.URL(seeds[i]), Depth: c.depth})
				if err != nil {
					return
				}
				if len(res.Failed) > 0 {
					failed.Add(1)
					logger.Warn("seed not submitted", "url", res.Failed[0].Link, "error", res.Failed[0].Err)
					continue
				}
				submitted.Add(1)
			}
		})
	}
	subDone := make(chan struct{})
	go func() { subWG.Wait(); close(subDone) }()

	fig := func() demoFigures { return figures(nodes, ri, submitted.Load(), len(seeds)) }
	tty := false
	if f, ok := stderr.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	var bar *progressbar.ProgressBar
	if tty {
		bar = progressbar.NewOptions64(int64(c.duration/time.Second), progressbar.OptionSetWriter(stderr),
			progressbar.OptionSetDescription(fig().String()), progressbar.OptionSetPredictTime(false),
			progressbar.OptionShowElapsedTimeOnFinish(), progressbar.OptionSetWidth(20),
			progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	lastLine := time.Now()
	idleSince := time.Time{}
loop:
	for {
		select {
		case <-cctx.Done():
			break loop
		case <-tick.C:
		}
		f := fig()
		if bar != nil {
			bar.Describe(f.String())
			_ = bar.Set64(int64(time.Since(crawlStart) / time.Second))
		} else if time.Since(lastLine) >= 10*time.Second {
			fmt.Fprintf(stdout, "%6.0fs  %s\n", time.Since(crawlStart).Seconds(), f)
			lastLine = time.Now()
		}
		// Done: every seed submitted, every crawler idle, every batch
		// acknowledged, for two seconds in a row.
		select {
		case <-subDone:
			if f.idle {
				if idleSince.IsZero() {
					idleSince = time.Now()
				} else if time.Since(idleSince) > 2*time.Second {
					break loop
				}
				continue
			}
		default:
		}
		idleSince = time.Time{}
	}
	if bar != nil {
		_ = bar.Finish()
	}
	cancel()
	subWG.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	took := time.Since(crawlStart)
	f := fig()
	fmt.Fprintf(stdout, "crawl: %v, %s\n", took.Round(100*time.Millisecond), f)
	if n := failed.Load(); n > 0 {
		fmt.Fprintf(stdout, "%d seeds could not be submitted (see the log)\n", n)
	}
	fmt.Fprintln(stdout)
	if err := delegationTable(ctx, stdout, w, run, tree, nodes, seeds, trace); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	sampleSearch(ctx, stdout, ri, seeds, run)
	if c.linger {
		fmt.Fprintln(stdout, "\nrunning until interrupted (Ctrl-C): the dashboards and the search page stay up")
		<-ctx.Done()
	}
	return nil
}

// demoFigures is the line of figures the demo shows while it runs.
type demoFigures struct {
	delegated, seeds         int
	probes, decisions        int64
	pages, wire, results     int64
	queued, inFlight, stored int64
	outbox                   int
	idle                     bool
}

func figures(nodes []*swarm.Node, ri *runningIndexer, submitted int64, seeds int) demoFigures {
	f := demoFigures{delegated: int(submitted), seeds: seeds, idle: true}
	for _, dn := range nodes {
		ds := dn.DelegationStats()
		f.probes += ds.Probes
		f.decisions += ds.Decisions
		cs := dn.CrawlStats()
		f.pages += cs.Fetched
		f.wire += cs.WireBytes
		f.results += cs.RecordBytes
		f.queued += cs.Queued
		f.inFlight += cs.InFlight
		f.outbox += dn.OutboxStats().Batches
		if cs.Queued > 0 || cs.InFlight > 0 {
			f.idle = false
		}
	}
	f.stored = int64(ri.ix.Index().Stats().Docs)
	if f.outbox > 0 {
		f.idle = false
	}
	return f
}

func (f demoFigures) String() string {
	ppd := 0.0
	if f.decisions > 0 {
		ppd = float64(f.probes) / float64(f.decisions)
	}
	ratio := "-"
	if f.results > 0 {
		ratio = fmt.Sprintf("1/%.0f", float64(f.wire)/float64(f.results))
	}
	return fmt.Sprintf("sites delegated %d/%d · probes/delegation %.2f · pages %d (queued %d) · result ratio %s · indexed %d",
		f.delegated, f.seeds, ppd, f.pages, f.queued, ratio, f.stored)
}

// delegationTable prints how good the delegations of the seeded sites
// are, by the metrics of DESIGN.md, beside the paper's figures.
func delegationTable(ctx context.Context, out io.Writer, w *world.World, run *world.Running, tree *subnet.Tree, nodes []*swarm.Node, seeds []world.Site, trace *decisionTrace) error {
	byPeer := map[peer.ID]*swarm.Node{}
	own := map[subnet.Range]bool{}
	var addrs []netip.Addr
	for _, dn := range nodes {
		byPeer[dn.ID()] = dn
		own[tree.Range(tree.SmallestNonUnary(dn.Addr))] = true
		addrs = append(addrs, dn.Addr)
	}
	o := nodes[0].Overlay()
	var judged, optimal, undelegated, cdn int
	var excess time.Duration
	var speed crawlSpeed
	subnets := map[subnet.Range]bool{}
	explained := map[subnet.Range]bool{}
	for _, s := range seeds {
		if s.Kind == world.CDNSite {
			cdn++ // its address depends on who asks; the nearest point of presence answers
			continue
		}
		r := tree.Range(tree.SmallestNonUnary(s.Addrs[0]))
		if own[r] {
			continue
		}
		d, ok, err := o.Resolve(ctx, s.Addrs[0])
		if err != nil || !ok {
			undelegated++
			continue
		}
		dn, ok := byPeer[d.Node]
		if !ok {
			undelegated++
			continue
		}
		subnets[r] = true
		judged++
		speed.add(w, run, s, dn.Addr, addrs)
		_, best, _ := w.Optimal(s, addrs)
		if got := w.RTT(dn.Addr, s); got-best <= 10*time.Microsecond {
			optimal++
		} else {
			excess += got - best
			if os.Getenv("MICRA_DEBUG") != "" {
				bestAddr, _, _ := w.Optimal(s, addrs)
				fmt.Fprintf(out, "  sub-optimal %s %s: %s at %v, best %s at %v (decided %s, own %v, url %s)\n", s.Name, r, dn.Addr, got, bestAddr, best, d.Decided.Format("15:04:05.000"), d.Own, d.URL)
				if trace != nil && !explained[r] {
					explained[r] = true
					trace.explain(out, w, r.String(), s, nodes)
				}
			}
		}
	}
	var probes, balanced int64
	for _, dn := range nodes {
		st := dn.DelegationStats()
		probes += st.Probes
		balanced += st.HandOffs + st.SecondBest + st.Reruns
	}
	fmt.Fprintf(out, "Delegation quality: %d sites in %d subnets delegated by search (not counting %d CDN sites, the nodes' own subnets, %d not delegated)\n",
		judged, len(subnets), cdn, undelegated)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "	optimal	probes per new subnet	excess, sub-optimal	excess per URL	")
	pct, ppn, ex, perURL := 0.0, 0.0, time.Duration(0), time.Duration(0)
	if judged > 0 {
		pct = 100 * float64(optimal) / float64(judged)
		perURL = excess / time.Duration(judged)
	}
	if len(subnets) > 0 {
		ppn = float64(probes) / float64(len(subnets))
	}
	if bad := judged - optimal; bad > 0 {
		ex = excess / time.Duration(bad)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	fmt.Fprintf(tw, "micra, this run (%d nodes)	%.1f %%	%.2f	%.1f ms	%.2f ms	\n", len(nodes), pct, ppn, ms(ex), ms(perURL))
	fmt.Fprintf(tw, "IPMicra paper (12 nodes, 50 ms)	75 %%	2.99 per URL	13 ms	3.3 ms	\n")
	if err := tw.Flush(); err != nil {
		return err
	}
	speed.print(out)
	if balanced > 0 {
		fmt.Fprintf(out, "Load balancing changed %d decisions (the chosen node was full: a held subnet handed off, the second-best node, or a search without the full nodes).\n", balanced)
	}
	return nil
}

// sampleSearch searches the indexer for the heaviest keyword of a crawled
// home page and prints the first hits.
func sampleSearch(ctx context.Context, out io.Writer, ri *runningIndexer, seeds []world.Site, run *world.Running) {
	x := ri.ix.Index()
	st := x.Stats()
	fmt.Fprintf(out, "Indexer: %d pages searchable, %d terms; search page http://%s/\n", st.Docs, st.Terms, ri.httpAddr)
	for _, s := range seeds {
		doc, err := x.Get(ctx, run.URL(s))
		if err != nil || len(doc.Keywords) == 0 {
			continue
		}
		term := doc.Keywords[0].Term
		res, err := x.Search(ctx, index.Query{Text: term, Limit: 3})
		if err != nil {
			fmt.Fprintf(out, "search %q: %v\n", term, err)
			return
		}
		fmt.Fprintf(out, "micra search %s → %d pages, the first:\n", term, res.Total)
		for _, h := range res.Hits {
			fmt.Fprintf(out, "  %.2f  %s  %s\n", h.Score, h.URL, h.Title)
		}
		return
	}
	fmt.Fprintln(out, "no page indexed yet: nothing to search")
}
