package p2ptest

import (
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/metrics"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/x/simlibp2p"
	"github.com/marcopolo/simnet"

	"github.com/micra-net/micra/internal/memnet"
)

// Net is a simulated network: go-libp2p's x/simlibp2p (QUIC over simnet,
// NewNet and NewNetWith) or internal/memnet (NewMemNet, frames in memory),
// each pair of addresses with a fixed one-way latency (by default 2 to 41
// ms, see Latency) and every host on a 50 Mbit/s link. It runs on the
// clock of the testing/synctest bubble it was made in; hosts on it must be
// made in the same bubble. Every host reports its streams' bytes to one
// counter (Bandwidth).
type Net struct {
	nw      *simnet.Simnet
	mem     *memnet.Network
	packets atomic.Int64
	bw      *byteCounter
	mu      sync.RWMutex
	cut     map[netip.Addr]bool
}

// NewNet starts a simulated network with Latency between its addresses,
// closed at cleanup after everything registered later (the hosts and
// nodes on it). Call it inside synctest.Test.
func NewNet(t testing.TB) *Net {
	return NewNetWith(t, func(a, b netip.Addr) time.Duration {
		return Latency(net.IP(a.AsSlice()), net.IP(b.AsSlice()))
	})
}

// NewNetWith starts a simulated network whose one-way latency between two
// addresses is latency(from, to).
func NewNetWith(t testing.TB, latency func(from, to netip.Addr) time.Duration) *Net {
	t.Helper()
	n := &Net{bw: &byteCounter{}, cut: map[netip.Addr]bool{}}
	n.nw = &simnet.Simnet{LatencyFunc: func(p *simnet.Packet) time.Duration {
		n.packets.Add(1)
		from, _ := netip.AddrFromSlice(p.From.(*net.UDPAddr).IP)
		to, _ := netip.AddrFromSlice(p.To.(*net.UDPAddr).IP)
		from, to = from.Unmap(), to.Unmap()
		n.mu.RLock()
		gone := n.cut[from] || n.cut[to]
		n.mu.RUnlock()
		if gone {
			return blackhole
		}
		return latency(from, to)
	}}
	n.nw.Start()
	t.Cleanup(func() { n.nw.Close() })
	return n
}

// NewMemNet starts an in-memory network (internal/memnet) whose one-way
// latency between two addresses is latency(from, to): the hosts above the
// transport are the same, the wire costs a fraction of QUIC's CPU and
// memory, which lets a machine simulate a thousand hosts.
func NewMemNet(t testing.TB, latency func(from, to netip.Addr) time.Duration) *Net {
	t.Helper()
	return &Net{bw: &byteCounter{}, mem: memnet.New(latency, linkBps)}
}

// linkBps is every host's link, up and down (memnet: up only).
const linkBps = 50 * simlibp2p.OneMbps

// blackhole is the latency of a packet to or from a cut address: it
// arrives long after any simulation ends.
const blackhole = 1000 * time.Hour

