package footprint

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/micra-net/micra/node"
)

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

// waitJoined waits, at most 2 minutes, until the node is connected to
// every one of helpers peers and knows the indexer.
func (m *measured) waitJoined(ctx context.Context, helpers int) error {
	joinCtx, joinCancel := context.WithTimeout(ctx, 2*time.Minute)
	err := m.waitStatus(joinCtx, func(st node.Status) bool { return st.Peers >= helpers+1 && st.Indexers >= 1 })
	joinCancel()
	if err != nil {
		return fmt.Errorf("the node did not join (peers and indexer known): %w\n%s", err, m.logTail())
	}
	return nil
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
