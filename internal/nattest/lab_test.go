//go:build linux

package nattest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// needLab ends the test where the lab cannot run, naming what is missing:
// it skips off Linux (the build tag), with -short and under the race
// detector (the nodes are separate processes built without it, and CI runs
// the race pass after the plain one). Without root, /dev/net/tun, ip, nft
// or working network namespaces it skips, except under CI=true, where
// .ci/run provides them all (it runs as root and installs iproute2 and
// nftables) and the test is required: it fails instead.
func needLab(t *testing.T) {
	t.Helper()
	switch {
	case testing.Short():
		t.Skip("NAT test: not with -short")
	case raceEnabled:
		t.Skip("NAT test: skipped under the race detector; its nodes are processes built without it")
	case os.Geteuid() != 0:
		unavailable(t, "needs root for network namespaces, nftables and TUN devices")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		unavailable(t, "needs /dev/net/tun for the backbone: %v", err)
	}
	var missing []string
	for _, need := range [][2]string{{"ip", "iproute2"}, {"nft", "nftables"}} {
		if _, err := exec.LookPath(need[0]); err != nil {
			missing = append(missing, need[1])
		}
	}
	if len(missing) > 0 {
		unavailable(t, "needs %s (apt-get install %s)", strings.Join(missing, " and "), strings.Join(missing, " "))
	}
	sweepStale(t)
	// A container may refuse namespaces even to root.
	name := "mcr-" + runID() + "-probe"
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		unavailable(t, "cannot create a network namespace: %v: %s", err, out)
	}
	defer exec.Command("ip", "netns", "del", name).Run()
	if out, err := exec.Command("ip", "netns", "exec", name, "nft", "list", "ruleset").CombinedOutput(); err != nil {
		unavailable(t, "nftables does not work in a namespace: %v: %s", err, out)
	}
}

// unavailable skips the test, saying why, or fails it under CI=true,
// where it must run.
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	why := "NAT test: " + fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		t.Fatal(why + "; CI must run it (.ci/run runs as root and installs iproute2 and nftables)")
	}
	t.Skip(why)
}

// sweepStale deletes the namespaces left by earlier runs whose test
// process is gone: go test's -timeout ends a test binary with a panic
// that runs no cleanup. A lab's namespaces are named after the pid of the
// process that made them (runID); the nodes it started died with it
// (proc.start sets their parent-death signal).
func sweepStale(t *testing.T) {
	t.Helper()
	ents, err := os.ReadDir("/run/netns")
	if err != nil {
		return // none made yet
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "mcr-")
		pid, _, ok2 := strings.Cut(rest, "-")
		if !ok || !ok2 {
			continue
		}
		if n, err := strconv.Atoi(pid); err != nil || n <= 0 || n == os.Getpid() {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue // its run goes on
		}
		if out, err := exec.Command("ip", "netns", "del", e.Name()).CombinedOutput(); err != nil {
			t.Logf("removing %s, left by an earlier run: %v: %s", e.Name(), err, out)
			continue
		}
		t.Logf("removed %s, left by an earlier run", e.Name())
	}
}

// runID names one lab: this process's pid, which sweepStale checks, and
// random hex, so that two labs of one process do not collide either.
func runID() string { return strconv.Itoa(os.Getpid()) + "-" + randomID() }

func randomID() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// lab is one run's network: namespaces named mcr-<id>-<role>, with an id
// of the process's pid and random hex (runID) so that parallel runs do not
// collide, and the backbone joining the public ones. Everything it makes is removed by the test's cleanup,
// also when the test fails.
type lab struct {
	t   *testing.T
	id  string
	bb  *backbone
	nss []string // namespaces made, in order
}

// newLab makes an empty lab. Its cleanup, which runs after those of
// everything started in it, stops the backbone and deletes the
// namespaces, and with them their interfaces and nftables rules.
func newLab(t *testing.T) *lab {
	l := &lab{t: t, id: runID(), bb: newBackbone()}
	t.Cleanup(func() {
		l.bb.close()
		for _, name := range slices.Backward(l.nss) {
			if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
				t.Errorf("ip netns del %s: %v: %s", name, err, out)
			}
		}
	})
	return l
}

// name is the namespace of role.
func (l *lab) name(role string) string { return "mcr-" + l.id + "-" + role }

// path is the namespace file of role, which setns takes.
func (l *lab) path(role string) string { return "/run/netns/" + l.name(role) }

// addNamespace makes the namespace of role with its loopback up and IPv6
// off (the test's addresses are IPv4; nothing should try another path).
func (l *lab) addNamespace(role string) {
	l.t.Helper()
	name := l.name(role)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		l.t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	l.nss = append(l.nss, name)
	// Without IPv6 in the kernel these files do not exist: nothing to turn off.
	_ = l.sysctl(role, "net/ipv6/conf/all/disable_ipv6", "1")
	_ = l.sysctl(role, "net/ipv6/conf/default/disable_ipv6", "1")
	l.ip(role, "link", "set", "lo", "up")
}

