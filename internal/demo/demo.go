// Package demo runs the whole system in one process: an emulated Internet
// on loopback, volunteer nodes bootstrapping from the first, one indexer;
// it seeds a crawl of every site, shows the progress and ends with the
// quality of the delegations, the crawl speed-up and a sample search.
// micra demo parses its flags and calls Run.
package demo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/indexer"
	"github.com/micra-net/micra/indexer/index"
	"github.com/micra-net/micra/internal/swarm"
	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/node"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/subnet"
)

// Config is what one demo run does; cmd/micra's flags fill it.
type Config struct {
	Nodes      int           // volunteer nodes, 2 to 50
	Sites      int           // web sites of the emulated Internet
	Seed       int64         // seed of the emulated Internet
	Scale      float64       // time scale of the world's delays (1: real latencies)
	Threshold  time.Duration // IPMicra's probing threshold (unscaled)
	Split      time.Duration // node.SplitMargin (unscaled); 0: its default, negative: no splits
	Depth      int           // link depth of the crawl from each home page
	Duration   time.Duration // longest time the crawl runs
	DataDir    string        // the shared data; "" for ../shared/data or $MICRA_DATA
	Latency    string        // world.Params.Latency: "" the real matrix when found, else the embedded model
	Geo        string        // a geolocation CSV for a real-geo world
	Org        string        // with Geo: only one organisation's rows (world.Params.GeoOrg)
	Keep       string        // keep the data here; "" for a temporary directory
	Linger     bool          // keep running after the summary until ctx ends
	LatencyMap bool          // give the guided search a latency map
	WorldRTTs  bool          // give the guided search the world's RTTs between nodes instead of what the nodes measure over emulated links (swarm.Config.Links)
	Submitters int           // seeds submitted at once
	Store      string        // the indexer's PostgreSQL DSN (node.IndexerConfig.Store); "": its own database
	Verbose    bool          // log at debug level
}

// Run runs one demo, writing its progress and summary to stdout and its
// log to a file it names: demo.log in the data directory with Keep, else a
// micra-demo-*.log in the temporary directory, kept after the run.
func Run(ctx context.Context, c Config, stdout, stderr io.Writer) (err error) {
	d := &demo{c: c, out: stdout, errOut: stderr, start: time.Now()}
	dir := c.Keep
	var logFile *os.File
	if dir == "" {
		if dir, err = os.MkdirTemp("", "micra-demo-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		logFile, err = os.CreateTemp("", "micra-demo-*.log")
	} else if err = os.MkdirAll(dir, 0o700); err == nil {
		logFile, err = os.Create(filepath.Join(dir, "demo.log"))
	}
	if err != nil {
		return err
	}
	defer logFile.Close()
	level := slog.LevelInfo
	if c.Verbose {
		level = slog.LevelDebug
	}
	d.log, d.logName = slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: level})), logFile.Name()
	// MICRA_DEBUG: the delegation procedure's decisions are kept to explain
	// the sub-optimal ones in the summary.
	if os.Getenv("MICRA_DEBUG") != "" {
		d.trace = newDecisionTrace(d.log.Handler())
	}
	var closers []func() error
	defer func() {
		for _, closeIt := range slices.Backward(closers) {
			err = errors.Join(err, closeIt())
		}
	}()
	steps := []func(context.Context, string) (func() error, error){d.startWorld, d.startNodes, d.startIndexer}
	for _, step := range steps {
		closer, err := step(ctx, dir)
		if closer != nil {
			closers = append(closers, closer)
		}
		if err != nil {
			return err
		}
	}
	d.printNodes()
	if err := d.crawl(ctx); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	if err := delegationTable(ctx, stdout, d.w, d.run, d.tree, d.nodes, d.seeds, d.trace); err != nil {
		return err
	}
	nodeAddrs := map[peer.ID]netip.Addr{}
	for _, dn := range d.nodes {
		nodeAddrs[dn.ID()] = dn.Addr
	}
	d.noise.fit(d.w.RTTAddr, nodeAddrs).print(stdout)
	if !c.WorldRTTs {
		betweenNoise(d.nodes, d.w.RTTAddr, stdout)
	}
	fmt.Fprintln(stdout)
	sampleSearch(ctx, stdout, d.ri, d.seeds, d.run)
	if !c.Linger {
		fmt.Fprintln(stdout, "(the indexer stops with the demo: --linger keeps it, its search page and the dashboards up for such commands)")
	}
	if c.Linger {
		fmt.Fprintln(stdout, "\nrunning until interrupted (Ctrl-C): the dashboards and the search page stay up")
		<-ctx.Done()
	}
	return nil
}