// Cut takes address a off the network without a word, as a crash or a
// pulled cable would: from now on no packet to or from it arrives. Its
// host goes on running until closed.
func (n *Net) Cut(a netip.Addr) {
	if n.mem != nil {
		n.mem.Cut(a)
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut[a] = true
}

// Bandwidth returns the bytes all hosts' streams carried so far, in and
// out, as libp2p reports them to a bandwidth reporter (stream payloads,
// not QUIC's overhead).
func (n *Net) Bandwidth() metrics.Stats {
	return metrics.Stats{TotalIn: n.bw.in.Load(), TotalOut: n.bw.out.Load()}
}

// SentByProtocol returns the bytes all hosts' streams sent so far, by
// protocol.
func (n *Net) SentByProtocol() map[protocol.ID]int64 {
	out := map[protocol.ID]int64{}
	for p, st := range n.bw.GetBandwidthByProtocol() {
		out[p] = st.TotalOut
	}
	return out
}

// byteCounter is a metrics.Reporter that only adds up bytes. libp2p's own
// BandwidthCounter keeps a rate meter per peer and protocol, swept every
// second by a global goroutine: in a bubble of a thousand hosts that costs
// more than the protocols, and the goroutine outlives the bubble.
type byteCounter struct {
	in, out atomic.Int64
	proto   sync.Map // protocol.ID → *atomic.Int64, bytes sent
}

func (c *byteCounter) LogSentMessage(n int64) { c.out.Add(n) }
func (c *byteCounter) LogRecvMessage(n int64) { c.in.Add(n) }
func (c *byteCounter) LogSentMessageStream(n int64, p protocol.ID, _ peer.ID) {
	v, ok := c.proto.Load(p)
	if !ok {
		v, _ = c.proto.LoadOrStore(p, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(n) // LogSentMessage counted the total
}
func (c *byteCounter) LogRecvMessageStream(int64, protocol.ID, peer.ID)  {} // LogRecvMessage counted it
func (c *byteCounter) GetBandwidthForPeer(peer.ID) metrics.Stats         { return metrics.Stats{} }
func (c *byteCounter) GetBandwidthForProtocol(protocol.ID) metrics.Stats { return metrics.Stats{} }
func (c *byteCounter) GetBandwidthTotals() metrics.Stats {
	return metrics.Stats{TotalIn: c.in.Load(), TotalOut: c.out.Load()}
}
func (c *byteCounter) GetBandwidthByPeer() map[peer.ID]metrics.Stats { return nil }
func (c *byteCounter) GetBandwidthByProtocol() map[protocol.ID]metrics.Stats {
	out := map[protocol.ID]metrics.Stats{}
	c.proto.Range(func(k, v any) bool {
		out[k.(protocol.ID)] = metrics.Stats{TotalOut: v.(*atomic.Int64).Load()}
		return true
	})
	return out
}
func (c *byteCounter) Reset()             {}
func (c *byteCounter) TrimIdle(time.Time) {}

// Latency is Net's one-way latency between two addresses: 2 to 41 ms,
// fixed per pair by a hash, the same in both directions.
func Latency(a, b net.IP) time.Duration {
	x, y := a.String(), b.String()
	if x > y {
		x, y = y, x
	}
	h := fnv.New32a()
	h.Write([]byte(x + "|" + y))
	return time.Duration(2+h.Sum32()%40) * time.Millisecond
}

// Packets returns how many packets (memnet: frames) the network has
// carried.
func (n *Net) Packets() int64 {
	if n.mem != nil {
		return n.mem.Frames()
	}
	return n.packets.Load()
}

// Host starts a libp2p host on the network listening on a (QUIC, UDP port
// 4001; memnet: TCP port 4001), with identity sk (a fresh Ed25519 key when nil) and opts after
// the network's own options; it is closed at cleanup. Observed-address
// discovery is off (it stalls synctest, as simlibp2p notes) and the
// resource manager unlimited: the hosts run in one process.
func (n *Net) Host(t testing.TB, sk crypto.PrivKey, a netip.Addr, opts ...libp2p.Option) host.Host {
	t.Helper()
	if sk == nil {
		var err error
		if sk, _, err = crypto.GenerateEd25519Key(nil); err != nil {
			t.Fatal(err)
		}
	}
	var wire []libp2p.Option
	if n.mem != nil {
		wire = []libp2p.Option{libp2p.ListenAddrStrings(fmt.Sprintf("/ip4/%s/tcp/4001", a)), libp2p.Transport(n.mem.Transport())}
	} else {
		link := simnet.NodeBiDiLinkSettings{
			Downlink: simnet.LinkSettings{BitsPerSecond: linkBps},
			Uplink:   simnet.LinkSettings{BitsPerSecond: linkBps},
		}
		wire = []libp2p.Option{libp2p.ListenAddrStrings(fmt.Sprintf("/ip4/%s/udp/4001/quic-v1", a)), simlibp2p.QUICSimnet(n.nw, link)}
	}
	all := append(append([]libp2p.Option{libp2p.Identity(sk)}, wire...),
		libp2p.DisableIdentifyAddressDiscovery(),
		libp2p.ResourceManager(&network.NullResourceManager{}),
		libp2p.BandwidthReporter(n.bw))
	all = append(all, opts...)
	h, err := libp2p.New(all...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}
