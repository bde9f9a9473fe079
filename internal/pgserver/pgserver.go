//go:build unix

package pgserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// superuser is the cluster's superuser role, the user of every DSN.
	superuser = "postgres"

	// runAsUser is the system user that initdb and postgres run as when
	// the caller is root; Debian's postgresql packages create it.
	runAsUser = "postgres"

	// initdbTimeout bounds initdb, which takes about a second without
	// fsync but more on a loaded CI machine.
	initdbTimeout = 2 * time.Minute

	// readyTimeout bounds how long Start polls for the first connection
	// to a started postgres, and readyPoll is the pause between tries.
	// Recovery-free startup of a fresh cluster takes well under a second.
	readyTimeout = 30 * time.Second
	readyPoll    = 100 * time.Millisecond
	readyTries   = int(readyTimeout / readyPoll)

	// connectTimeout bounds one connection attempt, including its query.
	connectTimeout = 5 * time.Second

	// createTimeout bounds CreateDB beyond the caller's context: copying
	// template1 of a fresh cluster takes milliseconds.
	createTimeout = time.Minute

	// portTries is how many free ports Start tries: another process may
	// take the port between Start's probe and postgres's bind.
	portTries = 5

	// stopTimeout bounds a fast shutdown (SIGINT), killTimeout the wait
	// after SIGKILL, and waitDelay how long a wait for postgres's exit
	// lingers for its output pipe, which its children may still hold.
	stopTimeout = 30 * time.Second
	killTimeout = 10 * time.Second
	waitDelay   = 5 * time.Second

	// maxSocketPath is the longest Unix socket path every unix system
	// accepts (sun_path is 104 bytes with its NUL on BSD and macOS, 108 on
	// Linux).
	maxSocketPath = 103

	// tailBytes is how much of a program's latest output errors quote.
	tailBytes = 4 << 10
)

// settings are the -c options of every server: TCP on loopback only, and
// the durability that a throwaway cluster does not need traded for speed.
// max_connections bounds the connections a test may hold at once.
var settings = []string{
	"listen_addresses=127.0.0.1",
	"fsync=off",
	"synchronous_commit=off",
	"full_page_writes=off",
	"max_connections=50",
	"shared_buffers=64MB",
}

// hbaConf replaces the cluster's pg_hba.conf: any role may connect to any
// database without a password, but only through the Unix socket in the
// cluster directory or TCP from 127.0.0.1.
const hbaConf = `# Written by micra's internal/pgserver: trust local connections only.
local all all trust
host  all all 127.0.0.1/32 trust
`

// errPortTaken is wrapped when postgres exited because another process
// holds its port; Start then tries another one.
var errPortTaken = errors.New("port already in use")

// Options configure Start. The zero value is ready to use.
type Options struct {
	// Dir is the directory in which Start makes the cluster's temporary
	// directory; "" means os.TempDir(). When the caller is root, the
	// postgres system user must be able to enter Dir and its parents,
	// which rules out t.TempDir() (mode 0700).
	Dir string

	// Log receives the output of initdb and postgres; nil discards it.
	// It is written from another goroutine until Stop returns, and its
	// write errors are ignored.
	Log io.Writer

	// Settings are more "name=value" server settings (postgres -c),
	// applied after the defaults, such as "shared_buffers=1GB" for a
	// benchmark.
	Settings []string
}

// Server is a running PostgreSQL server started by Start. Its methods are
// safe for concurrent use.
type Server struct {
	dir  string // temporary directory: the cluster, the socket
	data string // the cluster's data directory, inside dir
	port int

	// What launch needs again to resume a halted server.
	bins binaries
	cred *syscall.Credential
	opts Options

	mu   sync.Mutex
	proc *proc // the running postgres; nil while halted

	stopOnce sync.Once
}

