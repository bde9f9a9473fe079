package overlay

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/egress/egresstest"
	"github.com/micra-net/micra/overlay/pb"
)

// countingProber answers like fixedProber and counts the probes it ran;
// for egresstest.Intranet it fails as the crawler's egress guard does
// when a name resolves to a private address.
type countingProber struct{ n atomic.Int64 }

func (p *countingProber) Probe(ctx context.Context, url string) (time.Duration, error) {
	p.n.Add(1)
	if strings.Contains(url, egresstest.Intranet) {
		var guard egress.Policy
		return 0, fmt.Errorf("probe: %w", guard.CheckAddr(egresstest.IntranetAddr))
	}
	return 10 * time.Millisecond, nil
}

// publicAddr is outside the test tree and allowed by every policy: a
// request for it with a URL on a special-purpose host is refused for the
// URL alone.
var publicAddr = netip.MustParseAddr("93.184.216.34")

// TestSpecialPurposeRefused: for each special-purpose class, a
// node with the default policy refuses a peer's DELEGATE, SPLIT and
// RESOLVE of such an address (or of a URL on it), and a PROBE of a URL on
// it, with FORBIDDEN and a message naming the class; the peer allows
// private networks, as one that does not share the policy may. Its own
// Delegate, Resolve, Split and Probe refuse before sending anything.
// Nothing is decided or probed.
func TestSpecialPurposeRefused(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		prober := &countingProber{}
		a := r.node(0) // allows private networks (swarmOpts)
		b := r.node(1, Egress(egress.Policy{}), WithProber(prober))
		if err := a.h.Connect(t.Context(), peer.AddrInfo{ID: b.h.ID(), Addrs: b.h.Addrs()}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		sid := b.o.sid[:]
		sent := func() int64 {
			k := b.o.Stats().Kinds
			return k["micra/DELEGATE"] + k["micra/SPLIT"] + k["micra/RESOLVE"] + k["micra/PROBE"]
		}
		before := sent()
		// No subtests: t.Run is not allowed inside a synctest bubble.
		for _, c := range egresstest.Special() {
			addr := c.Addr
			if c.IsName() {
				addr = publicAddr
			}
			msg := func(typ pb.Message_Type) *pb.Message { return &pb.Message{Version: wireVersion, Type: typ} }
			del := msg(pb.Message_DELEGATE)
			del.Delegate = &pb.Delegate{Snapshot: sid, Addr: addr.AsSlice(), Url: c.URL()}
			split := msg(pb.Message_SPLIT)
			split.Split = &pb.Split{Snapshot: sid, Addr: addr.AsSlice(), Url: c.URL(), ObservedMicros: 50_000}
			probe := msg(pb.Message_PROBE)
			probe.Probe = &pb.Probe{Url: c.URL()}
			frames := []struct {
				name string
				id   protocol.ID
				m    *pb.Message
			}{
				{"DELEGATE", CoordinateID, del},
				{"SPLIT", CoordinateID, split},
				{"PROBE", ProbeID, probe},
			}
			if !c.IsName() {
				res := msg(pb.Message_RESOLVE)
				res.Resolve = &pb.Resolve{Snapshot: sid, Addr: c.Addr.AsSlice()}
				frames = append(frames, struct {
					name string
					id   protocol.ID
					m    *pb.Message
				}{"RESOLVE", CoordinateID, res})
			}
			for _, f := range frames {
				m, err := rawExchange(t, a, b.h.ID(), f.id, delimited(f.m))
				switch {
				case err != nil:
					t.Errorf("%s, %s: no answer: %v", c.Name, f.name, err)
				case m.GetType() != pb.Message_ERROR || m.GetError().GetCode() != pb.Error_FORBIDDEN:
					t.Errorf("%s, %s: answer %v %v, want FORBIDDEN", c.Name, f.name, m.GetType(), m.GetError())
				case !strings.Contains(m.GetError().GetMessage(), c.Class):
					t.Errorf("%s, %s: message %q does not name %q", c.Name, f.name, m.GetError().GetMessage(), c.Class)
				}
			}

			// This node's own calls refuse before asking anyone.
			refused := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, ErrForbidden) || !errors.Is(err, egress.ErrSpecialPurpose) || !strings.Contains(err.Error(), c.Class) {
					t.Errorf("%s: %s = %v, want a refusal naming %q", c.Name, what, err, c.Class)
				}
			}
			_, err := b.o.Delegate(ctx, c.URL(), addr)
			refused("Delegate", err)
			_, err = b.o.Split(ctx, c.URL(), addr, 50*time.Millisecond)
			refused("Split", err)
			_, err = b.o.Probe(ctx, a.h.ID(), c.URL())
			refused("Probe", err)
			if !c.IsName() {
				_, _, err = b.o.Resolve(ctx, c.Addr)
				refused("Resolve", err)
			}
		}
		// An own address the policy refuses is not claimed, now or with
		// the heartbeats.
		own := r.node(2, Egress(egress.Policy{}), OwnAddress(nodeAddr(2)))
		if _, err := own.o.ClaimOwn(ctx); !errors.Is(err, ErrForbidden) || !own.o.ownDone.Load() {
			t.Errorf("ClaimOwn of %s = %v (done %v), want ErrForbidden and nothing to retry", nodeAddr(2), err, own.o.ownDone.Load())
		}
		if n := sent(); n != before {
			t.Errorf("the refusing node sent %d requests", n-before)
		}
		if n := prober.n.Load(); n != 0 {
			t.Errorf("%d probes ran", n)
		}
		for _, n := range []*node{a, b} {
			n.del.mu.Lock()
			runs := len(n.del.runs)
			n.del.mu.Unlock()
			if runs != 0 {
				t.Errorf("the delegation procedure ran for %d subnets", runs)
			}
			if got := len(n.o.Owned()); got != 0 {
				t.Errorf("%d subnets delegated", got)
			}
		}
	})
}

