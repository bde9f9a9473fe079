package reliability

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base32"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/micra-net/micra/bootstrap"
	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/indexer"
	"github.com/micra-net/micra/indexer/index"
	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/internal/world/worldtest"
	"github.com/micra-net/micra/node"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/overlay/delegate"
	"github.com/micra-net/micra/results"
	"github.com/micra-net/micra/subnet"
)

// long reports whether the long forms run (MICRA_LONG=1).
func long() bool { return os.Getenv("MICRA_LONG") != "" && os.Getenv("MICRA_LONG") != "0" }

// short picks the CI form's value or the long form's.
func short[T any](ci, lng T) T {
	if long() {
		return lng
	}
	return ci
}

// needProcesses skips a scenario when it cannot run here: under the race
// detector (see raceEnabled), with -short, off Linux, or without the
// shared latency data (unless CI is set, where the data must be there).
func needProcesses(t *testing.T) {
	t.Helper()
	switch {
	case raceEnabled:
		t.Skip("process-level scenarios skip under the race detector: the binary under test is built without it")
	case testing.Short():
		t.Skip("process-level scenario: not with -short")
	case runtime.GOOS != "linux":
		t.Skip("process-level scenarios need loopback addresses beyond 127.0.0.1 (Linux)")
	}
}

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// micraBinary builds cmd/micra once per test process.
func micraBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "micra-reliability-"); buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "micra")
		cmd := exec.Command("go", "build", "-o", buildBin, "github.com/micra-net/micra/cmd/micra")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// clusterConfig is what a scenario's cluster looks like.
type clusterConfig struct {
	sites, nodes int   // of the world: sites, and volunteer addresses (at least the nodes started)
	seed         int64 // of the world
	scale        float64
	liveness     time.Duration // --liveness of every node
	batchWait    time.Duration // --batch-wait of every node
}

// cluster is one scenario's emulated Internet, subnet snapshot, indexer
// (in this process) and "micra node" processes.
type cluster struct {
	t    *testing.T
	cfg  clusterConfig
	bin  string
	dir  string
	run  *world.Running
	w    *world.World
	tree *subnet.Tree
	snap string
	log  *slog.Logger // the harness's and the indexer's log, in dir/harness.log
	ix   *indexerRig

	mu    sync.Mutex
	nodes []*proc
}

