package overlay

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p"
	coreconnmgr "github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/host/autorelay"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	quic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
)

// HostOption configures NewHost.
type HostOption func(*hostConfig) error

type hostConfig struct {
	listen       []ma.Multiaddr
	limits       rcmgr.PartialLimitConfig
	connLow      int
	connHigh     int
	connGrace    time.Duration
	relayService bool
	staticRelays []peer.AddrInfo
	reachability network.Reachability
	portMapping  bool
	userAgent    string
	gater        coreconnmgr.ConnectionGater
	transport    any // replaces TCP and QUIC when set (Transport)
}

// DefaultPort is the TCP and UDP port a node listens on by default: next
// to micra's dashboard (7464) and indexer API (7465), and clear of the
// well-known P2P programs' (IPFS Kubo takes 4001, Bitcoin 8333,
// BitTorrent 6881, Ethereum 30303). An indexer listens on the next one.
const DefaultPort = 7466

// The connection manager's defaults (ConnLimits): above DefaultConnHigh
// connections it trims down to DefaultConnLow, sparing connections younger
// than DefaultConnGrace, the routing table's and gossipsub mesh's peers
// as long as it can (their tags) and the replica sets' always (protected).
// Kademlia needs no standing connection to a routing-table peer, and each
// connection costs a volunteer memory (five goroutines and their buffers
// in go-libp2p; QUIC's state besides) and keep-alives: a thousand-node
// network's DHT refresh alone meets some 200 peers per node. Kubo, IPFS's
// node, settled on the same watermarks.
const (
	DefaultConnLow   = 32
	DefaultConnHigh  = 96
	DefaultConnGrace = 20 * time.Second
)

func defaultHostConfig() hostConfig {
	return hostConfig{
		listen: []ma.Multiaddr{
			ma.StringCast(fmt.Sprintf("/ip4/0.0.0.0/tcp/%d", DefaultPort)),
			ma.StringCast(fmt.Sprintf("/ip4/0.0.0.0/udp/%d/quic-v1", DefaultPort)),
			ma.StringCast(fmt.Sprintf("/ip6/::/tcp/%d", DefaultPort)),
			ma.StringCast(fmt.Sprintf("/ip6/::/udp/%d/quic-v1", DefaultPort)),
		},
		limits: rcmgr.PartialLimitConfig{
			System: rcmgr.ResourceLimits{
				Conns:           512,       // a volunteer node needs ~100 (DHT buckets, shard peers, crawl requests)
				ConnsInbound:    256,       // half may be inbound
				ConnsOutbound:   512,       //
				Streams:         4096,      //
				StreamsInbound:  2048,      //
				StreamsOutbound: 4096,      //
				FD:              1024,      // leaves the crawler most of a default 4096 ulimit
				Memory:          512 << 20, // 512 MiB for libp2p buffers, the crawler has the rest
			},
			Transient: rcmgr.ResourceLimits{
				Conns:   64,
				Streams: 256,
				Memory:  64 << 20,
			},
		},
		connLow:      DefaultConnLow,
		connHigh:     DefaultConnHigh,
		connGrace:    DefaultConnGrace,
		relayService: true, // a publicly reachable node relays (limited) for NATed volunteers
		userAgent:    "micra",
	}
}

// ListenAddrs replaces the listen addresses (default: TCP and QUIC on port
// DefaultPort, all IPv4 and IPv6 interfaces). Use port 0 for a random port.
func ListenAddrs(addrs ...ma.Multiaddr) HostOption {
	return func(c *hostConfig) error {
		c.listen = addrs
		return nil
	}
}

// BindAddress listens with TCP and QUIC on one local address and port
// (0: random) only, so that the node's traffic leaves from that address, as
// a multi-homed host would arrange.
func BindAddress(a netip.Addr, port int) HostOption {
	return func(c *hostConfig) error {
		if !a.IsValid() || port < 0 || port > 65535 {
			return fmt.Errorf("bind address %v port %d is not valid", a, port)
		}
		fam := "ip4"
		if a.Is6() && !a.Is4In6() {
			fam = "ip6"
		}
		a = a.Unmap()
		c.listen = []ma.Multiaddr{
			ma.StringCast(fmt.Sprintf("/%s/%s/tcp/%d", fam, a, port)),
			ma.StringCast(fmt.Sprintf("/%s/%s/udp/%d/quic-v1", fam, a, port)),
		}
		return nil
	}
}