// Start makes a new cluster in a new temporary directory under opts.Dir
// (initdb with encoding UTF8, locale C and trust authentication for local
// connections only) and starts postgres on it, listening on 127.0.0.1 on
// a free port and on a Unix socket in that directory. It returns once a
// connection succeeds, within about 30 seconds of the start, and it tries
// up to five ports if another process takes the chosen one first.
//
// The server runs until Stop, or on Linux until the process that called
// Start dies; the caller must call Stop to remove the directory. ctx
// bounds only the start, not the server's life.
//
// When no PostgreSQL binaries are found, the error wraps ErrUnavailable.
// When the caller is root, the server runs as the postgres system user,
// and Start fails if there is none.
func Start(ctx context.Context, opts Options) (_ *Server, err error) {
	bins, err := findBinaries()
	if err != nil {
		return nil, err
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	parent := opts.Dir
	if parent == "" {
		parent = os.TempDir()
	}
	if parent, err = filepath.Abs(parent); err != nil {
		return nil, fmt.Errorf("resolving the cluster's parent directory: %w", err)
	}
	dir, err := os.MkdirTemp(parent, "pgserver-")
	if err != nil {
		return nil, fmt.Errorf("making the cluster directory: %w", err)
	}
	defer func() {
		if err != nil {
			if rmErr := os.RemoveAll(dir); rmErr != nil {
				err = errors.Join(err, fmt.Errorf("removing %s: %w", dir, rmErr))
			}
		}
	}()
	if sock := filepath.Join(dir, ".s.PGSQL.65535"); len(sock) > maxSocketPath {
		return nil, fmt.Errorf("socket path %s is longer than %d bytes: choose a shorter Options.Dir", sock, maxSocketPath)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("giving %s to the %s user: %w", dir, runAsUser, err)
		}
		if err := checkSearchable(parent, cred); err != nil {
			return nil, err
		}
	}

	s := &Server{dir: dir, data: filepath.Join(dir, "data"), bins: bins, cred: cred, opts: opts}
	if err := s.initdb(ctx, bins, cred, opts.Log); err != nil {
		return nil, err
	}
	for try := 1; ; try++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		err = s.launch(ctx, port)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errPortTaken) || try == portTries {
			return nil, err
		}
	}
}

// DSN returns a keyword/value connection string, as libpq and pgx take
// it, for database db on s as the superuser over TCP without TLS.
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable",
		s.port, superuser, dsnValue(db))
}

// CreateDB creates the empty database name on s, as a copy of template1
// (encoding UTF8, locale C). It fails if name exists already. It returns
// within a minute even if ctx has no deadline.
func (s *Server) CreateDB(ctx context.Context, name string) error {
	if name == "" {
		return errors.New("creating a database: empty name")
	}
	ctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("creating database %q: %w", name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("creating database %q: %w", name, err)
	}
	return nil
}

// Stop shuts postgres down fast (SIGINT: open transactions are rolled
// back and clients disconnected), waits for it to exit, killing it if it
// has not within 30 seconds, and removes the cluster directory. It
// reports a server that exited with an error, even before Stop. It is
// safe to call more than once: later calls wait for the first to finish
// and return nil.
func (s *Server) Stop() error {
	var err error
	s.stopOnce.Do(func() {
		s.mu.Lock()
		err = s.proc.stop()
		s.proc = nil
		s.mu.Unlock()
		if rmErr := os.RemoveAll(s.dir); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("removing %s: %w", s.dir, rmErr))
		}
	})
	return err
}

// Halt shuts postgres down fast, as Stop does, but keeps the cluster, so
// that Resume can start it again: what a client sees when its database
// server goes down. Halting a halted server does nothing.
func (s *Server) Halt() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.proc.stop()
	s.proc = nil
	return err
}

// Resume starts a halted server again on the same port and waits, within
// ctx and about 30 seconds, until it accepts connections. It fails if
// another process took the port meanwhile. Resuming a running server
// does nothing.
func (s *Server) Resume(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return nil
	}
	return s.launch(ctx, s.port)
}

