//go:build linux

package nattest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/micra-net/micra/node"
)

// buildMicra builds cmd/micra into dir.
func buildMicra(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "micra")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/micra-net/micra/cmd/micra").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// proc is one micra process running in a namespace of the lab.
type proc struct {
	name string // for the report: bootstrap, indexer, v1...
	role string // its namespace's
	log  string // its standard error, and its standard output prefixed
	cmd  *exec.Cmd
	done chan struct{}
	id   string   // peer id
	addr []string // the listen multiaddrs it printed, with /p2p/<id>
	api  *http.Client
}

// start runs "micra args..." in the namespace of role with "ip netns exec"
// and waits until it printed its peer id (a "node" or "indexer" line) and
// where its HTTP interface is ("dashboard on", "search on"). The cleanup
// kills it; its log stays in dir.
func (l *lab) start(name, role, bin, dir string, args ...string) *proc {
	t := l.t
	t.Helper()
	if lvl := os.Getenv("MICRA_NATTEST_LOG_LEVEL"); lvl != "" {
		if args[0] == "indexer" {
			args = append(args, "-v")
		} else {
			args = append(args, "--log-level", lvl)
		}
	}
	p := &proc{name: name, role: role, log: filepath.Join(dir, name+".log"), done: make(chan struct{}), api: l.client(role)}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(logf, "=== ip netns exec %s micra %s\n", l.name(role), strings.Join(args, " "))
	p.cmd = exec.Command("ip", append([]string{"netns", "exec", l.name(role), bin}, args...)...)
	p.cmd.Env = cleanEnv()
	// Should the test process die without its cleanups, so do the nodes.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.cmd.Stderr = logf
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			fmt.Fprintln(logf, "stdout:", sc.Text())
			select {
			case lines <- sc.Text():
			default:
			}
		}
		p.cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	api := false
	deadline := time.After(time.Minute)
	for p.id == "" || !api {
		select {
		case line := <-lines:
			switch {
			case strings.HasPrefix(line, "node "), strings.HasPrefix(line, "indexer "):
				p.id = line[strings.IndexByte(line, ' ')+1:]
			case strings.HasPrefix(line, "listening on "):
				p.addr = append(p.addr, strings.TrimPrefix(line, "listening on "))
			case strings.HasPrefix(line, "dashboard on "), strings.HasPrefix(line, "search on "):
				api = true
			}
		case <-p.done:
			t.Fatalf("%s exited at start:\n%s", name, p.logTail())
		case <-deadline:
			t.Fatalf("%s printed no identity within a minute:\n%s", name, p.logTail())
		}
	}
	return p
}

// cleanEnv is the environment without MICRA_* variables, which would
// configure the nodes.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MICRA_") {
			out = append(out, kv)
		}
	}
	return out
}

// logTail is the end of the process's log, for failure messages.
func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	return string(b)
}

// getJSON reads url, as seen from the process's namespace, into v.
func (p *proc) getJSON(ctx context.Context, url string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := p.api.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(v)
}

// status reads a node's /api/status from its dashboard on its namespace's
// loopback.
func (p *proc) status(ctx context.Context) (node.Status, error) {
	var st node.Status
	err := p.getJSON(ctx, "http://"+dashboardAddr+"/api/status", &st)
	return st, err
}

// dashboardAddr is where every node serves its dashboard: the default, on
// its own namespace's loopback.
const dashboardAddr = "127.0.0.1:7464"

// indexerAPI is where the indexer serves its API, in the hosting
// namespace beside the bootstrap node's dashboard.
const indexerAPI = "127.0.0.1:7465"

// timeline records when the test first saw each event, from the moment
// the volunteers started.
type timeline struct {
	mu    sync.Mutex
	start time.Time
	at    map[string]time.Duration
}

func newTimeline() *timeline { return &timeline{start: time.Now(), at: map[string]time.Duration{}} }

// mark records event at now, or at t when given, unless already recorded.
func (tl *timeline) mark(event string, at ...time.Time) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if _, ok := tl.at[event]; ok {
		return
	}
	now := time.Now()
	if len(at) > 0 && !at[0].IsZero() {
		now = at[0]
	}
	tl.at[event] = now.Sub(tl.start)
}

// get returns when event happened.
func (tl *timeline) get(event string) (time.Duration, bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	d, ok := tl.at[event]
	return d, ok
}

// show formats when event happened, "-" when it did not.
func (tl *timeline) show(event string) string {
	if d, ok := tl.get(event); ok {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return "-"
}