// probeOne is a delegation procedure that asks one node to probe the
// request's URL and keeps what it saw: the probe's error and the probes
// stored for the subnet afterwards.
type probeOne struct {
	mu     sync.Mutex
	who    peer.ID
	err    error
	stored []ProbeResult
}

func (d *probeOne) Delegate(ctx context.Context, req DelegateRequest, env DelegationEnv) (peer.ID, error) {
	_, err := env.Probe(ctx, d.who, req.URL, env.Tree().Range(req.Subnet))
	d.mu.Lock()
	defer d.mu.Unlock()
	d.err, d.stored = err, env.Probes(req.Subnet)
	if err != nil {
		return "", err
	}
	return req.From, nil
}

// TestSpecialProbeNotStored: a node asked to probe a URL whose
// name its prober's egress guard resolves to a special-purpose address
// answers FORBIDDEN, not a failed probe, and the coordinator stores no
// probe result; nothing is delegated.
func TestSpecialProbeNotStored(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		d := &probeOne{}
		site := netip.MustParsePrefix("127.0.5.0/24") // the delegated site's range, allowed by both
		a := r.node(0, WithDelegator(d), Egress(egress.Policy{Allow: []netip.Prefix{site}}))
		b := r.node(1, WithDelegator(d), Egress(egress.Policy{Allow: []netip.Prefix{site}}), WithProber(&countingProber{}))
		d.who = b.h.ID()
		joinSwarm(t, []*node{a, b})
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if _, err := a.o.Probe(ctx, b.h.ID(), "http://"+egresstest.Intranet+"/"); !errors.Is(err, ErrForbidden) || errors.Is(err, ErrProbeFailed) {
			t.Fatalf("probe of a name of a private address = %v, want ErrForbidden and not ErrProbeFailed", err)
		}
		_, err := a.o.Delegate(ctx, "http://"+egresstest.Intranet+"/", netip.MustParseAddr("127.0.5.5"))
		if err == nil {
			t.Fatal("delegated on a refused probe")
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if !errors.Is(d.err, ErrForbidden) || errors.Is(d.err, ErrProbeFailed) || len(d.stored) != 0 {
			t.Fatalf("procedure saw probe error %v and %d stored probes; want ErrForbidden and none", d.err, len(d.stored))
		}
	})
}

// TestEmulatedInternetAllowed: with private networks allowed
// (node's allow_private_networks), the emulated Internet's loopback
// addresses are delegated, resolved and probed as before.
func TestEmulatedInternetAllowed(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		nodes := r.swarm(2) // swarmOpts allow private networks
		a, b := nodes[0], nodes[1]
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		site := netip.MustParseAddr("127.0.0.1")
		d, err := a.o.Delegate(ctx, "http://127.0.0.1/", site)
		if err != nil || d.Node == "" {
			t.Fatalf("Delegate(127.0.0.1) = %v, %v", d, err)
		}
		if got, ok, err := b.o.Resolve(ctx, site); err != nil || !ok || got.Node != d.Node {
			t.Fatalf("Resolve(127.0.0.1) = %v, %v, %v; want %s", got, ok, err, d.Node)
		}
		if rtt, err := a.o.Probe(ctx, b.h.ID(), "http://localhost:8089/"); err != nil || rtt <= 0 {
			t.Fatalf("Probe(localhost) = %v, %v", rtt, err)
		}
	})
}
