// Package footprint measures one volunteer node's CPU and memory: a real
// "micra node" process joined to a small network on an emulated Internet
// served by this process (peers that coordinate shards but never crawl,
// and an indexer), idle and then crawling at its bandwidth cap, read from
// /proc every second (micra bench footprint; docs/performance.md).
package footprint

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/indexer"
	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/node"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/subnet"
)

// Goals of a volunteer's footprint: idle at most 1 % of one core
// and 80 MB resident; crawling at the bandwidth cap at most 150 MB.
const (
	goalIdleCPU  = 1.0 // % of one core, mean over the idle phase
	goalIdleRSS  = 80e6
	goalCrawlRSS = 150e6
)

// numHelpers is the number of non-crawling peers the measured node
// joins, besides the indexer.
const numHelpers = 2

// Report is a run's result (micra bench footprint --json prints it).
type Report struct {
	Bandwidth int64      `json:"bandwidth"`      // the node's cap, bytes per second (0: none)
	NodeArgs  []string   `json:"node_args"`      // the measured node's command line, after "micra"
	Sites     int        `json:"sites"`          // of the world
	Seeds     int        `json:"seeds"`          // submitted by the end
	SeedsLost int        `json:"seeds_lost"`     // not submitted after three tries
	Others    int64      `json:"others_fetched"` // pages the other peers fetched: 0 when every subnet went to the measured node
	Scale     float64    `json:"scale"`          // the world's time scale
	Cores     int        `json:"cores"`          // of this machine
	LoadStart [3]float64 `json:"load_start"`
	LoadEnd   [3]float64 `json:"load_end"`
	Phases    []Phase    `json:"phases"`
	Goals     Goals      `json:"goals"`
	Elapsed   float64    `json:"elapsed_s"`
}

// Phase is what one phase measured. CPU is in % of one core (100:
// a whole core), memory in bytes.
type Phase struct {
	Name     string  `json:"name"` // idle or crawl
	Seconds  float64 `json:"seconds"`
	Samples  int     `json:"samples"`
	CPUMean  float64 `json:"cpu_mean"` // CPU time over the phase ÷ its duration
	CPUP95   float64 `json:"cpu_p95"`  // of the one-second samples
	CPUMax   float64 `json:"cpu_max"`
	RSSMean  int64   `json:"rss_mean"` // VmRSS
	RSSMax   int64   `json:"rss_max"`
	AnonMax  int64   `json:"rss_anon_max"` // RssAnon: the heap, stacks, badger's allocations
	FileMax  int64   `json:"rss_file_max"` // RssFile: the binary's and badger's mapped files
	HWM      int64   `json:"hwm"`          // the process's peak so far: VmHWM, or the highest VmRSS sampled if above it
	Threads  int     `json:"threads"`      // at the phase's end
	Go       goHeap  `json:"go"`           // the runtime's figures at the phase's end (from /metrics)
	HeapMax  int64   `json:"heap_inuse_max"`
	Fetched  int64   `json:"fetched"`     // pages fetched in the phase
	Bytes    int64   `json:"bytes"`       // bytes downloaded in the phase
	Rate     float64 `json:"bytes_per_s"` // Bytes over the time between the status reads at the phase's start and end
	Queued   int64   `json:"queued"`      // URLs queued at the phase's end
	Hosts    int64   `json:"hosts"`       // hosts with queued URLs at the phase's end
	Subnets  int     `json:"subnets"`     // delegated to the node at the phase's end
	Acked    int64   `json:"acked"`       // result batches the indexer acknowledged by the phase's end
	AtCapPct float64 `json:"at_cap_pct,omitempty"`
}

// goHeap are Go runtime figures the node's /metrics exports.
type goHeap struct {
	HeapInuse    int64 `json:"heap_inuse"`
	HeapAlloc    int64 `json:"heap_alloc"`
	HeapIdle     int64 `json:"heap_idle"`
	HeapReleased int64 `json:"heap_released"`
	StackInuse   int64 `json:"stack_inuse"`
	Sys          int64 `json:"sys"`
	Goroutines   int64 `json:"goroutines"`
	GCs          int64 `json:"gc_cycles"`
}

