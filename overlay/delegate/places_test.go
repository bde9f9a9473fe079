package delegate

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/subnet"
)

func TestDelegatorPlaces(t *testing.T) {
	// A Delegator decides a subnet in one allocation's shard, then one in
	// another allocation of the same country, where the DHT's indexes hold
	// nothing: the first decision's probes are a place of that country
	// (places.go), so the second asks its nearest node first. A fresh
	// Delegator, cold, asks in the paper's order until an answer is under
	// the threshold.
	rtts := map[peer.ID]int{"n1": 80, "n2": 70, "n3": 20, "n4": 90, "n5": 120}
	decide := func(d *Delegator, e *fakeEnv) peer.ID {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		n, err := d.Delegate(ctx, overlay.DelegateRequest{Subnet: e.subnet, Addr: e.tree.Range(e.subnet).Start.Next()}, e)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	newD := func() *Delegator {
		d, err := New(Logger(slog.New(slog.DiscardHandler)), ClaimCheck(nil)) // counts probes exactly, as run does
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	warm := newD()
	if n := decide(warm, newEnv(t, "127.0.3.0/24", rtts)); n != "n3" {
		t.Fatalf("first decision chose %s, want n3", string(n))
	}
	e := newEnv(t, "127.2.3.0/24", rtts)
	cold := newEnv(t, "127.2.3.0/24", rtts)
	if n := decide(newD(), cold); n != "n3" || !slices.Equal(cold.asked, []peer.ID{"n1", "n2", "n3"}) {
		t.Errorf("cold: chose %s after asking %v; want n3 after n1, n2, n3", string(n), names(cold.asked))
	}
	// n3 answers under the threshold, as the place predicts, and the
	// place's other nodes cannot beat it.
	if n := decide(warm, e); n != "n3" || !slices.Equal(e.asked, []peer.ID{"n3"}) {
		t.Errorf("with the places of its country: chose %s after asking %v; want n3 at once", string(n), names(e.asked))
	}
}

func names(ps []peer.ID) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = string(p)
	}
	return out
}

func TestPlaces(t *testing.T) {
	tr, err := testTree()
	if err != nil {
		t.Fatal(err)
	}
	r := func(p string) subnet.Range { return subnet.RangeOf(netip.MustParsePrefix(p)) }
	ix := func(p string, n peer.ID) overlay.IndexedDelegation {
		return overlay.IndexedDelegation{Delegation: overlay.Delegation{Subnet: r(p), Node: n},
			Probes: []overlay.ProbeResult{{Subnet: r(p), Peer: n, RTT: time.Millisecond, At: time.Now()}}}
	}
	var p places
	for _, s := range []string{"127.0.3.0/24", "127.2.7.0/24", "127.1.1.0/24", "127.0.9.0/24"} {
		p.add(tr, ix(s, "n1"))
	}
	p.add(tr, overlay.IndexedDelegation{Delegation: overlay.Delegation{Subnet: r("127.1.2.0/24")}}) // no probes: left out
	p.add(tr, ix("127.0.3.0/24", "n2"))                                                             // replaces
	got := func(es []placeEntry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.r.String()+" "+string(e.probes[0].Peer))
		}
		return out
	}
	if w, want := got(p.within(r("127.0.0.0/16"))), []string{"127.0.3.0/24 n2", "127.0.9.0/24 n1"}; !slices.Equal(w, want) {
		t.Errorf("within 127.0/16: %v, want %v", w, want)
	}
	if c, want := got(p.country("US", netip.MustParseAddr("127.1.0.0"))), []string{"127.1.1.0/24 n1", "127.0.9.0/24 n1", "127.0.3.0/24 n2", "127.2.7.0/24 n1"}; !slices.Equal(c, want) {
		t.Errorf("country US near 127.1.0.0: %v, want %v", c, want)
	}
	if c := p.country("DE", netip.MustParseAddr("127.1.0.0")); len(c) != 0 {
		t.Errorf("country DE: %v", got(c))
	}
	named := func() []peer.ID { ns := p.named(); slices.Sort(ns); return ns }
	if ns := named(); !slices.Equal(ns, []peer.ID{"n1", "n2"}) {
		t.Errorf("named %v, want n1, n2", ns)
	}
	// Bounded: the oldest go, and the nodes only they named.
	for i := range maxPlaces + 10 {
		p.add(tr, ix(netip.AddrFrom4([4]byte{127, 5, byte(i >> 8), byte(i)}).String()+"/32", "n3"))
	}
	if len(p.es) != maxPlaces || len(p.within(r("127.0.0.0/16"))) != 0 {
		t.Errorf("%d entries kept, the oldest still there: %v", len(p.es), got(p.within(r("127.0.0.0/16"))))
	}
	if ns := named(); !slices.Equal(ns, []peer.ID{"n3"}) {
		t.Errorf("named %v after the eviction, want n3", ns)
	}
}

// TestDelegatorAsksNodesNamedInProbes: a node that is none of the
// coordinator's peers but answered a stored probe of a neighbouring subnet
// is a candidate: the search asks it where its probe predicts it nearest,
// unless it may not crawl or is excluded.
func TestDelegatorAsksNodesNamedInProbes(t *testing.T) {
	rtts := map[peer.ID]int{"n1": 80, "n2": 30, "n3": 20, "n4": 90, "n5": 120, "far": 4}
	setup := func() *fakeEnv {
		e := newEnv(t, "127.0.3.0/24", rtts)
		sib := subnet.RangeOf(netip.MustParsePrefix("127.0.2.0/24"))
		e.delegate(t, "127.0.2.0/24", "n3")
		for n, ms := range rtts {
			e.stored = append(e.stored, overlay.ProbeResult{Subnet: sib, Peer: n, RTT: time.Duration(ms+1) * time.Millisecond, At: time.Now()})
		}
		return e
	}
	if n, _ := run(t, setup(), overlay.DelegateRequest{}); n != "far" {
		t.Errorf("chose %s, want far, named in the sibling's probes", n)
	}
	e := setup()
	e.barred = map[peer.ID]bool{"far": true}
	if n, _ := run(t, e, overlay.DelegateRequest{}); n == "far" || slices.Contains(e.asked, "far") {
		t.Errorf("chose %s after asking %v: far may not crawl", n, e.asked)
	}
	e = setup()
	if n, _ := run(t, e, overlay.DelegateRequest{Exclude: []peer.ID{"far"}}); n == "far" || slices.Contains(e.asked, "far") {
		t.Errorf("chose %s after asking %v: far is excluded", n, e.asked)
	}
}