// ip runs "ip -n <namespace of role> args...".
func (l *lab) ip(role string, args ...string) {
	l.t.Helper()
	args = append([]string{"-n", l.name(role)}, args...)
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// sysctl writes a value under /proc/sys of the namespace of role: the
// network sysctls are per namespace, read through the writer's.
func (l *lab) sysctl(role, key, value string) error {
	return inNetns(l.path(role), func() error {
		return os.WriteFile("/proc/sys/"+key, []byte(value), 0)
	})
}

// nft loads an nftables ruleset into the namespace of role.
func (l *lab) nft(role, ruleset string) {
	l.t.Helper()
	cmd := exec.Command("ip", "netns", "exec", l.name(role), "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(ruleset)
	if out, err := cmd.CombinedOutput(); err != nil {
		l.t.Fatalf("nft in %s: %v: %s\n%s", l.name(role), err, out, ruleset)
	}
}

// attach connects the namespace of role to the backbone: a TUN device
// "wan" holding addrs (the first is the source of unbound sockets), with
// the default route through it. The backbone routes packets to addrs here.
func (l *lab) attach(role string, addrs ...netip.Addr) {
	l.t.Helper()
	var f *os.File
	err := inNetns(l.path(role), func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		ifr, err := unix.NewIfreq("wan")
		if err != nil {
			unix.Close(fd)
			return err
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("TUNSETIFF: %w", err)
		}
		// Non-blocking: the runtime's poller waits for it, and Close
		// wakes a pending Read.
		f = os.NewFile(uintptr(fd), l.name(role)+"/wan")
		return nil
	})
	if err != nil {
		l.t.Fatalf("TUN device in %s: %v", l.name(role), err)
	}
	// Until the backbone owns it, a failure below closes it (l.ip ends
	// the test with Goexit, which runs deferred calls).
	owned := false
	defer func() {
		if !owned {
			f.Close()
		}
	}()
	for _, a := range addrs {
		l.ip(role, "addr", "add", a.String()+"/32", "dev", "wan")
	}
	l.ip(role, "link", "set", "wan", "up")
	l.ip(role, "route", "add", "default", "dev", "wan", "src", addrs[0].String())
	l.bb.attach(role, f, addrs)
	owned = true
}

// Kinds of NAT a router does (nftables masquerade on its wan).
type natKind int

const (
	// homeNAT keeps a connection's source port when it is free, as most
	// home routers do: an endpoint-independent mapping (RFC 4787), which
	// hole punching gets through.
	homeNAT natKind = iota
	// symmetricNAT picks a random source port for every connection
	// (masquerade fully-random): an endpoint-dependent mapping, as strict
	// and carrier-grade NATs have, which defeats hole punching.
	symmetricNAT
)

func (k natKind) String() string {
	if k == symmetricNAT {
		return "symmetric (fully-random ports)"
	}
	return "endpoint-independent (ports kept)"
}

// addHome makes a volunteer's home: the router namespace rtr<i> on the
// backbone with the public address wan, masquerading the LAN
// 192.168.<i>.0/24 with nftables and dropping every connection the
// outside opens (the filtering of any NAT: only replies to what the LAN
// sent come in); and the volunteer's namespace home<i> at 192.168.<i>.2
// behind it. Dropping, rather than letting the router's own stack refuse
// with a reset, also keeps a hole punch's early packet from leaving a
// conntrack entry that would make the NAT pick another port for the
// volunteer's own packet a moment later.
func (l *lab) addHome(i int, wan netip.Addr, kind natKind) (homeRole string) {
	l.t.Helper()
	rtr, home := fmt.Sprintf("rtr%d", i), fmt.Sprintf("home%d", i)
	l.addNamespace(rtr)
	l.addNamespace(home)
	l.attach(rtr, wan)
	l.ip(rtr, "link", "add", "lan", "type", "veth", "peer", "name", "eth0", "netns", l.name(home))
	l.ip(rtr, "addr", "add", fmt.Sprintf("192.168.%d.1/24", i), "dev", "lan")
	l.ip(rtr, "link", "set", "lan", "up")
	l.ip(home, "addr", "add", fmt.Sprintf("192.168.%d.2/24", i), "dev", "eth0")
	l.ip(home, "link", "set", "eth0", "up")
	l.ip(home, "route", "add", "default", "via", fmt.Sprintf("192.168.%d.1", i))
	if err := l.sysctl(rtr, "net/ipv4/ip_forward", "1"); err != nil {
		l.t.Fatalf("ip_forward in %s: %v", l.name(rtr), err)
	}
	random := ""
	if kind == symmetricNAT {
		random = " fully-random"
	}
	l.nft(rtr, `table ip nat {
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		oifname "wan" masquerade`+random+`
	}
	chain input {
		type filter hook input priority filter; policy accept;
		iifname "wan" ct state new drop
	}
	chain forward {
		type filter hook forward priority filter; policy accept;
		iifname "wan" ct state new drop
	}
}
`)
	return home
}

// inNetns runs f on an OS thread that entered the network namespace at
// path. Sockets and TUN devices f opens belong to that namespace for their
// whole life, whichever thread serves them later. A namespace is a
// property of a thread and the runtime moves goroutines between threads,
// so f runs in a goroutine locked to its thread, which returns to the
// test's namespace afterwards or, if it cannot, ends with the goroutine.
func inNetns(path string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer self.Close()
		target, err := os.Open(path)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("entering %s: %w", path, err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			// Still locked: the thread exits with this goroutine.
			errc <- errors.Join(ferr, fmt.Errorf("leaving %s: %w", path, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// client is an HTTP client whose connections are opened inside the
// namespace of role: how the test reaches the dashboards and the
// indexer's API, which listen on that namespace's loopback.
func (l *lab) client(role string) *http.Client {
	path := l.path(role)
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := inNetns(path, func() error {
				var err error
				c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
		MaxIdleConnsPerHost: 2,
	}
	l.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 2 * time.Minute}
}

// listen opens a listener inside the namespace of role.
func (l *lab) listen(role, network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := inNetns(l.path(role), func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

// listenPacket opens a packet socket inside the namespace of role.
func (l *lab) listenPacket(role, network, addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := inNetns(l.path(role), func() error {
		var err error
		pc, err = net.ListenPacket(network, addr)
		return err
	})
	return pc, err
}

// backbone is the Internet between the public namespaces: the test
// process reads each one's IPv4 packets from its TUN device and writes
// them to the device of the namespace holding the destination address,
// after the one-way delay of the path. It routes only the addresses the
// namespaces were given and drops every other packet, so nothing leaves
// the lab. The kernel here has no netem qdisc to delay packets, and a
// userspace hop does the same on any Linux with TUN.
type backbone struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	routes map[netip.Addr]*port
	ports  []*port
	queues map[queueKey]chan packet

	forwarded, dropped atomic.Int64
}

type port struct {
	role string
	f    *os.File
}

// queueKey names one FIFO: packets from one port to another with one
// delay. A flow's packets share their addresses and so their delay: they
// keep their order, and a packet with no delay does not wait behind a
// delayed one of another flow.
type queueKey struct {
	from, to *port
	delay    time.Duration
}

type packet struct {
	data []byte
	due  time.Time
}

// queueLen bounds a FIFO in packets; beyond it the backbone drops, as a
// router's queue does.
const queueLen = 4096

func newBackbone() *backbone {
	ctx, cancel := context.WithCancel(context.Background())
	return &backbone{ctx: ctx, cancel: cancel, routes: map[netip.Addr]*port{}, queues: map[queueKey]chan packet{}}
}

// attach routes addrs to the TUN device f of role's namespace and starts
// reading it.
func (b *backbone) attach(role string, f *os.File, addrs []netip.Addr) {
	p := &port{role: role, f: f}
	b.mu.Lock()
	b.ports = append(b.ports, p)
	for _, a := range addrs {
		b.routes[a] = p
	}
	b.mu.Unlock()
	b.wg.Go(func() { b.read(p) })
}

func (b *backbone) read(p *port) {
	buf := make([]byte, 1<<16)
	for {
		n, err := p.f.Read(buf)
		if err != nil {
			return // closed
		}
		pkt := buf[:n]
		if n < 20 || pkt[0]>>4 != 4 {
			b.dropped.Add(1)
			continue
		}
		src := netip.AddrFrom4([4]byte(pkt[12:16]))
		dst := netip.AddrFrom4([4]byte(pkt[16:20]))
		b.mu.Lock()
		to := b.routes[dst]
		b.mu.Unlock()
		if to == nil || to == p {
			b.dropped.Add(1)
			continue
		}
		d := oneWay(src, dst)
		select {
		case b.queue(queueKey{p, to, d}) <- packet{data: append([]byte(nil), pkt...), due: time.Now().Add(d)}:
		default:
			b.dropped.Add(1)
		}
	}
}

// queue returns the FIFO of k, starting its writer on first use.
func (b *backbone) queue(k queueKey) chan packet {
	b.mu.Lock()
	defer b.mu.Unlock()
	q, ok := b.queues[k]
	if ok {
		return q
	}
	q = make(chan packet, queueLen)
	b.queues[k] = q
	b.wg.Go(func() {
		t := time.NewTimer(time.Hour)
		t.Stop()
		for {
			select {
			case <-b.ctx.Done():
				return
			case pk := <-q:
				if wait := time.Until(pk.due); wait > 0 {
					t.Reset(wait)
					select {
					case <-b.ctx.Done():
						return
					case <-t.C:
					}
				}
				if _, err := k.to.f.Write(pk.data); err != nil {
					b.dropped.Add(1)
					continue
				}
				b.forwarded.Add(1)
			}
		}
	})
	return q
}

// close stops forwarding and closes the TUN devices, which removes them.
func (b *backbone) close() {
	b.cancel()
	b.mu.Lock()
	ports := b.ports
	b.mu.Unlock()
	for _, p := range ports {
		p.f.Close()
	}
	b.wg.Wait()
}