func newCluster(t *testing.T, cfg clusterConfig) *cluster {
	t.Helper()
	needProcesses(t)
	c := &cluster{t: t, cfg: cfg, bin: micraBinary(t), dir: t.TempDir()}
	if d := os.Getenv("MICRA_RELIABILITY_KEEP"); d != "" {
		c.dir = filepath.Join(d, t.Name())
		os.RemoveAll(c.dir)
		if err := os.MkdirAll(c.dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	lf, err := os.Create(filepath.Join(c.dir, "harness.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lf.Close() })
	c.log = slog.New(slog.NewTextHandler(lf, nil))
	p := worldtest.Params(cfg.seed, cfg.sites, cfg.nodes)
	c.run = worldtest.Start(t, p, world.TimeScale(cfg.scale), world.Logger(c.log.With("subsystem", "world")))
	c.w = c.run.World()
	if c.tree, err = c.w.Tree(t.Context()); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := c.tree.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	c.snap = filepath.Join(c.dir, "world.snapshot")
	if err := os.WriteFile(c.snap, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	c.ix = &indexerRig{c: c, dir: filepath.Join(c.dir, "indexer"), port: freePort(t, netip.MustParseAddr("127.0.0.1"))}
	// Processes die before the world and the indexer close (cleanups run
	// last first).
	t.Cleanup(func() {
		c.ix.close()
	})
	t.Cleanup(func() {
		for _, p := range c.all() {
			p.kill()
		}
	})
	return c
}

func (c *cluster) all() []*proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*proc(nil), c.nodes...)
}

// live returns the node processes running now.
func (c *cluster) live() []*proc {
	var out []*proc
	for _, p := range c.all() {
		if p.running() {
			out = append(out, p)
		}
	}
	return out
}

// freePort finds a TCP port free on addr, to listen on it again later: a
// node keeps its multiaddr across restarts, as a volunteer's does.
func freePort(t *testing.T, addr netip.Addr) int {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// proc is one volunteer: a data directory, a world address, a fixed
// libp2p port, and the "micra node" process running on them, if any.
type proc struct {
	c    *cluster
	i    int // index of its address in the world's nodes
	dir  string
	addr netip.Addr
	port int

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when the process has exited
	id     string
	maddr  string
	dash   string
	starts int
}

// addNode makes the volunteer at world address i (not started).
func (c *cluster) addNode(i int) *proc {
	wn := c.w.Nodes()[i]
	p := &proc{c: c, i: i, dir: filepath.Join(c.dir, fmt.Sprintf("node-%02d", i)), addr: wn.Addr, port: freePort(c.t, wn.Addr)}
	c.mu.Lock()
	c.nodes = append(c.nodes, p)
	c.mu.Unlock()
	return p
}

// nearerCount is how many of the world's sites world node i is nearer to
// than world node j.
func (c *cluster) nearerCount(i, j int) int {
	ns := c.w.Nodes()
	n := 0
	for _, s := range c.w.Sites() {
		if c.w.RTT(ns[i].Addr, s) < c.w.RTT(ns[j].Addr, s) {
			n++
		}
	}
	return n
}

// bootstrapFor lists up to four running nodes other than p.
func (c *cluster) bootstrapFor(p *proc) []string {
	var out []string
	for _, q := range c.live() {
		if q != p && len(out) < 4 {
			out = append(out, q.multiaddr())
		}
	}
	return out
}

// start runs "micra node" on p's data directory and waits until it
// printed its identity, listen address and dashboard.
func (p *proc) start(extra ...string) {
	t := p.c.t
	t.Helper()
	args := []string{"node",
		"--data-dir", p.dir,
		"--listen", fmt.Sprintf("/ip4/%s/tcp/%d", p.addr, p.port),
		"--source-addr", p.addr.String(),
		"--dns", p.c.run.DNS().String(),
		"--allow-private-networks", "--allow-ports", fmt.Sprint(p.c.run.Port()),
		"--snapshot", p.c.snap,
		"--dashboard", "127.0.0.1:0",
		"--memory-limit", "0", "--bandwidth", "0",
		"--liveness", p.c.cfg.liveness.String(),
		"--batch-wait", p.c.cfg.batchWait.String(),
	}
	if lvl := os.Getenv("MICRA_RELIABILITY_LOG_LEVEL"); lvl != "" {
		args = append(args, "--log-level", lvl)
	}
	if boot := p.c.bootstrapFor(p); len(boot) > 0 {
		args = append(args, "--bootstrap", strings.Join(boot, ","))
	}
	args = append(args, extra...)
	logf, err := os.OpenFile(filepath.Join(p.dir+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(logf, "=== start %d: micra %s\n", p.starts+1, strings.Join(args, " "))
	cmd := exec.Command(p.c.bin, args...)
	cmd.Env = cleanEnv()
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			fmt.Fprintln(logf, "stdout:", sc.Text())
			select {
			case lines <- sc.Text():
			default:
			}
		}
		cmd.Wait()
		logf.Close()
		close(done)
	}()
	var id, maddr, dash string
	deadline := time.After(60 * time.Second)
	for id == "" || maddr == "" || dash == "" {
		select {
		case l := <-lines:
			switch {
			case strings.HasPrefix(l, "node "):
				id = strings.TrimPrefix(l, "node ")
			case strings.HasPrefix(l, "listening on "):
				maddr = strings.TrimPrefix(l, "listening on ")
			case strings.HasPrefix(l, "dashboard on "):
				dash = strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(l, "dashboard on "), "http://"), "/")
			}
		case <-done:
			t.Fatalf("node %d exited at start %d:\n%s", p.i, p.starts+1, p.logTail())
		case <-deadline:
			cmd.Process.Kill()
			<-done
			t.Fatalf("node %d printed no address within a minute:\n%s", p.i, p.logTail())
		}
	}
	p.mu.Lock()
	p.cmd, p.done, p.id, p.maddr, p.dash = cmd, done, id, maddr, dash
	p.starts++
	p.mu.Unlock()
	p.c.log.Info("node started", "node", p.i, "peer", id, "start", p.starts)
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

// kill sends SIGKILL and waits for the process to exit.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
	p.c.log.Info("node killed", "node", p.i, "peer", p.peerID())
}

func (p *proc) running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

func (p *proc) peerID() string    { p.mu.Lock(); defer p.mu.Unlock(); return p.id }
func (p *proc) multiaddr() string { p.mu.Lock(); defer p.mu.Unlock(); return p.maddr }

// logTail is the end of the node's log, for failure messages.
func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.dir + ".log")
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// status reads the node's /api/status.
func (p *proc) status(ctx context.Context) (node.Status, error) {
	var st node.Status
	p.mu.Lock()
	dash := p.dash
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+dash+"/api/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return st, fmt.Errorf("status %s: %s", resp.Status, b)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// mustStatus is status, failing the test on error.
func (p *proc) mustStatus() node.Status {
	p.c.t.Helper()
	st, err := p.status(p.c.t.Context())
	if err != nil {
		p.c.t.Fatalf("node %d: %v", p.i, err)
	}
	return st
}

// waitFor polls cond every half second until it holds or limit passes;
// it returns whether it held.
func waitFor(ctx context.Context, limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// indexerRig is the indexer, in the test process on 127.0.0.1 at a fixed
// port, as cmd/micra's startIndexer builds it; it can be closed and
// started again on the same directory.
type indexerRig struct {
	c    *cluster
	dir  string
	port int

	db  *badger.DB
	x   *index.Index
	h   host.Host
	o   *overlay.Overlay
	ix  *indexer.Indexer
	ran int // incarnations

	// Counters of the closed incarnations, added up.
	prev indexer.Stats
}

// start opens the indexer and joins it through the running nodes.
func (r *indexerRig) start() {
	t := r.c.t
	t.Helper()
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sk, err := overlay.LoadIdentity(filepath.Join(r.dir, "identity.key"))
	if err != nil {
		t.Fatal(err)
	}
	if r.db, err = badger.Open(badger.DefaultOptions(filepath.Join(r.dir, "db")).WithLogger(nil).
		WithMemTableSize(32 << 20).WithNumMemtables(3).WithNumVersionsToKeep(1)); err != nil {
		t.Fatal(err)
	}
	log := r.c.log.With("subsystem", "indexer")
	if r.x, err = index.New(r.db, index.Logger(log)); err != nil {
		t.Fatal(err)
	}
	listen := ma.StringCast(fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", r.port))
	if r.h, err = overlay.NewHost(sk, overlay.ListenAddrs(listen), overlay.Reachability(network.ReachabilityPublic), overlay.NoRelayService()); err != nil {
		t.Fatal(err)
	}
	del, err := delegate.New(delegate.Logger(log))
	if err != nil {
		t.Fatal(err)
	}
	var peers []peer.AddrInfo
	for _, p := range r.c.live() {
		if ai, err := peer.AddrInfoFromString(p.multiaddr()); err == nil {
			peers = append(peers, *ai)
		}
	}
	if r.o, err = overlay.New(r.h, r.c.tree, r.db, overlay.WithDelegator(del),
		overlay.Announce(2*time.Second), overlay.NoCrawl(), overlay.BootstrapPeers(peers), overlay.Cache(4096, time.Second),
		// The indexer coordinates shards like any peer: it must orphan
		// silent crawlers on the nodes' schedule (their --liveness).
		overlay.Liveness(r.c.cfg.liveness/10, r.c.cfg.liveness), overlay.Maintenance(min(r.c.cfg.liveness/4, 15*time.Second), 30*time.Second),
		overlay.Egress(egress.Policy{AllowPrivate: true}), // as micra indexer --allow-private-networks
		overlay.Logger(log)); err != nil {
		t.Fatal(err)
	}
	resolver, err := r.c.run.Resolver(r.c.w.Nodes()[0].Addr)
	if err != nil {
		t.Fatal(err)
	}
	if r.ix, err = indexer.New(r.o, r.x, r.db, indexer.AnnounceEvery(2*time.Second), indexer.Logger(log),
		indexer.Resolve(func(ctx context.Context, h string) (netip.Addr, error) {
			if a, err := netip.ParseAddr(h); err == nil {
				return a, nil
			}
			as, err := resolver.LookupNetIP(ctx, "ip4", h)
			if err != nil || len(as) == 0 {
				return netip.Addr{}, fmt.Errorf("resolving %s: %v", h, err)
			}
			return as[0].Unmap(), nil
		})); err != nil {
		t.Fatal(err)
	}
	r.ran++
	if len(peers) > 0 {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if _, err := bootstrap.Join(ctx, r.h, r.h.ID(), peers); err != nil {
			t.Fatalf("indexer: %v", err)
		}
		if err := r.o.Bootstrap(ctx); err != nil {
			t.Fatalf("indexer: %v", err)
		}
	}
	r.c.log.Info("indexer started", "peer", r.h.ID(), "incarnation", r.ran)
}

// close shuts the indexer down in cmd/micra's order; idempotent.
func (r *indexerRig) close() {
	if r.db == nil {
		return
	}
	// The counters are read once the indexer is closed: Close waits for
	// the batches being stored, and a batch stored after an earlier
	// reading would be in the replay table but in no counter (and its
	// node, unacknowledged, sends it again to the next incarnation, which
	// counts it as a duplicate).
	closeIndexer := func() error {
		err := r.ix.Close()
		r.prev = addStats(r.prev, r.ix.Stats())
		return err
	}
	for _, f := range []func() error{closeIndexer, r.o.Close, r.h.Close, func() error { r.x.Close(); return nil }, r.db.Close} {
		if err := f(); err != nil {
			r.c.t.Errorf("closing the indexer: %v", err)
		}
	}
	r.db = nil
	r.c.log.Info("indexer closed")
}

func (r *indexerRig) up() bool { return r.db != nil }

// stats are the indexer's counters over all its incarnations.
func (r *indexerRig) stats() indexer.Stats {
	if r.db == nil {
		return r.prev
	}
	return addStats(r.prev, r.ix.Stats())
}

func addStats(a, b indexer.Stats) indexer.Stats {
	a.Messages += b.Messages
	a.Batches += b.Batches
	a.Records += b.Records
	a.Duplicates += b.Duplicates
	a.Rejected += b.Rejected
	a.Conflicts += b.Conflicts
	a.Refused += b.Refused
	a.Acks += b.Acks
	return a
}

// seen is the indexer's replay table: the batches it stored, by node and
// sequence number (key layout in results/keys.go).
func (r *indexerRig) seen() map[string]map[uint64]bool {
	out := map[string]map[uint64]bool{}
	if r.db == nil {
		return out
	}
	prefix := []byte(results.Prefix + "seen/")
	_ = r.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
			// <b32 node>/<seq:8>; the sequence number's bytes may hold a '/'.
			k := it.Item().Key()[len(prefix):]
			slash := len(k) - 9
			if slash < 1 || k[slash] != '/' {
				continue
			}
			raw, err := b32.DecodeString(string(k[:slash]))
			if err != nil {
				continue
			}
			id := peer.ID(raw).String()
			if out[id] == nil {
				out[id] = map[uint64]bool{}
			}
			out[id][binary.BigEndian.Uint64(k[slash+1:])] = true
		}
		return nil
	})
	return out
}

// b32 is the encoding of peer ids in results' keys.
var b32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// seenCount is how many distinct batches the replay table holds.
func seenCount(s map[string]map[uint64]bool) int {
	n := 0
	for _, m := range s {
		n += len(m)
	}
	return n
}

// submit sends seeds into the overlay through the indexer, retrying the
// ones that fail (a subnet's delegation may need a few tries while the
// overlay forms); it returns the seeds that never went.
func (r *indexerRig) submit(ctx context.Context, reqs []crawl.Request) []crawl.Request {
	const chunk, parallel = 4, 8 // a new subnet's delegation runs probes: submit several at once
	for attempt := 0; attempt < 6 && len(reqs) > 0; attempt++ {
		if attempt > 0 {
			time.Sleep(2 * time.Second)
		}
		var (
			mu     sync.Mutex
			failed []crawl.Request
			wg     sync.WaitGroup
			sem    = make(chan struct{}, parallel)
		)
		for i := 0; i < len(reqs); i += chunk {
			part := reqs[i:min(i+chunk, len(reqs))]
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				sctx, cancel := context.WithTimeout(ctx, time.Minute)
				res, err := r.ix.Submit(sctx, part)
				cancel()
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed = append(failed, part...)
					r.c.log.Warn("submitting seeds failed", "error", err)
					return
				}
				byLink := map[string]crawl.Request{}
				for _, q := range part {
					byLink[q.Link] = q
				}
				for _, f := range res.Failed {
					failed = append(failed, byLink[f.Link])
					r.c.log.Warn("seed not submitted", "url", f.Link, "error", f.Err)
				}
			})
		}
		wg.Wait()
		reqs = failed
	}
	return reqs
}