// Transport replaces the host's TCP and QUIC transports with ctor, a
// constructor as libp2p.Transport takes it: an emulated network under a
// demo or a simulation (internal/memnet), whose links carry the latencies
// of the Internet it emulates. The listen addresses must be ones ctor's
// transport takes.
func Transport(ctor any) HostOption {
	return func(c *hostConfig) error {
		if ctor == nil {
			return errors.New("nil transport constructor")
		}
		c.transport = ctor
		return nil
	}
}

// NoListen makes the host listen nowhere: it only dials out, and is reached
// through relays (with StaticRelays or through peers it meets).
func NoListen() HostOption {
	return func(c *hostConfig) error {
		c.listen = nil
		return nil
	}
}

// ResourceLimits overrides the resource manager's explicit limits; fields
// left at zero keep micra's defaults, and those left undefined there take
// go-libp2p's defaults scaled to the limits given.
func ResourceLimits(l rcmgr.PartialLimitConfig) HostOption {
	return func(c *hostConfig) error {
		l.Apply(c.limits)
		c.limits = l
		return nil
	}
}

// ConnLimits sets the connection manager's watermarks: above high
// connections it trims down to low (defaults DefaultConnLow and DefaultConnHigh, 32 and 96).
func ConnLimits(low, high int) HostOption {
	return func(c *hostConfig) error {
		if low < 1 || high < low {
			return fmt.Errorf("connection limits must satisfy 1 ≤ low ≤ high, got %d and %d", low, high)
		}
		c.connLow, c.connHigh = low, high
		return nil
	}
}

// ConnectionGater installs g to accept or refuse every connection: an
// operator's deny list, or a test's network partition.
func ConnectionGater(g coreconnmgr.ConnectionGater) HostOption {
	return func(c *hostConfig) error {
		c.gater = g
		return nil
	}
}

// StaticRelays names relays a node behind NAT reserves a slot on. Without
// it, relays are chosen among connected peers that offer the relay service.
func StaticRelays(relays []peer.AddrInfo) HostOption {
	return func(c *hostConfig) error {
		c.staticRelays = relays
		return nil
	}
}

// NoRelayService stops the host from relaying for others even when it is
// publicly reachable.
func NoRelayService() HostOption {
	return func(c *hostConfig) error {
		c.relayService = false
		return nil
	}
}

// Reachability forces what the host believes about its reachability
// instead of asking AutoNAT: network.ReachabilityPublic makes it a relay
// and DHT server at once, network.ReachabilityPrivate makes it reserve relay
// slots at once. Meant for known deployments and tests.
func Reachability(r network.Reachability) HostOption {
	return func(c *hostConfig) error {
		c.reachability = r
		return nil
	}
}

// PortMapping asks the local gateway to map the listen ports (UPnP or
// NAT-PMP). Off by default: it talks to the LAN's router.
func PortMapping() HostOption {
	return func(c *hostConfig) error {
		c.portMapping = true
		return nil
	}
}