// Goals says which goals the run met.
type Goals struct {
	IdleCPU  bool `json:"idle_cpu"`  // mean ≤ 1 % of a core
	IdleRSS  bool `json:"idle_rss"`  // max ≤ 80 MB
	CrawlRSS bool `json:"crawl_rss"` // max ≤ 150 MB
	AtCap    bool `json:"at_cap"`    // fetched at ≥ 80 % of the cap (or no cap)
}

// Config is one run. Exe is the micra binary the measured node runs as;
// NodeArgs go to it after the bench's own flags.
type Config struct {
	Exe                         string
	Idle, Crawl, Warmup, Settle time.Duration
	Bandwidth                   int64 // the node's cap, bytes per second (0: none)
	Sites, Depth                int
	Scale                       float64
	Seed                        int64
	Data                        string // the shared data directory ("": the default search)
	Keep                        string // keep data directories and logs here ("": a temporary directory, removed)
	NodeArgs                    []string
	Progress                    io.Writer // a line per step
}

// Run measures one node: the network up, the node joined, idle for
// cfg.Idle, seeded, warmed up to its cap and crawling for cfg.Crawl. It is
// bounded in time by the sum of the phases and five minutes. Linux only.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if runtime.GOOS != "linux" {
		return Report{}, errors.New("bench footprint reads the node's /proc/PID/stat and /proc/PID/status: it runs on Linux only")
	}
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	bw := cfg.Bandwidth
	ctx, cancel := context.WithTimeout(ctx, cfg.Settle+cfg.Idle+cfg.Warmup+cfg.Crawl+5*time.Minute)
	defer cancel()

	dir := cfg.Keep
	var err error
	if dir == "" {
		if dir, err = os.MkdirTemp("", "micra-bench-footprint-"); err != nil {
			return Report{}, err
		}
		defer os.RemoveAll(dir)
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return Report{}, err
	}
	logFile, err := os.Create(filepath.Join(dir, "bench.log"))
	if err != nil {
		return Report{}, err
	}
	defer logFile.Close()
	log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))

	start := time.Now()
	rep := Report{Bandwidth: bw, Sites: cfg.Sites, Scale: cfg.Scale, Cores: runtime.NumCPU(), LoadStart: loadAvg()}
	fnet, err := startLab(ctx, dir, labConfig{sites: cfg.Sites, seed: cfg.Seed, scale: cfg.Scale, data: cfg.Data, log: log})
	if err != nil {
		return Report{}, err
	}
	defer func() {
		if cerr := fnet.close(); cerr != nil {
			log.Warn("closing the network", "error", cerr)
		}
	}()
	fmt.Fprintf(progress, "network: %d sites, %d peers and an indexer; starting the measured node\n", len(fnet.w.Sites()), len(fnet.helpers))

	nodeArgs := []string{"node",
		"--data-dir", filepath.Join(dir, "measured"),
		"--listen", "/ip4/" + fnet.addr.String() + "/tcp/0",
		"--source-addr", fnet.addr.String(),
		"--dns", fnet.run.DNS().String(),
		"--allow-private-networks", "--allow-ports", strconv.Itoa(fnet.run.Port()),
		"--snapshot", fnet.snap,
		"--dashboard", "127.0.0.1:0",
		"--bandwidth", strconv.FormatInt(bw, 10),
		// Pages per day offered: the default, 10,000, is what a day of a
		// home line's light load fetches in minutes at the cap; a node
		// over its capacity gets no new subnets, and the crawl would run
		// dry of hosts instead of running at the cap.
		"--capacity", "10000000",
		"--bootstrap", strings.Join(fnet.bootstrap(), ","),
	}
	nodeArgs = append(nodeArgs, cfg.NodeArgs...)
	rep.NodeArgs = nodeArgs
	mn, err := startMeasured(ctx, cfg.Exe, nodeArgs, filepath.Join(dir, "measured.log"))
	if err != nil {
		return Report{}, err
	}
	defer mn.stop()

	// Joined: connected to every peer and knowing the indexer.
	joinCtx, joinCancel := context.WithTimeout(ctx, 2*time.Minute)
	err = mn.waitStatus(joinCtx, func(st node.Status) bool { return st.Peers >= len(fnet.helpers)+1 && st.Indexers >= 1 })
	joinCancel()
	if err != nil {
		return Report{}, fmt.Errorf("the node did not join (peers and indexer known): %w\n%s", err, mn.logTail())
	}
	fmt.Fprintf(progress, "node %d joined; settling %v, then idle for %v\n", mn.pid, cfg.Settle, cfg.Idle)
	if err := sleepCtx(ctx, cfg.Settle); err != nil {
		return Report{}, err
	}

	idlePhase, err := mn.measure(ctx, "idle", cfg.Idle)
	if err != nil {
		return Report{}, err
	}
	rep.Phases = append(rep.Phases, idlePhase)

	// Seeds go in through a helper, in the background for the rest of the
	// run: each new subnet's delegation asks the node to probe it.
	seeds := seedsOf(fnet.run, cfg.Depth)
	subCtx, subCancel := context.WithCancel(ctx)
	var subWG sync.WaitGroup
	var submitted, failed atomic.Int64
	subWG.Go(func() { submitSeeds(subCtx, fnet.helpers[0], seeds, &submitted, &failed, log) })
	defer func() { subCancel(); subWG.Wait() }()
	fmt.Fprintf(progress, "seeding %d sites; warming up for at most %v\n", len(seeds), cfg.Warmup)
	if err := mn.warmUp(ctx, cfg.Warmup, bw); err != nil {
		return Report{}, err
	}
	fmt.Fprintf(progress, "crawling for %v\n", cfg.Crawl)
	crawlPhase, err := mn.measure(ctx, "crawl", cfg.Crawl)
	if err != nil {
		return Report{}, err
	}
	if bw > 0 {
		crawlPhase.AtCapPct = 100 * crawlPhase.Rate / float64(bw)
	}
	rep.Phases = append(rep.Phases, crawlPhase)
	rep.Seeds, rep.SeedsLost = int(submitted.Load()), int(failed.Load())
	for i, h := range fnet.helpers {
		f := h.CrawlStats().Fetched
		rep.Others += f
		if f > 0 {
			var holds []string
			for _, d := range h.Overlay().Owned() {
				holds = append(holds, d.Subnet.String())
			}
			log.Warn("a peer that does not crawl fetched pages", "peer", i+1, "fetched", f, "holds", holds)
		}
	}
	rep.LoadEnd = loadAvg()
	rep.Goals = Goals{
		IdleCPU:  idlePhase.CPUMean <= goalIdleCPU,
		IdleRSS:  float64(idlePhase.RSSMax) <= goalIdleRSS,
		CrawlRSS: float64(crawlPhase.RSSMax) <= goalCrawlRSS,
		AtCap:    bw == 0 || crawlPhase.Rate >= 0.8*float64(bw),
	}
	rep.Elapsed = time.Since(start).Seconds()
	return rep, nil
}

