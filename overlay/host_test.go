package overlay

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	ma "github.com/multiformats/go-multiaddr"
)

func TestLoadIdentity(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "identity.key")
	k1, err := LoadIdentity(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v; want 0600", st.Mode().Perm(), err)
	}
	k2, err := LoadIdentity(path)
	if err != nil || !k1.Equals(k2) {
		t.Fatalf("reloaded a different key: %v", err)
	}
	id1, _ := peer.IDFromPrivateKey(k1)
	id2, _ := peer.IDFromPrivateKey(k2)
	if id1 != id2 {
		t.Fatal("peer id changed across loads")
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadIdentity(path); err == nil {
		t.Fatal("a world-readable key was accepted")
	}
	bad := filepath.Join(dir, "bad.key")
	if err := os.WriteFile(bad, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadIdentity(bad); err == nil {
		t.Fatal("garbage accepted as a key")
	}
}

func TestHostOptionsValidated(t *testing.T) {
	sk, _ := newKey(t)
	for name, o := range map[string]HostOption{
		"conn limits": ConnLimits(10, 5),
		"bind":        BindAddress(nodeAddr(0), 70000),
	} {
		t.Run(name, func(t *testing.T) {
			if h, err := NewHost(sk, o); err == nil {
				h.Close()
				t.Fatal("invalid option accepted")
			}
		})
	}
	if _, err := NewHost(nil); err == nil {
		t.Fatal("nil key accepted")
	}
}

func TestOptionsValidated(t *testing.T) {
	h := loopback(t).node(0).h
	for name, o := range map[string]Option{
		"no delegator": WithDelegator(nil),
		"replication":  Replication(0),
		"liveness":     Liveness(time.Second, time.Second),
		"maintenance":  Maintenance(0, time.Second),
		"cache":        Cache(0, time.Second),
		"diversity":    DiversityLimits(3, 2),
		"anchor":       AnchorDepth(0),
		"announce":     Announce(time.Millisecond),
		"logger":       Logger(nil),
		"load":         WithLoad(nil),
	} {
		t.Run(name, func(t *testing.T) {
			if o, err := New(h, mustTree(t), memDB(t), WithDelegator(&requesterDelegator{}), o); err == nil {
				o.Close()
				t.Fatal("invalid option accepted")
			}
		})
	}
}

// TestDiversityFilter: with kad-dht's default limits, peers of one /16 fill
// at most three routing-table slots.
func TestDiversityFilter(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		hub := r.node(0, DiversityLimits(2, 3))
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		for i := 1; i <= 6; i++ {
			n := r.node(4 * i) // 127.0.x.1: one /16 group
			if err := n.h.Connect(ctx, peer.AddrInfo{ID: hub.h.ID(), Addrs: hub.h.Addrs()}); err != nil {
				t.Fatal(err)
			}
		}
		// Give the routing table time to consider every peer.
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) && hub.o.dht.RoutingTable().Size() < 3 {
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(500 * time.Millisecond)
		if n := hub.o.dht.RoutingTable().Size(); n == 0 || n > 3 {
			t.Fatalf("routing table holds %d peers of one /16, want 1 to 3", n)
		}
	})
}

func TestCloseIdempotent(t *testing.T) {
	n := loopback(t).node(0)
	if err := n.o.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.o.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := n.o.Resolve(t.Context(), nodeAddr(1)); err == nil {
		t.Fatal("Resolve after Close succeeded")
	}
}

// TestTakenPortRefused: a second host on the TCP or UDP port of a running
// one fails to start, naming the port, instead of sharing it (go-libp2p's
// TCP listener uses SO_REUSEPORT). Real loopback sockets: the subject is
// the transport's binding.
func TestTakenPortRefused(t *testing.T) {
	sk := func() crypto.PrivKey {
		k, _, err := crypto.GenerateEd25519Key(nil)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	a, err := NewHost(sk(), ListenAddrs(ma.StringCast("/ip4/127.0.0.1/tcp/0"), ma.StringCast("/ip4/127.0.0.1/udp/0/quic-v1")))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var addrs []ma.Multiaddr
	for _, addr := range a.Network().ListenAddresses() {
		if _, err := addr.ValueForProtocol(ma.P_IP4); err == nil {
			addrs = append(addrs, addr) // not /p2p-circuit
		}
	}
	for _, addr := range addrs {
		b, err := NewHost(sk(), ListenAddrs(addr))
		if err == nil {
			b.Close()
			t.Fatalf("a second host started on %s", addr)
		}
		if !strings.Contains(err.Error(), "in use by another process") {
			t.Fatalf("%s: %v", addr, err)
		}
	}
	if len(addrs) != 2 {
		t.Fatalf("listening on %v: want TCP and QUIC", addrs)
	}
	// Once the first is closed, its ports are free again.
	a.Close()
	b, err := NewHost(sk(), ListenAddrs(addrs...))
	if err != nil {
		t.Fatalf("after the first host closed: %v", err)
	}
	b.Close()
}

// TestServiceLimitsFitMessages: each protocol's per-peer memory limit
// holds what serving one of its streams reserves (twice its largest
// message, up to streamMemory), or every request to it is reset.
func TestServiceLimitsFitMessages(t *testing.T) {
	var l rcmgr.ScalingLimitConfig
	addServiceLimits(&l)
	for _, sp := range []spec{probeSpec, coordSpec, replicateSpec, auditSpec, releaseSpec, announceSpec} {
		lim, ok := l.ServicePeerLimits[sp.service]
		if !ok {
			t.Errorf("%s: no per-peer limit for service %s", sp.id, sp.service)
			continue
		}
		if need := int64(min(2*sp.maxMsg, streamMemory)); lim.BaseLimit.Memory < need {
			t.Errorf("%s: a stream reserves %d bytes, over the per-peer limit of %d", sp.id, need, lim.BaseLimit.Memory)
		}
	}
}
