// Package memnet is an in-memory libp2p transport for simulations of many
// hosts in one process, on the clock of a testing/synctest bubble: every
// host above the transport is real (swarm, identify, connection manager,
// the DHT, gossipsub, micra's overlay), only the wire is replaced.
//
// A connection carries its streams' frames (open, data, end of writing,
// reset, connection close) in order, each arriving one one-way latency
// after it leaves its host's uplink, which serialises the host's frames at
// a fixed bandwidth. Dialing takes a round trip (the handshake); a dial to
// an address nobody listens on fails after it, as a refused connection
// does. There is no encryption, no packetisation, no congestion control
// and no flow control (a writer never blocks): what makes go-libp2p's QUIC
// on a simulated packet network (x/simlibp2p) cost a thousand simulated
// hosts gigabytes and most of the machine's time.
//
// A host taken off the network (Cut) goes silent: its frames and the frames
// to it are lost, dials to or from it hang until their context ends, and
// each of its connections closes at both ends one idle timeout (QUIC's, 30
// s) after the cut, as QUIC's keep-alives would close it.
//
// Addresses are /ip4/A/tcp/P or /ip6/A/tcp/P; a host has one (its first
// listener's), from which it also dials.
package memnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/transport"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// IdleTimeout is how long after a cut a connection to or from the cut host
// closes (quic-go's default idle timeout, which go-libp2p keeps; its
// keep-alives every 15 s keep live connections open).
const IdleTimeout = 30 * time.Second

// frameOverhead is the bytes a frame takes on the uplink besides its data
// (IP, UDP and QUIC headers and a stream frame's, roughly).
const frameOverhead = 48

// Network is a set of hosts that reach each other in memory. Its methods
// are safe for concurrent use.
type Network struct {
	latency func(from, to netip.Addr) time.Duration
	bps     float64

	mu        sync.Mutex
	listeners map[netip.AddrPort]*listener
	cut       map[netip.Addr]bool
	conns     map[*conn]struct{}
	busy      map[netip.Addr]time.Time // each host's uplink, busy until
	port      uint16                   // the last port handed out for port 0

	frames atomic.Int64
}

// New returns a network on which a frame from one address to another
// arrives latency(from, to) after it leaves the sender's uplink of
// uplinkBitsPerSecond (0: no bandwidth limit). latency must be safe for
// concurrent use.
func New(latency func(from, to netip.Addr) time.Duration, uplinkBitsPerSecond float64) *Network {
	return &Network{latency: latency, bps: uplinkBitsPerSecond, listeners: map[netip.AddrPort]*listener{},
		cut: map[netip.Addr]bool{}, conns: map[*conn]struct{}{}, busy: map[netip.Addr]time.Time{}, port: 40000}
}

// Transport returns a constructor for libp2p.Transport: a host built with
// libp2p.Transport(n.Transport()) and listen addresses /ip4/A/tcp/P is on
// n at A.
func (n *Network) Transport() any {
	return func(key crypto.PrivKey, gater connmgr.ConnectionGater, rcmgr network.ResourceManager) (transport.Transport, error) {
		id, err := peer.IDFromPrivateKey(key)
		if err != nil {
			return nil, err
		}
		if rcmgr == nil {
			rcmgr = &network.NullResourceManager{}
		}
		return &Transport{n: n, id: id, key: key.GetPublic(), gater: gater, rcmgr: rcmgr}, nil
	}
}

// Cut takes address a off the network without a word (see the package doc).
func (n *Network) Cut(a netip.Addr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cut[a] {
		return
	}
	n.cut[a] = true
	for c := range n.conns {
		if c.local.Addr() == a || c.remote.Addr() == a {
			time.AfterFunc(IdleTimeout, func() { c.closeLocal(errTimeout) })
		}
	}
}

// Frames returns how many frames the network has delivered.
func (n *Network) Frames() int64 { return n.frames.Load() }

func (n *Network) isCut(a, b netip.Addr) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cut[a] || n.cut[b]
}