// Write prints rep as a table.
func (rep Report) Write(w io.Writer) {
	capText := "no bandwidth cap"
	if rep.Bandwidth > 0 {
		capText = "bandwidth cap " + humanize.IBytes(uint64(rep.Bandwidth)) + "/s"
	}
	fmt.Fprintf(w, "micra node footprint: %s; %d cores, load %.2f %.2f %.2f at the start, %.2f %.2f %.2f at the end\n",
		capText, rep.Cores, rep.LoadStart[0], rep.LoadStart[1], rep.LoadStart[2], rep.LoadEnd[0], rep.LoadEnd[1], rep.LoadEnd[2])
	fmt.Fprintf(w, "CPU in %% of one core; memory in MB (10^6 bytes); peak is VmHWM or the highest RSS sampled; Go heap in use at the phase's end (max)\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\ttime\tCPU mean\tCPU p95\tRSS mean\tRSS max\tanon\tfile\tpeak\tGo heap\tgoroutines\tpages\tbytes/s\t")
	mb := func(b int64) string { return fmt.Sprintf("%.1f", float64(b)/1e6) }
	for _, p := range rep.Phases {
		rate := "-"
		if p.Name == "crawl" {
			rate = humanize.IBytes(uint64(p.Rate)) + "/s"
			if p.AtCapPct > 0 {
				rate += fmt.Sprintf(" (%.0f %%)", p.AtCapPct)
			}
		}
		fmt.Fprintf(tw, "%s\t%.0fs\t%.2f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s (%s)\t%d\t%d\t%s\t\n", p.Name, p.Seconds, p.CPUMean, p.CPUP95,
			mb(p.RSSMean), mb(p.RSSMax), mb(p.AnonMax), mb(p.FileMax), mb(p.HWM), mb(p.Go.HeapInuse), mb(p.HeapMax), p.Go.Goroutines, p.Fetched, rate)
	}
	tw.Flush()
	ok := func(b bool) string {
		if b {
			return "met"
		}
		return "MISSED"
	}
	fmt.Fprintf(w, "\ngoals: idle CPU ≤ %.0f %% %s; idle RSS ≤ %.0f MB %s; crawling RSS ≤ %.0f MB %s; at the cap %s\n",
		goalIdleCPU, ok(rep.Goals.IdleCPU), goalIdleRSS/1e6, ok(rep.Goals.IdleRSS), goalCrawlRSS/1e6, ok(rep.Goals.CrawlRSS), ok(rep.Goals.AtCap))
	fmt.Fprintf(w, "%d sites seeded, world time scale %v; %.0f s in all\n", rep.Seeds, rep.Scale, rep.Elapsed)
	if rep.Others > 0 || rep.SeedsLost > 0 {
		fmt.Fprintf(w, "warning: %d seeds not submitted, %d pages fetched by the other peers: the node crawled less than it was given\n", rep.SeedsLost, rep.Others)
	}
}

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

