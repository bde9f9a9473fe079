package footprint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
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
	dir, cleanup, err := workDir(cfg.Keep)
	if err != nil {
		return Report{}, err
	}
	defer cleanup()
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
	rep.NodeArgs = append(fnet.nodeArgs(filepath.Join(dir, "measured"), bw), cfg.NodeArgs...)
	mn, err := startMeasured(ctx, cfg.Exe, rep.NodeArgs, filepath.Join(dir, "measured.log"))
	if err != nil {
		return Report{}, err
	}
	defer mn.stop()
	if err := mn.waitJoined(ctx, len(fnet.helpers)); err != nil {
		return Report{}, err
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
	sub := startSeeding(ctx, fnet.helpers[0], seeds, log)
	defer sub.stop()
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
	rep.Seeds, rep.SeedsLost = int(sub.submitted.Load()), int(sub.failed.Load())
	rep.Others = fnet.othersFetched(log)
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

// workDir returns the directory a run keeps its data and logs in: keep,
// made if need be, or a temporary one that cleanup removes.
func workDir(keep string) (dir string, cleanup func(), err error) {
	if keep != "" {
		return keep, func() {}, os.MkdirAll(keep, 0o700)
	}
	if dir, err = os.MkdirTemp("", "micra-bench-footprint-"); err != nil {
		return "", nil, err
	}
	return dir, func() { os.RemoveAll(dir) }, nil
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