// depart reserves size bytes on from's uplink and returns when they have
// left it.
func (n *Network) depart(from netip.Addr, size int) time.Time {
	now := time.Now()
	if n.bps <= 0 {
		return now
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	t := n.busy[from]
	if t.Before(now) {
		t = now
	}
	t = t.Add(time.Duration(float64(size*8) / n.bps * float64(time.Second)))
	n.busy[from] = t
	return t
}

var (
	errTimeout      = errors.New("memnet: connection timed out (peer silent)")
	errClosed       = errors.New("memnet: connection closed")
	errRemoteClosed = errors.New("memnet: connection closed by peer")
)

// Transport is one host's end of a Network (transport.Transport).
type Transport struct {
	n     *Network
	id    peer.ID
	key   crypto.PubKey
	gater connmgr.ConnectionGater
	rcmgr network.ResourceManager

	mu    sync.Mutex
	lists []*listener
}

var _ transport.Transport = (*Transport)(nil)

// addrPort parses /ip4|ip6/A/tcp/P.
func addrPort(a ma.Multiaddr) (netip.AddrPort, error) {
	na, err := manet.ToNetAddr(a)
	if err != nil {
		return netip.AddrPort{}, err
	}
	ta, ok := na.(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("memnet: %s is not a /tcp address", a)
	}
	ap := ta.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}

func toMultiaddr(ap netip.AddrPort) ma.Multiaddr {
	m, err := manet.FromNetAddr(net.TCPAddrFromAddrPort(ap))
	if err != nil {
		panic(fmt.Sprintf("memnet: address %s: %v", ap, err)) // every AddrPort has a multiaddr
	}
	return m
}

// CanDial reports whether a is /ip4|ip6/A/tcp/P.
func (t *Transport) CanDial(a ma.Multiaddr) bool {
	_, err := addrPort(a)
	return err == nil
}

// Protocols is TCP's: the network's addresses are TCP's.
func (t *Transport) Protocols() []int { return []int{ma.P_TCP} }

// Proxy is false.
func (t *Transport) Proxy() bool { return false }

func (t *Transport) String() string { return "memnet" }

// local is the address this host dials from: its first listener's, or the
// unspecified address when it listens nowhere.
func (t *Transport) local() netip.AddrPort {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, l := range t.lists {
		return l.addr
	}
	return netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
}

// Listen listens on laddr (port 0: a free port).
func (t *Transport) Listen(laddr ma.Multiaddr) (transport.Listener, error) {
	ap, err := addrPort(laddr)
	if err != nil {
		return nil, err
	}
	n := t.n
	n.mu.Lock()
	if ap.Port() == 0 {
		for {
			n.port++
			if n.port == 0 {
				n.port = 40001
			}
			if _, used := n.listeners[netip.AddrPortFrom(ap.Addr(), n.port)]; !used {
				break
			}
		}
		ap = netip.AddrPortFrom(ap.Addr(), n.port)
	}
	if _, used := n.listeners[ap]; used {
		n.mu.Unlock()
		return nil, fmt.Errorf("memnet: listen %s: address in use", ap)
	}
	l := &listener{t: t, addr: ap, ma: toMultiaddr(ap), wake: make(chan struct{}, 1), done: make(chan struct{})}
	n.listeners[ap] = l
	n.mu.Unlock()
	t.mu.Lock()
	t.lists = append(t.lists, l)
	t.mu.Unlock()
	return l, nil
}

// Dial connects to p at raddr after a round trip. It fails when nobody
// listens there or the listener is not p, when either side's connection
// gater or resource manager refuses, or when ctx ends first; a dial to or
// from a cut address hangs until ctx ends.
func (t *Transport) Dial(ctx context.Context, raddr ma.Multiaddr, p peer.ID) (transport.CapableConn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ra, err := addrPort(raddr)
	if err != nil {
		return nil, err
	}
	la := t.local()
	n := t.n
	if n.isCut(la.Addr(), ra.Addr()) {
		<-ctx.Done()
		return nil, fmt.Errorf("memnet: dial %s: %w", ra, ctx.Err())
	}
	scope, err := t.rcmgr.OpenConnection(network.DirOutbound, false, raddr)
	if err != nil {
		return nil, err
	}
	c, err := t.dial(ctx, la, ra, p, scope)
	if err != nil {
		scope.Done()
		return nil, err
	}
	return c, nil
}

func (t *Transport) dial(ctx context.Context, la, ra netip.AddrPort, p peer.ID, scope network.ConnManagementScope) (*conn, error) {
	if err := scope.SetPeer(p); err != nil {
		return nil, err
	}
	n := t.n
	oneWay := n.latency(la.Addr(), ra.Addr())
	back := n.latency(ra.Addr(), la.Addr())
	timer := time.NewTimer(oneWay + back)
	select {
	case <-timer.C:
	case <-ctx.Done():
		timer.Stop()
		return nil, fmt.Errorf("memnet: dial %s: %w", ra, ctx.Err())
	}
	n.mu.Lock()
	l := n.listeners[ra]
	gone := n.cut[la.Addr()] || n.cut[ra.Addr()]
	n.mu.Unlock()
	if gone {
		<-ctx.Done()
		return nil, fmt.Errorf("memnet: dial %s: %w", ra, ctx.Err())
	}
	if l == nil {
		return nil, fmt.Errorf("memnet: dial %s: connection refused", ra)
	}
	if l.t.id != p {
		return nil, fmt.Errorf("memnet: dial %s: peer id mismatch: expected %s, found %s", ra, p, l.t.id)
	}
	out := &conn{t: t, local: la, remote: ra, remotePeer: p, remoteKey: l.t.key, scope: scope, dir: network.DirOutbound}
	in := &conn{t: l.t, local: ra, remote: la, remotePeer: t.id, remoteKey: t.key, dir: network.DirInbound}
	out.init(oneWay, in, 1)
	in.init(back, out, 2)
	if err := l.t.admit(in); err != nil {
		return nil, fmt.Errorf("memnet: dial %s: %w", ra, err)
	}
	if t.gater != nil && !t.gater.InterceptSecured(network.DirOutbound, p, out) {
		in.closeLocal(errClosed)
		return nil, fmt.Errorf("memnet: dial %s: secured connection gated", ra)
	}
	n.mu.Lock()
	n.conns[out], n.conns[in] = struct{}{}, struct{}{}
	n.mu.Unlock()
	if !l.push(in) {
		n.forget(out, in)
		return nil, fmt.Errorf("memnet: dial %s: connection refused", ra)
	}
	return out, nil
}

// admit runs the accepting side's gater and resource manager on c.
func (t *Transport) admit(c *conn) error {
	if t.gater != nil && !t.gater.InterceptAccept(c) {
		return errors.New("connection gated")
	}
	scope, err := t.rcmgr.OpenConnection(network.DirInbound, false, c.RemoteMultiaddr())
	if err != nil {
		return err
	}
	if err := scope.SetPeer(c.remotePeer); err != nil {
		scope.Done()
		return err
	}
	c.scope = scope
	if t.gater != nil && !t.gater.InterceptSecured(network.DirInbound, c.remotePeer, c) {
		scope.Done()
		c.scope = nil
		return errors.New("secured connection gated")
	}
	return nil
}

func (n *Network) forget(cs ...*conn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range cs {
		delete(n.conns, c)
	}
}

// listener accepts the connections dialed to its address.
type listener struct {
	t    *Transport
	addr netip.AddrPort
	ma   ma.Multiaddr

	mu     sync.Mutex
	queue  []*conn
	closed bool
	wake   chan struct{} // a connection was queued
	done   chan struct{} // closed by Close
}

// push queues c for Accept; false when the listener is closed.
func (l *listener) push(c *conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.queue = append(l.queue, c)
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return true
}

func (l *listener) Accept() (transport.CapableConn, error) {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, transport.ErrListenerClosed
		}
		if len(l.queue) > 0 {
			c := l.queue[0]
			l.queue = l.queue[1:]
			if len(l.queue) > 0 {
				select {
				case l.wake <- struct{}{}:
				default:
				}
			}
			l.mu.Unlock()
			return c, nil
		}
		l.mu.Unlock()
		select {
		case <-l.wake:
		case <-l.done:
		}
	}
}

func (l *listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	queued := l.queue
	l.queue = nil
	close(l.done)
	l.mu.Unlock()
	for _, c := range queued {
		c.Close()
	}
	n := l.t.n
	n.mu.Lock()
	delete(n.listeners, l.addr)
	n.mu.Unlock()
	l.t.mu.Lock()
	for i, x := range l.t.lists {
		if x == l {
			l.t.lists = append(l.t.lists[:i:i], l.t.lists[i+1:]...)
			break
		}
	}
	l.t.mu.Unlock()
	return nil
}

func (l *listener) Addr() net.Addr          { return net.TCPAddrFromAddrPort(l.addr) }
func (l *listener) Multiaddr() ma.Multiaddr { return l.ma }
