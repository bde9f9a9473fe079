package memnet_test

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/transport"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	ttransport "github.com/libp2p/go-libp2p/p2p/transport/testsuite"

	"github.com/micra-net/micra/internal/memnet"
	"github.com/micra-net/micra/internal/p2ptest"
)

type ctor = func(crypto.PrivKey, connmgr.ConnectionGater, network.ResourceManager) (transport.Transport, error)

func newTransport(t *testing.T, n *memnet.Network) (transport.Transport, peer.ID) {
	t.Helper()
	sk, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := n.Transport().(ctor)(sk, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(sk)
	return tr, id
}

// TestTransportSuite runs go-libp2p's transport test suite (dials, streams,
// resets, stress) on the network in real time, with a small latency.
func TestTransportSuite(t *testing.T) {
	n := memnet.New(func(netip.Addr, netip.Addr) time.Duration { return 100 * time.Microsecond }, 0)
	ta, ida := newTransport(t, n)
	tb, _ := newTransport(t, n)
	ttransport.SubtestTransport(t, ta, tb, "/ip4/127.0.0.1/tcp/0", ida)
}

func newHost(t *testing.T, n *memnet.Network, a string) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.Transport(n.Transport()), libp2p.ListenAddrStrings("/ip4/"+a+"/tcp/4001"),
		libp2p.DisableIdentifyAddressDiscovery(), libp2p.ResourceManager(&network.NullResourceManager{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// TestLatencyBandwidth: a ping takes the two one-way latencies; a
// megabyte takes its serialisation on the sender's uplink plus one
// latency; a dial nobody answers fails after a round trip. Virtual time.
func TestLatencyBandwidth(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		lat := func(from, to netip.Addr) time.Duration {
			if from.String() == "10.0.0.1" {
				return 30 * time.Millisecond
			}
			return 20 * time.Millisecond
		}
		const bps = 8 << 20 // 1 MiB/s
		n := memnet.New(lat, bps)
		a, b := newHost(t, n, "10.0.0.1"), newHost(t, n, "10.0.0.2")
		ctx := t.Context()
		t0 := time.Now()
		a.Peerstore().AddAddrs(b.ID(), b.Addrs(), time.Hour)
		if _, err := a.Network().DialPeer(ctx, b.ID()); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(t0); d != 50*time.Millisecond {
			t.Errorf("connect took %v, want a round trip, 50ms", d)
		}
		time.Sleep(time.Second) // identify
		res := <-ping.Ping(ctx, a, b.ID())
		if res.Error != nil {
			t.Fatal(res.Error)
		}
		// 32 bytes and a frame header each way at 1 MiB/s: 77 µs.
		if res.RTT < 50*time.Millisecond || res.RTT > 51*time.Millisecond {
			t.Errorf("ping RTT %v, want 50ms and the serialisation", res.RTT)
		}

		got := make(chan time.Duration, 1)
		b.SetStreamHandler("/bulk", func(s network.Stream) {
			defer s.Close()
			n, _ := io.Copy(io.Discard, s)
			if n != 1<<20 {
				t.Errorf("received %d bytes", n)
			}
			got <- time.Since(t0)
		})
		s, err := a.NewStream(ctx, b.ID(), "/bulk")
		if err != nil {
			t.Fatal(err)
		}
		t0 = time.Now()
		for range 64 {
			if _, err := s.Write(make([]byte, 16<<10)); err != nil {
				t.Fatal(err)
			}
		}
		s.CloseWrite()
		d := <-got
		if d < time.Second+30*time.Millisecond || d > 1100*time.Millisecond {
			t.Errorf("a MiB took %v, want a second and the latency", d)
		}
		s.Close()

		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		c := newHost(t, n, "10.0.0.3")
		c.Close()
		t0 = time.Now()
		err = a.Connect(dctx, peer.AddrInfo{ID: c.ID(), Addrs: c.Addrs()})
		if err == nil || time.Since(t0) >= 10*time.Second {
			t.Errorf("dial to a closed host: %v after %v, want a refusal before the timeout", err, time.Since(t0))
		}
	})
}

// TestCut: a host cut off goes silent; its peers' connections to it close
// one idle timeout later, not before, and dials to it hang until a
// deadline.
func TestCut(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		n := memnet.New(func(netip.Addr, netip.Addr) time.Duration { return 10 * time.Millisecond }, 0)
		a, b := newHost(t, n, "10.0.0.1"), newHost(t, n, "10.0.0.2")
		ctx := t.Context()
		if err := a.Connect(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		n.Cut(netip.MustParseAddr("10.0.0.2"))
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		res, ok := <-ping.Ping(pctx, a, b.ID())
		cancel()
		if ok && res.Error == nil {
			t.Fatal("ping through a cut answered")
		}
		if a.Network().Connectedness(b.ID()) != network.Connected {
			t.Errorf("connection closed before the idle timeout")
		}
		time.Sleep(memnet.IdleTimeout)
		if a.Network().Connectedness(b.ID()) == network.Connected || b.Network().Connectedness(a.ID()) == network.Connected {
			t.Errorf("connections to a cut host still open after the idle timeout")
		}
		dctx, cancel := context.WithTimeout(ctx, 7*time.Second)
		defer cancel()
		t0 := time.Now()
		err := a.Connect(dctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()})
		// The swarm gives a dial 5 s (its transport dial timeout).
		if err == nil || !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) < 5*time.Second {
			t.Errorf("dial to a cut host: %v after %v, want it to hang until a deadline", err, time.Since(t0))
		}
	})
}