// initdb makes the cluster in s.data and replaces its pg_hba.conf.
func (s *Server) initdb(ctx context.Context, bins binaries, cred *syscall.Credential, log io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, initdbTimeout)
	defer cancel()
	out := new(tail)
	cmd := exec.CommandContext(ctx, bins.initdb,
		"-D", s.data, "-U", superuser, "--encoding=UTF8", "--locale=C", "--auth=trust", "--no-sync")
	setup(cmd, s.dir, cred, out, log)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("running %s for %s: %w; its output ends:\n%s", bins.initdb, s.data, err, out)
	}
	// The file exists, owned by the server's user; rewriting keeps that.
	hba := filepath.Join(s.data, "pg_hba.conf")
	if err := os.WriteFile(hba, []byte(hbaConf), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", hba, err)
	}
	return nil
}

// launch starts postgres on port and waits until it accepts connections.
// On success s.port and s.proc describe it; on failure it is gone, and
// the error wraps errPortTaken if it exited because port was in use.
func (s *Server) launch(ctx context.Context, port int) error {
	args := []string{"-D", s.data, "-p", strconv.Itoa(port), "-k", s.dir}
	for _, kv := range append(slices.Clip(settings), s.opts.Settings...) {
		args = append(args, "-c", kv)
	}
	// Not CommandContext: the server outlives ctx, which bounds the start.
	cmd := exec.Command(s.bins.postgres, args...)
	p := &proc{cmd: cmd, log: new(tail), exited: make(chan struct{})}
	setup(cmd, s.dir, s.cred, p.log, s.opts.Log)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", s.bins.postgres, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	s.port = port
	if err := s.waitReady(ctx, p); err != nil {
		return errors.Join(err, p.kill())
	}
	s.proc = p
	return nil
}

// waitReady polls s with connections until one succeeds, p exits, ctx is
// done or readyTimeout passes.
func (s *Server) waitReady(ctx context.Context, p *proc) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var err error
	for range readyTries {
		if err = s.ping(ctx); err == nil {
			return nil
		}
		select {
		case <-p.exited:
			if strings.Contains(p.log.String(), "Address already in use") {
				return fmt.Errorf("postgres on port %d: %w", s.port, errPortTaken)
			}
			return fmt.Errorf("postgres exited before accepting connections on port %d (%v); its log ends:\n%s",
				s.port, p.err, p.log)
		case <-ctx.Done():
			return fmt.Errorf("waiting for postgres to accept connections on port %d: %w (last try: %v); its log ends:\n%s",
				s.port, context.Cause(ctx), err, p.log)
		case <-time.After(readyPoll):
		}
	}
	return fmt.Errorf("postgres did not accept connections on port %d after %d tries (last: %v); its log ends:\n%s",
		s.port, readyTries, err, p.log)
}

// ping connects to s's postgres database and checks that the server on
// s.port is s's own, not another one that held the port first.
func (s *Server) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var sock string
	if err := conn.QueryRow(ctx, "SELECT current_setting('unix_socket_directories')").Scan(&sock); err != nil {
		return err
	}
	if sock != s.dir {
		return fmt.Errorf("port %d is served by another PostgreSQL, with sockets in %q", s.port, sock)
	}
	return nil
}

// proc is a started postgres process.
type proc struct {
	cmd    *exec.Cmd
	log    *tail         // its latest output
	exited chan struct{} // closed when cmd.Wait has returned
	err    error         // cmd.Wait's result, set before exited is closed
}

// stop shuts p down fast with SIGINT and waits for it to exit, killing it
// after stopTimeout. It reports an unclean exit. A nil p is stopped.
func (p *proc) stop() error {
	if p == nil {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return errors.Join(fmt.Errorf("signalling postgres (pid %d) to stop: %w", p.cmd.Process.Pid, err), p.kill())
	}
	select {
	case <-p.exited:
		if p.err != nil {
			return fmt.Errorf("postgres (pid %d) exited: %w; its log ends:\n%s", p.cmd.Process.Pid, p.err, p.log)
		}
		return nil
	case <-time.After(stopTimeout):
		return errors.Join(fmt.Errorf("postgres (pid %d) did not shut down within %v of SIGINT; killing it", p.cmd.Process.Pid, stopTimeout), p.kill())
	}
}