// indexed reports whether the indexer holds a record of url.
func (r *indexerRig) indexed(ctx context.Context, url string) bool {
	if r.db == nil {
		return false
	}
	_, err := r.x.Get(ctx, url)
	return err == nil || errors.Is(err, index.ErrGone)
}

// seeds are the home pages of the world's sites that a polite crawler
// must index: not hostile, not flaky, allowed by robots.txt, answering
// 200.
func (c *cluster) seeds() []crawl.Request {
	var out []crawl.Request
	for _, s := range c.w.Sites() {
		if s.Hostile != world.NotHostile || s.Flaky || s.Pages == 0 {
			continue
		}
		if s.Robots == world.RobotsError {
			continue // nothing may be crawled (RFC 9309 2.3.1.4)
		}
		home := c.w.Pages(s)[0]
		if home.Disallowed || home.Status != http.StatusOK {
			continue
		}
		out = append(out, crawl.Request{Link: c.run.URL(s), Depth: 1})
	}
	return out
}

// nodeOutbox opens a stopped node's database, as a test of its integrity,
// and returns the sequence numbers of the batches in its outbox and the
// number of URLs queued in its frontier.
func nodeOutbox(t *testing.T, dir string) (seqs []uint64, queued int) {
	t.Helper()
	db, err := badger.Open(crawl.BadgerOptions(filepath.Join(dir, "db")).WithLogger(nil))
	if err != nil {
		t.Fatalf("the database of %s does not open after SIGKILL: %v", dir, err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Errorf("closing %s: %v", dir, err)
		}
	}()
	out := []byte(results.Prefix + "out/")
	q := []byte("/crawl/q/")
	err = db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false})
		defer it.Close()
		for it.Seek(out); it.ValidForPrefix(out); it.Next() {
			k := it.Item().Key()
			if len(k) == len(out)+8 {
				seqs = append(seqs, binary.BigEndian.Uint64(k[len(out):]))
			}
		}
		for it.Seek(q); it.ValidForPrefix(q); it.Next() {
			queued++
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading %s: %v", dir, err)
	}
	return seqs, queued
}