// demo is one run's parts, made by Run's steps in order.
type demo struct {
	c           Config
	out, errOut io.Writer
	start       time.Time
	log         *slog.Logger
	logName     string
	trace       *decisionTrace
	noise       probeNoise

	w     *world.World
	run   *world.Running
	tree  *subnet.Tree
	sw    *swarm.Swarm
	nodes []*swarm.Node
	ri    *node.Indexer
	seeds []world.Site
}

// startWorld generates the emulated Internet and serves it.
func (d *demo) startWorld(ctx context.Context, _ string) (func() error, error) {
	c := d.c
	p := world.DefaultParams()
	p.Seed, p.Sites, p.Nodes, p.FromReal, p.DataDir, p.Port, p.Geo, p.GeoOrg = c.Seed, c.Sites, c.Nodes, c.Geo == "", c.DataDir, 0, c.Geo, c.Org
	p.Latency = c.Latency
	w, err := world.Generate(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("generating the emulated Internet: %w", err)
	}
	run, err := w.Start(ctx, world.TimeScale(c.Scale), world.Port(0), world.Logger(d.log.With("subsystem", "world")))
	if err != nil {
		return nil, err
	}
	d.w, d.run = w, run
	if d.tree, err = w.Tree(ctx); err != nil {
		return run.Close, err
	}
	fmt.Fprintf(d.out, "emulated Internet: %d sites, %d volunteer addresses, time scale %v, DNS %s; log in %s\n",
		len(w.Sites()), len(w.Nodes()), c.Scale, run.DNS(), d.logName)
	if w.Params().Latency == world.LatencyModel {
		fmt.Fprintf(d.out, "latencies: %s; on the real matrix: --data DIR with the shared data (README, \"Data and licences\")\n", w.DescribeLatency())
	} else {
		fmt.Fprintf(d.out, "latencies: %s (the embedded model instead: --latency model)\n", w.DescribeLatency())
	}
	return run.Close, nil
}

// startNodes starts the volunteers, each bootstrapping from the first.
func (d *demo) startNodes(ctx context.Context, dir string) (func() error, error) {
	sw, err := swarm.Start(ctx, d.run, d.tree, swarm.Config{Dir: dir, Scale: d.c.Scale, Threshold: d.c.Threshold, Split: d.c.Split,
		LatencyMap: d.c.LatencyMap, Links: !d.c.WorldRTTs, Dashboards: true, Logger: d.log, Trace: traceHandler(d.trace),
		NodeOptions: []node.Option{node.ProbeObserver(d.noise.observe)}})
	if err != nil {
		return nil, err
	}
	d.sw, d.nodes = sw, sw.Nodes
	return sw.Close, nil
}

