package p2ptest

import (
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/x/simlibp2p"
	"github.com/marcopolo/simnet"
)

// Net is a simulated network (go-libp2p's x/simlibp2p over simnet): QUIC
// between hosts, each pair of addresses with a fixed one-way latency of 2
// to 41 ms and every host on a 50 Mbit/s link. It runs on the clock of the
// testing/synctest bubble it was made in; hosts on it must be made in the
// same bubble.
type Net struct {
	nw      *simnet.Simnet
	packets atomic.Int64
}

// NewNet starts a simulated network, closed at cleanup after everything
// registered later (the hosts and nodes on it). Call it inside
// synctest.Test.
func NewNet(t testing.TB) *Net {
	t.Helper()
	n := &Net{}
	n.nw = &simnet.Simnet{LatencyFunc: func(p *simnet.Packet) time.Duration {
		n.packets.Add(1)
		return Latency(p.From.(*net.UDPAddr).IP, p.To.(*net.UDPAddr).IP)
	}}
	n.nw.Start()
	t.Cleanup(func() { n.nw.Close() })
	return n
}

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

// Packets returns how many packets the network has carried.
func (n *Net) Packets() int64 { return n.packets.Load() }

// Host starts a libp2p host on the network listening on a (QUIC, UDP port
// 4001), with identity sk (a fresh Ed25519 key when nil) and opts after
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
	link := simnet.NodeBiDiLinkSettings{
		Downlink: simnet.LinkSettings{BitsPerSecond: 50 * simlibp2p.OneMbps},
		Uplink:   simnet.LinkSettings{BitsPerSecond: 50 * simlibp2p.OneMbps},
	}
	all := append([]libp2p.Option{
		libp2p.Identity(sk),
		libp2p.ListenAddrStrings(fmt.Sprintf("/ip4/%s/udp/4001/quic-v1", a)),
		simlibp2p.QUICSimnet(n.nw, link),
		libp2p.DisableIdentifyAddressDiscovery(),
		libp2p.ResourceManager(&network.NullResourceManager{}),
	}, opts...)
	h, err := libp2p.New(all...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}