// measured is the "micra node" process under measurement.
type measured struct {
	cmd     *exec.Cmd
	pid     int
	dash    string // its dashboard's address
	logPath string
	done    chan struct{} // closed when it exited
	once    sync.Once
}

// startMeasured runs exe with args, its stderr to logPath, and waits until
// it printed its dashboard's address.
func startMeasured(ctx context.Context, exe string, args []string, logPath string) (*measured, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, node.EnvPrefix) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.SysProcAttr = childAttr()
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting the node: %w", err)
	}
	m := &measured{cmd: cmd, pid: cmd.Process.Pid, logPath: logPath, done: make(chan struct{})}
	dash := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			fmt.Fprintln(logf, "stdout:", sc.Text())
			if a, ok := strings.CutPrefix(sc.Text(), "dashboard on http://"); ok {
				select {
				case dash <- strings.TrimSuffix(a, "/"):
				default:
				}
			}
		}
		_ = cmd.Wait()
		logf.Close()
		close(m.done)
	}()
	select {
	case m.dash = <-dash:
		return m, nil
	case <-m.done:
		return nil, fmt.Errorf("the node exited at start:\n%s", m.logTail())
	case <-time.After(time.Minute):
	case <-ctx.Done():
	}
	m.stop()
	return nil, fmt.Errorf("the node printed no dashboard address within a minute:\n%s", m.logTail())
}

// stop ends the node: SIGTERM, and SIGKILL when it has not exited within
// 30 seconds. Later calls return at once.
func (m *measured) stop() {
	m.once.Do(func() {
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.done:
		case <-time.After(30 * time.Second):
			_ = m.cmd.Process.Kill()
			<-m.done
		}
	})
}