// startIndexer starts the indexer and waits until the nodes know it for
// one.
func (d *demo) startIndexer(ctx context.Context, dir string) (func() error, error) {
	// It resolves the world's names (for its audits) from 127.0.0.1.
	indexerDNS, err := d.run.Resolver(netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		return nil, err
	}
	h0 := d.nodes[0].Overlay().Host()
	ri, err := node.StartIndexer(ctx, node.IndexerConfig{
		DataDir: filepath.Join(dir, "indexer"), Listen: []string{"/ip4/127.0.0.1/tcp/0"}, AllowPrivateNetworks: true, // the emulated Internet is on loopback
		Bootstrap: []peer.AddrInfo{{ID: h0.ID(), Addrs: h0.Addrs()}}, HTTP: "127.0.0.1:0",
		Tree: d.tree, Logger: d.log.With("subsystem", "indexer"), JoinNow: true, Store: d.c.Store,
		// The indexer reaches the nodes over the swarm's links, and it
		// coordinates shards too and delegates their subnets: it needs
		// what the nodes have of the RTTs between them (with libp2p's
		// loopback RTTs its triangle-inequality bounds pruned the nearest
		// nodes: 200 ms misses).
		Host:     append(d.sw.HostOptions(), overlay.Reachability(network.ReachabilityPublic), overlay.NoRelayService()),
		Overlay:  append(d.sw.OverlayOptions(), overlay.Announce(2*time.Second), overlay.NoCrawl()),
		Delegate: d.sw.DelegateOptions("indexer"),
		Indexer: []indexer.Option{indexer.AnnounceEvery(2 * time.Second), indexer.Logger(d.log.With("subsystem", "indexer")),
			indexer.DNS(indexerDNS)},
	})
	if err != nil {
		return nil, fmt.Errorf("indexer: %w", err)
	}
	d.ri = ri
	// Until a node hears the indexer's first announcement (capacity 0), it
	// takes the indexer, which its DHT knows, for a crawler: its first
	// decisions would ask the indexer to probe and count the refusal.
	for wait := time.Now(); time.Since(wait) < 10*time.Second; time.Sleep(100 * time.Millisecond) {
		if !slices.ContainsFunc(d.nodes, func(dn *swarm.Node) bool { return dn.Overlay().MayCrawl(ri.ID()) }) {
			break
		}
	}
	return ri.Close, nil
}

// printNodes lists the nodes, their places and dashboards.
func (d *demo) printNodes() {
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "node\taddress\tlocation\tdashboard\n")
	for i, dn := range d.nodes {
		loc := d.w.Nodes()[i].Loc
		fmt.Fprintf(tw, "%d\t%s\t%s, %s\thttp://%s/\n", i, dn.Addr, loc.City, loc.Country, dn.DashboardAddr())
	}
	fmt.Fprintf(tw, "indexer\t127.0.0.1\t\thttp://%s/ (search)\n", d.ri.HTTPAddr())
	tw.Flush()
	fmt.Fprintf(d.out, "%d nodes and the indexer joined in %v\n", len(d.nodes), time.Since(d.start).Round(100*time.Millisecond))
}