// NewHost builds micra's libp2p host for the identity key sk: TCP and QUIC
// with go-libp2p's default security (Noise, TLS) and muxer, the resource
// manager with explicit limits, a connection manager, AutoNAT (client,
// service and v2), the circuit relay v2 client with autorelay, the relay
// service (limited relays, when publicly reachable) and hole punching. No
// default bootstrap peers are contacted and mDNS is not started. The caller
// closes the host; close it before the overlay's database.
func NewHost(sk crypto.PrivKey, opts ...HostOption) (host.Host, error) {
	cfg := defaultHostConfig()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if sk == nil {
		return nil, errors.New("nil identity key")
	}
	if err := checkPortsFree(cfg.listen); err != nil {
		return nil, err
	}
	limits := rcmgr.DefaultLimits
	addServiceLimits(&limits)
	mem := int64(cfg.limits.System.Memory)
	if mem <= 0 {
		mem = 512 << 20
	}
	fds := int(cfg.limits.System.FD)
	if fds <= 0 {
		fds = 1024
	}
	concrete := cfg.limits.Build(limits.Scale(mem, fds))
	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(concrete))
	if err != nil {
		return nil, fmt.Errorf("resource manager: %w", err)
	}
	cm, err := connmgr.NewConnManager(cfg.connLow, cfg.connHigh, connmgr.WithGracePeriod(cfg.connGrace))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("connection manager: %w", err), rm.Close())
	}

	// Autorelay without static relays draws candidates from connected
	// peers; the host does not exist yet when the option is built.
	var self atomic.Pointer[host.Host]
	peerSource := func(ctx context.Context, num int) <-chan peer.AddrInfo {
		out := make(chan peer.AddrInfo, num)
		defer close(out)
		hp := self.Load()
		if hp == nil {
			return out
		}
		h := *hp
		for _, p := range h.Network().Peers() {
			if len(out) >= num {
				break
			}
			out <- peer.AddrInfo{ID: p, Addrs: h.Peerstore().Addrs(p)}
		}
		return out
	}

	lopts := []libp2p.Option{
		libp2p.Identity(sk),
		libp2p.ListenAddrs(cfg.listen...),
		libp2p.DefaultSecurity,
		libp2p.DefaultMuxers,
		libp2p.ResourceManager(rm),
		libp2p.ConnectionManager(cm),
		libp2p.UserAgent(cfg.userAgent),
		libp2p.EnableRelay(),
		libp2p.EnableHolePunching(),
		libp2p.EnableNATService(),
		libp2p.EnableAutoNATv2(),
		libp2p.DisableMetrics(),
	}
	if cfg.transport != nil {
		lopts = append(lopts, libp2p.Transport(cfg.transport))
	} else {
		lopts = append(lopts, libp2p.Transport(tcp.NewTCPTransport), libp2p.Transport(quic.NewTransport))
	}
	if cfg.gater != nil {
		lopts = append(lopts, libp2p.ConnectionGater(cfg.gater))
	}
	if len(cfg.listen) == 0 {
		lopts = append(lopts, libp2p.NoListenAddrs)
	}
	if cfg.relayService {
		lopts = append(lopts, libp2p.EnableRelayService())
	}
	if len(cfg.staticRelays) > 0 {
		lopts = append(lopts, libp2p.EnableAutoRelayWithStaticRelays(cfg.staticRelays, autorelay.WithBootDelay(0)))
	} else {
		lopts = append(lopts, libp2p.EnableAutoRelayWithPeerSource(peerSource, autorelay.WithMinInterval(30*time.Second)))
	}
	switch cfg.reachability {
	case network.ReachabilityPublic:
		lopts = append(lopts, libp2p.ForceReachabilityPublic())
	case network.ReachabilityPrivate:
		lopts = append(lopts, libp2p.ForceReachabilityPrivate())
	}
	if cfg.portMapping {
		lopts = append(lopts, libp2p.NATPortMap())
	}
	h, err := libp2p.New(lopts...)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("libp2p host: %w", err), cm.Close(), rm.Close())
	}
	self.Store(&h)
	return h, nil
}

// addServiceLimits bounds each micra protocol's streams and memory, in
// total and per peer, so one protocol or one peer cannot starve the rest.
func addServiceLimits(l *rcmgr.ScalingLimitConfig) {
	type lim struct {
		svc                string
		streams, perPeer   int
		memory, memPerPeer int64
	}
	for _, s := range []lim{
		{svcProbe, 64, probeStreamsPerPeer, 8 << 20, 1 << 20}, // probes are slow but tiny
		{svcCoordinate, 512, 32, 64 << 20, 8 << 20},           // every node talks to its coordinators
		{svcAck, 128, 8, 16 << 20, 2 << 20},                   //
		{svcReplicate, 128, 16, 128 << 20, 32 << 20},          // shard state chunks up to 2 MiB
		{svcAudit, 32, 4, 64 << 20, 16 << 20},                 // evidence up to 4 MiB; audits are sampled
		{svcRelease, 32, 4, 32 << 20, 4 << 20},                // snapshot chunks of 512 KiB, fetched one at a time
		{svcAnnounce, 128, 4, 32 << 20, 1 << 20},              // one 4 KiB exchange per neighbour and round; a row of 96 KiB when asked
	} {
		l.AddServiceLimit(s.svc, rcmgr.BaseLimit{Streams: s.streams, StreamsInbound: s.streams, StreamsOutbound: s.streams, Memory: s.memory}, rcmgr.BaseLimitIncrease{})
		l.AddServicePeerLimit(s.svc, rcmgr.BaseLimit{Streams: s.perPeer, StreamsInbound: s.perPeer, StreamsOutbound: s.perPeer, Memory: s.memPerPeer}, rcmgr.BaseLimitIncrease{})
	}
}