func (m *measured) exited() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// logTail is the end of the node's log, for error messages.
func (m *measured) logTail() string {
	b, _ := os.ReadFile(m.logPath)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// status reads the node's /api/status.
func (m *measured) status(ctx context.Context) (node.Status, error) {
	return node.FetchStatus(ctx, m.dash, "")
}

// waitStatus polls the node's status every half second until cond holds.
func (m *measured) waitStatus(ctx context.Context, cond func(node.Status) bool) error {
	for {
		if m.exited() {
			return errors.New("the node exited")
		}
		if st, err := m.status(ctx); err == nil && cond(st) {
			return nil
		}
		if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
}

// warmUp waits until the node downloads at 90 % of its cap over five
// seconds, or for limit.
func (m *measured) warmUp(ctx context.Context, limit time.Duration, bw int64) error {
	deadline := time.Now().Add(limit)
	type point struct {
		t     time.Time
		bytes int64
	}
	var pts []point
	for time.Now().Before(deadline) {
		if m.exited() {
			return fmt.Errorf("the node exited while warming up:\n%s", m.logTail())
		}
		if st, err := m.status(ctx); err == nil {
			pts = append(pts, point{time.Now(), st.Crawl.Bytes})
			if len(pts) > 5 {
				a, b := pts[len(pts)-6], pts[len(pts)-1]
				if bw > 0 && float64(b.bytes-a.bytes)/b.t.Sub(a.t).Seconds() >= 0.9*float64(bw) {
					return nil
				}
			}
		}
		if err := sleepCtx(ctx, time.Second); err != nil {
			return err
		}
	}
	return nil
}

// footprintPoll is how often a phase reads the node's status and metrics:
// each read costs the node a little CPU, which a one-second poll would
// add to what is measured.
const footprintPoll = 10 * time.Second

// measure samples the node's CPU time and memory every second for d, and
// its status and metrics every footprintPoll and at the end.
func (m *measured) measure(ctx context.Context, name string, d time.Duration) (Phase, error) {
	ph := Phase{Name: name}
	st0, err := m.status(ctx)
	if err != nil {
		return ph, fmt.Errorf("%s: %w", name, err)
	}
	prev, err := readProcStat(m.pid)
	if err != nil {
		return ph, err
	}
	first, t0 := prev, time.Now()
	tPrev := t0
	var cpus []float64
	var rssSum float64
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	nextPoll := t0.Add(footprintPoll)
	for time.Since(t0) < d {
		select {
		case <-ctx.Done():
			return ph, ctx.Err()
		case <-m.done:
			return ph, fmt.Errorf("%s: the node exited:\n%s", name, m.logTail())
		case <-tick.C:
		}
		now := time.Now()
		cur, err := readProcStat(m.pid)
		if err != nil {
			return ph, err
		}
		mem, err := readProcStatus(m.pid)
		if err != nil {
			return ph, err
		}
		cpus = append(cpus, cpuPercent(cur-prev, now.Sub(tPrev)))
		prev, tPrev = cur, now
		rssSum += float64(mem.rss)
		ph.RSSMax = max(ph.RSSMax, mem.rss)
		ph.AnonMax = max(ph.AnonMax, mem.anon)
		ph.FileMax = max(ph.FileMax, mem.file)
		// The kernel raises VmHWM lazily (at unmaps and exits), so a sample
		// of VmRSS can exceed a later VmHWM: the peak is the higher.
		ph.HWM, ph.Threads = max(ph.HWM, mem.hwm, ph.RSSMax), mem.threads
		if now.After(nextPoll) {
			nextPoll = now.Add(footprintPoll)
			if g, err := m.goHeap(ctx); err == nil {
				ph.HeapMax = max(ph.HeapMax, g.HeapInuse)
			}
		}
	}
	ph.Seconds = time.Since(t0).Seconds()
	ph.Samples = len(cpus)
	if ph.Samples > 0 {
		ph.CPUMean = cpuPercent(prev-first, tPrev.Sub(t0))
		ph.CPUP95 = percentile(cpus, 0.95)
		ph.CPUMax = slices.Max(cpus)
		ph.RSSMean = int64(rssSum / float64(ph.Samples))
	}
	st1, err := m.status(ctx)
	if err != nil {
		return ph, fmt.Errorf("%s: %w", name, err)
	}
	if ph.Go, err = m.goHeap(ctx); err != nil {
		return ph, fmt.Errorf("%s: %w", name, err)
	}
	ph.HeapMax = max(ph.HeapMax, ph.Go.HeapInuse)
	ph.Fetched = st1.Crawl.Fetched - st0.Crawl.Fetched
	ph.Bytes = st1.Crawl.Bytes - st0.Crawl.Bytes
	if s := st1.Now.Sub(st0.Now).Seconds(); s > 0 {
		ph.Rate = float64(ph.Bytes) / s
	}
	ph.Queued, ph.Hosts, ph.Subnets, ph.Acked = st1.Crawl.Queued, st1.Crawl.Hosts, len(st1.Subnets), st1.Outbox.Acked
	return ph, nil
}

// goHeap reads the Go runtime's figures from the node's /metrics.
func (m *measured) goHeap(ctx context.Context) (goHeap, error) {
	var g goHeap
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.dash+"/metrics", nil)
	if err != nil {
		return g, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return g, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return g, fmt.Errorf("metrics: %s", resp.Status)
	}
	vals := parseMetrics(io.LimitReader(resp.Body, 8<<20))
	g = goHeap{
		HeapInuse: int64(vals["go_memstats_heap_inuse_bytes"]), HeapAlloc: int64(vals["go_memstats_heap_alloc_bytes"]),
		HeapIdle: int64(vals["go_memstats_heap_idle_bytes"]), HeapReleased: int64(vals["go_memstats_heap_released_bytes"]),
		StackInuse: int64(vals["go_memstats_stack_inuse_bytes"]), Sys: int64(vals["go_memstats_sys_bytes"]),
		Goroutines: int64(vals["go_goroutines"]), GCs: int64(vals["go_gc_duration_seconds_count"]),
	}
	if g.HeapInuse == 0 {
		return g, errors.New("metrics: no go_memstats_heap_inuse_bytes")
	}
	return g, nil
}

// parseMetrics reads the unlabelled samples of a Prometheus text
// exposition: name → value.
func parseMetrics(r io.Reader) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || strings.Contains(line, "{") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		f := strings.Fields(val)
		if !ok || len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			out[name] = v
		}
	}
	return out
}