// crawl seeds every site's home page, submitted through the nodes in
// turn (each submission delegates the site's subnet when nobody holds it
// yet: the IPMicra search, probes and all), and shows the progress until
// everything is crawled and indexed or the configured duration passed.
func (d *demo) crawl(ctx context.Context) error {
	c := d.c
	for _, s := range d.w.Sites() {
		if s.Hostile == world.NotHostile {
			d.seeds = append(d.seeds, s)
		}
	}
	crawlStart := time.Now()
	cctx, cancel := context.WithTimeout(ctx, c.Duration)
	defer cancel()
	var submitted, failed atomic.Int64
	var subWG sync.WaitGroup
	for k := range c.Submitters {
		dn := d.nodes[k%len(d.nodes)]
		subWG.Go(func() {
			for i := k; i < len(d.seeds); i += c.Submitters {
				res, err := dn.Submit(cctx, crawl.Request{Link: d.run.URL(d.seeds[i]), Depth: c.Depth})
				if err != nil {
					return
				}
				if len(res.Failed) > 0 {
					failed.Add(1)
					d.log.Warn("seed not submitted", "url", res.Failed[0].Link, "error", res.Failed[0].Err)
					continue
				}
				submitted.Add(1)
			}
		})
	}
	defer subWG.Wait()
	subDone := make(chan struct{})
	go func() { subWG.Wait(); close(subDone) }()

	fig := func() demoFigures { return figures(d.nodes, d.ri, submitted.Load(), len(d.seeds)) }
	tty := false
	if f, ok := d.errOut.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	var bar *progressbar.ProgressBar
	if tty {
		bar = progressbar.NewOptions64(int64(c.Duration/time.Second), progressbar.OptionSetWriter(d.errOut),
			progressbar.OptionSetDescription(fig().String()), progressbar.OptionSetPredictTime(false),
			progressbar.OptionShowElapsedTimeOnFinish(), progressbar.OptionSetWidth(20),
			progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	lastLine := time.Now()
	idleSince := time.Time{}
	cut := false // the duration ended the crawl
loop:
	for {
		select {
		case <-cctx.Done():
			cut = true
			break loop
		case <-tick.C:
		}
		f := fig()
		if bar != nil {
			bar.Describe(f.String())
			_ = bar.Set64(int64(time.Since(crawlStart) / time.Second))
		} else if time.Since(lastLine) >= 10*time.Second {
			fmt.Fprintf(d.out, "%6.0fs  %s\n", time.Since(crawlStart).Seconds(), f)
			lastLine = time.Now()
		}
		// Done: every seed submitted, every crawler idle, every link
		// handed on, every batch acknowledged, for two seconds in a row.
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
	f := fig()
	fmt.Fprintf(d.out, "crawl: %v, %s\n", time.Since(crawlStart).Round(100*time.Millisecond), f)
	if cut && !f.idle {
		fmt.Fprintf(d.out, "the crawl was cut off at --duration %v with %d URLs still queued and %d in flight: a longer --duration finishes it\n",
			c.Duration, f.queued, f.inFlight)
	}
	if n := failed.Load(); n > 0 {
		fmt.Fprintf(d.out, "%d seeds could not be submitted (see the log)\n", n)
	}
	return nil
}

// demoFigures is the line of figures the demo shows while it runs.
type demoFigures struct {
	delegated, seeds         int
	probes                   int64
	pages, wire, results     int64
	queued, inFlight, stored int64
	outbox                   int
	idle                     bool
}

func figures(nodes []*swarm.Node, ri *node.Indexer, submitted int64, seeds int) demoFigures {
	f := demoFigures{delegated: int(submitted), seeds: seeds, idle: true}
	for _, dn := range nodes {
		ds := dn.DelegationStats()
		f.probes += ds.Probes
		cs := dn.CrawlStats()
		f.pages += cs.Fetched
		f.wire += cs.WireBytes
		f.results += cs.RecordBytes
		f.queued += cs.Queued
		f.inFlight += cs.InFlight
		f.outbox += dn.OutboxStats().Batches
		if cs.Queued > 0 || cs.InFlight > 0 || cs.Outgoing > 0 {
			f.idle = false
		}
	}
	f.stored = int64(ri.Indexer().Index().Stats().Docs)
	if f.outbox > 0 {
		f.idle = false
	}
	return f
}

func (f demoFigures) String() string {
	ratio := "-"
	if f.results > 0 {
		ratio = fmt.Sprintf("1/%.0f", float64(f.wire)/float64(f.results))
	}
	return fmt.Sprintf("sites delegated %d/%d · probes %d · pages %d (queued %d) · result ratio %s · indexed %d",
		f.delegated, f.seeds, f.probes, f.pages, f.queued, ratio, f.stored)
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
	var judged, optimal, undelegated, cdn, inParts int
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
		o.Invalidate(r) // judged by the coordinators' state now, parts included
		d, ok, err := o.Resolve(ctx, s.Addrs[0])
		if err != nil || !ok {
			undelegated++
			continue
		}
		if d.Subnet != r {
			inParts++
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
	var nearest, tolerance span
	for _, dn := range nodes {
		st := dn.DelegationStats()
		probes += st.Probes
		balanced += st.HandOffs + st.SecondBest + st.Reruns
		nearest.add(st.Nearest)
		tolerance.add(st.Tolerance)
	}
	fmt.Fprintf(out, "Delegation quality: %d sites in %d subnets delegated by search, %d of them in parts delegated apart (not counting %d CDN sites, the nodes' own subnets, %d not delegated)\n",
		judged, len(subnets), inParts, cdn, undelegated)
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
	fmt.Fprintln(out, "(optimal: delegated to the node with the least RTT to the site; probes per new subnet: every probe the searches sent, the claim check's witnesses included, ÷ the subnets they delegated; excess: RTT beyond that node's)")
	switch {
	case nearest.n > 0:
		fmt.Fprintf(out, "The guided search's tolerance: %s (the density rule: an eighth of the median RTT from a node to its nearest other, %s as the coordinators measured it, within 2 ms and a fifth of the threshold).\n",
			tolerance, nearest)
	case tolerance.n > 0:
		fmt.Fprintf(out, "The guided search's tolerance: %s (a fifth of the threshold: no inter-node RTTs measured).\n", tolerance)
	}
	speed.print(out)
	if balanced > 0 {
		fmt.Fprintf(out, "Load balancing changed %d decisions (the chosen node was full: a held subnet handed off, the second-best node, or a search without the full nodes).\n", balanced)
	}
	return nil
}

// sampleSearch searches the indexer for the heaviest keyword of a crawled
// home page and for the structured data of the most common schema.org
// type among the sites, and prints the first hits.
func sampleSearch(ctx context.Context, out io.Writer, ri *node.Indexer, seeds []world.Site, run *world.Running) {
	x := ri.Indexer().Index()
	st := x.Stats()
	fmt.Fprintf(out, "Indexer: %d pages searchable, %d terms; search page http://%s/\n", st.Docs, st.Terms, ri.HTTPAddr())
	show := func(q string) bool {
		res, err := x.Search(ctx, index.Query{Text: q, Limit: 3})
		if err != nil {
			fmt.Fprintf(out, "search %q: %v\n", q, err)
			return true
		}
		if res.Total == 0 {
			return false
		}
		fmt.Fprintf(out, "micra search --api http://%s %s → %d pages, the first:\n", ri.HTTPAddr(), q, res.Total)
		for _, h := range res.Hits {
			types := ""
			if len(h.Types) > 0 {
				short := make([]string, len(h.Types))
				for i, t := range h.Types {
					short[i] = index.ShortName(t)
				}
				types = "  [" + strings.Join(short, ", ") + "]"
			}
			fmt.Fprintf(out, "  %.2f  %s  %s%s\n", h.Score, h.URL, h.Title, types)
		}
		return true
	}
	searched := false
	for _, s := range seeds {
		doc, err := x.Get(ctx, run.URL(s))
		if err != nil || len(doc.Keywords) == 0 {
			continue
		}
		searched = show(doc.Keywords[0].Term)
		break
	}
	if !searched {
		fmt.Fprintln(out, "no page indexed yet: nothing to search")
		return
	}
	// Structured data: the schema.org types of the sites, most common first.
	count := map[string]int{}
	for _, s := range seeds {
		if s.SchemaType != "" {
			count[s.SchemaType]++
		}
	}
	types := slices.Collect(maps.Keys(count))
	slices.SortFunc(types, func(a, b string) int { return cmp.Or(count[b]-count[a], strings.Compare(a, b)) })
	for _, t := range types {
		if show("type:" + t) {
			return
		}
	}
	fmt.Fprintln(out, "no page with structured data indexed yet")
}

// span is the least and greatest of the positive durations added.
type span struct {
	lo, hi time.Duration
	n      int
}

func (s *span) add(d time.Duration) {
	if d <= 0 {
		return
	}
	if s.n == 0 || d < s.lo {
		s.lo = d
	}
	s.hi = max(s.hi, d)
	s.n++
}

// String is "lo" or "lo–hi" in ms.
func (s span) String() string {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	if s.lo == s.hi {
		return fmt.Sprintf("%.1f ms", ms(s.lo))
	}
	return fmt.Sprintf("%.1f–%.1f ms", ms(s.lo), ms(s.hi))
}
