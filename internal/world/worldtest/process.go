package worldtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/micra-net/micra/internal/world"
)

// childEnv carries a ProcessConfig to the child; its presence makes
// ServeChild serve.
const childEnv = "MICRA_WORLDTEST_CHILD"

// ProcessConfig is how StartProcess serves a world: the world.Options it
// can pass to another process.
type ProcessConfig struct {
	Params    world.Params
	TimeScale float64       // world.TimeScale; 0 means 1
	Hostile   bool          // world.Hostile
	MaxDrip   time.Duration // world.HostileLimits, with MaxHuge; zero: the defaults
	MaxHuge   int64
}

// Process is a world served by a child process: the test binary run again,
// which must call ServeChild from TestMain. A test that measures its own
// memory or CPU serves its world this way, so that the world's servers
// (rendering, compressing, gzip bombs in flight) are not counted as its.
// Methods are safe for concurrent use.
type Process struct {
	w    *world.World
	cmd  *exec.Cmd
	port int
	dns  netip.AddrPort

	mu     sync.Mutex
	stdin  io.WriteCloser
	stdout *bufio.Reader
	done   chan struct{} // closed when the child has exited
}

// StartProcess generates the world cfg.Params describes (in this process
// too, for its oracle) and serves it from a child process until the test
// ends.
func StartProcess(tb testing.TB, cfg ProcessConfig) *Process {
	tb.Helper()
	w := Generate(tb, cfg.Params)
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	enc, err := json.Marshal(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(enc))
	cmd.Stderr = logWriter{tb}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting the world process: %v", err)
	}
	p := &Process{w: w, cmd: cmd, stdin: stdin, stdout: bufio.NewReaderSize(out, 1<<20), done: make(chan struct{})}
	tb.Cleanup(func() {
		if err := p.close(); err != nil {
			tb.Errorf("world process: %v", err)
		}
	})
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	var hello struct {
		Port int
		DNS  netip.AddrPort
	}
	if err := p.read(&hello, 2*time.Minute); err != nil {
		tb.Fatalf("world process did not start: %v", err)
	}
	p.port, p.dns = hello.Port, hello.DNS
	return p
}

// read decodes the child's next line into v, waiting at most d.
func (p *Process) read(v any, d time.Duration) error {
	type result struct {
		line string
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		line, err := p.stdout.ReadString('\n')
		ch <- result{line, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return r.err
		}
		return json.Unmarshal([]byte(r.line), v)
	case <-time.After(d):
		_ = p.cmd.Process.Kill()
		return fmt.Errorf("no answer in %v", d)
	}
}

// close ends the child (EOF on its stdin, then a kill after 30 s).
func (p *Process) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("did not exit in 30 s; killed")
	}
	if s := p.cmd.ProcessState; s != nil && !s.Success() {
		return fmt.Errorf("exited: %v", s)
	}
	return nil
}

// World returns the world served.
func (p *Process) World() *world.World { return p.w }

// Port returns the port every site and the DNS server listen on.
func (p *Process) Port() int { return p.port }

// DNS returns the world DNS server's address.
func (p *Process) DNS() netip.AddrPort { return p.dns }

// URL returns the home page URL of s.
func (p *Process) URL(s world.Site) string { return s.URL(p.port) }

// Resolver returns a resolver asking the world's DNS server from from.
func (p *Process) Resolver(from netip.Addr) (*net.Resolver, error) {
	return world.Resolver(p.dns, from)
}

// Stats is what Process.Stats reports.
type Stats struct {
	Sites []world.Counters // by site ID
	// PeakRSS is the child's peak resident set (VmHWM) in bytes, 0 where
	// /proc is missing.
	PeakRSS int64
}

// Stats asks the child for every site's counters and its peak RSS.
func (p *Process) Stats() (Stats, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var st Stats
	if _, err := io.WriteString(p.stdin, "stats\n"); err != nil {
		return st, err
	}
	err := p.read(&st, time.Minute)
	return st, err
}

// ServeChild serves a world and exits if this process was started by
// StartProcess; otherwise it returns at once. Call it first in TestMain.
func ServeChild() {
	v := os.Getenv(childEnv)
	if v == "" {
		return
	}
	if err := serveChild(v); err != nil {
		fmt.Fprintln(os.Stderr, "world process:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func serveChild(v string) error {
	var cfg ProcessConfig
	if err := json.Unmarshal([]byte(v), &cfg); err != nil {
		return err
	}
	ctx := context.Background()
	w, err := world.Generate(ctx, cfg.Params)
	if err != nil {
		return err
	}
	opts := []world.Option{world.Port(0), world.Hostile(cfg.Hostile),
		world.Logger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))}
	if cfg.TimeScale > 0 {
		opts = append(opts, world.TimeScale(cfg.TimeScale))
	}
	if cfg.MaxDrip > 0 && cfg.MaxHuge > 0 {
		opts = append(opts, world.HostileLimits(cfg.MaxDrip, cfg.MaxHuge))
	}
	run, err := w.Start(ctx, opts...)
	if err != nil {
		return err
	}
	defer run.Close()
	out := json.NewEncoder(os.Stdout)
	if err := out.Encode(map[string]any{"Port": run.Port(), "DNS": run.DNS()}); err != nil {
		return err
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() != "stats" {
			return fmt.Errorf("unknown command %q", in.Text())
		}
		st := Stats{PeakRSS: procStatus("VmHWM")}
		for _, s := range w.Sites() {
			st.Sites = append(st.Sites, run.Counters(s))
		}
		if err := out.Encode(st); err != nil {
			return err
		}
	}
	return in.Err() // EOF: the parent is done
}

// procStatus returns a "kB" line of /proc/self/status in bytes, 0 if
// there is none.
func procStatus(key string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