// userHZ is the unit of the CPU times in /proc/PID/stat: USER_HZ, 100 on
// every Linux architecture Go supports.
const userHZ = 100

// readProcStat returns the process's CPU time (user and system, all
// threads) in clock ticks, from /proc/PID/stat.
func readProcStat(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: the fields
	// counted are those after it, from field 3 (state).
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[14-3], 10, 64)
	stime, err2 := strconv.ParseInt(f[15-3], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime or stime", pid)
	}
	return utime + stime, nil
}

// cpuPercent turns ticks of CPU time over wall time d into % of one core.
func cpuPercent(ticks int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return 100 * float64(ticks) / userHZ / d.Seconds()
}

// procMem are the memory figures of /proc/PID/status, in bytes.
type procMem struct {
	rss, hwm, anon, file int64
	threads              int
}

// readProcStatus reads VmRSS, VmHWM, RssAnon, RssFile and Threads.
func readProcStatus(pid int) (procMem, error) {
	var m procMem
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "VmRSS":
			m.rss = n << 10 // kB in the file are KiB
		case "VmHWM":
			m.hwm = n << 10
		case "RssAnon":
			m.anon = n << 10
		case "RssFile":
			m.file = n << 10
		case "Threads":
			m.threads = int(n)
		}
	}
	if m.rss == 0 {
		return m, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
	}
	return m, nil
}

// loadAvg is this machine's load average over 1, 5 and 15 minutes.
func loadAvg() [3]float64 {
	var out [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return out
	}
	for i, f := range strings.Fields(string(b)) {
		if i == 3 {
			break
		}
		out[i], _ = strconv.ParseFloat(f, 64)
	}
	return out
}

// percentile is the q-quantile of xs (nearest rank).
func percentile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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