// kill sends p SIGKILL and waits up to killTimeout for it to exit.
func (p *proc) kill() error {
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("killing postgres (pid %d): %w", p.cmd.Process.Pid, err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(killTimeout + waitDelay):
		return fmt.Errorf("postgres (pid %d) still running %v after SIGKILL", p.cmd.Process.Pid, killTimeout+waitDelay)
	}
}

// setup makes cmd run in dir as cred (nil: as the caller) with a clean
// environment, its output going to t and, if not nil, log.
func setup(cmd *exec.Cmd, dir string, cred *syscall.Credential, t *tail, log io.Writer) {
	cmd.Dir = dir
	cmd.Env = childEnv()
	cmd.SysProcAttr = procAttr(cred)
	var w io.Writer = t
	if log != nil {
		w = io.MultiWriter(t, quietWriter{log})
	}
	cmd.Stdout = w
	cmd.Stderr = w
	cmd.WaitDelay = waitDelay
}

// childEnv is the caller's environment without the PG* variables, which
// would steer initdb and postgres, and with messages in the C locale,
// whose English errors waitReady looks for.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "LC_ALL=") {
			env = append(env, kv)
		}
	}
	return append(env, "LC_ALL=C")
}

// serverCredential returns who initdb and postgres run as: nil for the
// caller, or the runAsUser system user when the caller is root.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(runAsUser)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL refuses to run as root, and there is no %q system user to run it as (%w): "+
			"install postgresql-15, which creates it, or run as another user", runAsUser, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("reading the ids of system user %q: %w", runAsUser, err)
	}
	if uid == 0 {
		return nil, fmt.Errorf("system user %q is root, which PostgreSQL refuses to run as", runAsUser)
	}
	// Groups is empty: the server keeps none of root's supplementary groups.
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// checkSearchable returns an error unless cred may enter dir and each of
// its parents, as the server must to reach its cluster directory.
func checkSearchable(dir string, cred *syscall.Credential) error {
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("checking access to %s: %w", p, err)
		}
		mode := fi.Mode().Perm()
		ok := mode&0o001 != 0
		if st, isStat := fi.Sys().(*syscall.Stat_t); isStat {
			ok = ok || (st.Uid == cred.Uid && mode&0o100 != 0) || (st.Gid == cred.Gid && mode&0o010 != 0)
		}
		if !ok {
			return fmt.Errorf("the %s user, which runs the server, cannot enter %s (mode %v): choose another Options.Dir",
				runAsUser, p, mode)
		}
		if parent := filepath.Dir(p); parent == p {
			return nil
		}
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port on 127.0.0.1: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("releasing probe port %d: %w", port, err)
	}
	return port, nil
}

// dsnValue quotes v for a keyword/value connection string if it must be.
func dsnValue(v string) string {
	if v != "" && !strings.ContainsAny(v, " \t\n\r\v\f'\\") {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// quietWriter drops the write errors of w, so that a failing Options.Log
// does not cut postgres off from its output pipe.
type quietWriter struct{ w io.Writer }

func (q quietWriter) Write(p []byte) (int, error) {
	_, _ = q.w.Write(p)
	return len(p), nil
}

// tail keeps the last tailBytes written to it. It is safe for concurrent
// use.
type tail struct {
	mu  sync.Mutex
	b   []byte
	cut bool // output before b was dropped
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - tailBytes; over > 0 {
		t.b = append(t.b[:0:0], t.b[over:]...)
		t.cut = true
	}
	return len(p), nil
}

// String returns the kept output, from its first whole line.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := string(t.b)
	if t.cut {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	return s
}
