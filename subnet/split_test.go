package subnet

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"
)

func TestSplitRange(t *testing.T) {
	for _, tc := range []struct {
		name   string
		holder string // range
		at     string // decided for; "" unknown
		addr   string
		want   string // "" none
	}{
		{"the half away from the first site", "10.0.0.0/16", "10.0.1.1", "10.0.200.7", "10.0.128.0/17"},
		{"a quarter when both are in one half", "10.0.0.0/16", "10.0.1.1", "10.0.64.9", "10.0.64.0/18"},
		{"neighbours: a small block", "10.0.0.0/16", "10.0.1.1", "10.0.1.2", "10.0.1.2/31"},
		{"the same address: nothing", "10.0.0.0/16", "10.0.1.1", "10.0.1.1", ""},
		{"unknown decision address: the largest block but the whole", "10.0.0.0/16", "", "10.0.200.7", "10.0.128.0/17"},
		{"a range that is no block", "10.0.0.0 - 10.0.2.255", "10.0.0.5", "10.0.2.9", "10.0.2.0/24"},
		{"outside the holder", "10.0.0.0/16", "10.0.1.1", "10.1.0.1", ""},
		{"IPv6", "2001:db8::/32", "2001:db8::1", "2001:db8:8000::1", "2001:db8:8000::/33"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := Part{Range: mustRange(t, tc.holder), Node: "a"}
			if tc.at != "" {
				h.Addr = mustAddr(t, tc.at)
			}
			got, ok := SplitRange(h, mustAddr(t, tc.addr))
			if tc.want == "" {
				if ok {
					t.Errorf("got %v, want none", got)
				}
				return
			}
			if !ok || got != mustRange(t, tc.want) {
				t.Errorf("got %v %v, want %v", got, ok, tc.want)
			}
		})
	}
}

func TestHolderAndParts(t *testing.T) {
	tr := rpslTree(t, "10.0.0.0 - 10.255.255.255", "10.4.0.0 - 10.4.255.255")
	tab := NewMemTable("a", "b", "c")
	id := find(t, tr, "10.4.0.0/16")
	if _, ok := Holder(tr, tab, mustAddr(t, "10.4.1.1")); ok {
		t.Fatal("an undelegated range has a holder")
	}
	tab.SetAt(id, "a", mustAddr(t, "10.4.1.1"))
	tab.SetPart(id, Part{Range: mustRange(t, "10.4.128.0/17"), Node: "b", Addr: mustAddr(t, "10.4.200.1")})
	tab.SetPart(id, Part{Range: mustRange(t, "10.4.192.0/18"), Node: "c", Addr: mustAddr(t, "10.4.250.1")})
	for addr, want := range map[string]Part{
		"10.4.1.9":   {Range: mustRange(t, "10.4.0.0/16"), Node: "a", Addr: mustAddr(t, "10.4.1.1")},
		"10.4.130.1": {Range: mustRange(t, "10.4.128.0/17"), Node: "b", Addr: mustAddr(t, "10.4.200.1")},
		"10.4.250.9": {Range: mustRange(t, "10.4.192.0/18"), Node: "c", Addr: mustAddr(t, "10.4.250.1")},
	} {
		if h, ok := Holder(tr, tab, mustAddr(t, addr)); !ok || h != want {
			t.Errorf("%s: holder %+v, want %+v", addr, h, want)
		}
	}
	// The searches' step 1 gives the part's node.
	m := &IPMicra{Tree: tr, Table: tab, Prober: &fakeProber{}}
	if d, err := m.Delegate(context.Background(), mustAddr(t, "10.4.250.9")); err != nil || d.Node != "c" || d.Step != StepOwned || d.Part != mustRange(t, "10.4.192.0/18") {
		t.Errorf("owned part: %+v %v", d, err)
	}
	tab.Delete(id)
	if _, ok := Holder(tr, tab, mustAddr(t, "10.4.250.9")); ok {
		t.Error("parts outlive their range's delegation")
	}
}

func TestDelegatePart(t *testing.T) {
	// a holds 10.4.0.0/16, decided for a site 5 ms from it; a new site in
	// the range is 90 ms from a and 8 ms from b.
	tr := rpslTree(t, "10.0.0.0 - 10.255.255.255", "10.4.0.0 - 10.4.255.255")
	part := mustRange(t, "10.4.128.0/17")
	addr := mustAddr(t, "10.4.200.1")
	for _, tc := range []struct {
		name   string
		guided bool
		rtt    map[string]int
		want   string
	}{
		{"the paper's search finds the nearer node", false, map[string]int{"b": 8, "c": 120}, "b"},
		{"the guided search finds the nearer node", true, map[string]int{"b": 8, "c": 120}, "b"},
		{"nobody nearer: the holder keeps it", false, map[string]int{"b": 150, "c": 120}, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := NewMemTable("a", "b", "c")
			tab.SetAt(find(t, tr, "10.4.0.0/16"), "a", mustAddr(t, "10.4.1.1"))
			cache := &MemProbeCache{Tree: tr}
			p := &fakeProber{rtt: tc.rtt}
			m := &IPMicra{Tree: tr, Table: tab, Prober: p, Cache: cache, Config: SearchConfig{Guided: tc.guided}}
			d, err := m.DelegatePart(context.Background(), addr, part, "a", 90*time.Millisecond)
			if err != nil || d.Node != tc.want || d.Part != part || d.Subnet != find(t, tr, "10.4.0.0/16") {
				t.Fatalf("decision %+v err %v, want %s", d, err, tc.want)
			}
			if slices.Contains(p.asked, "a") || d.Issued != len(p.asked) {
				t.Errorf("asked %v (issued %d): the holder's observation is an answer, not a probe", p.asked, d.Issued)
			}
			if rtt, ok := cache.Get("a", part); !ok || rtt != 90*time.Millisecond {
				t.Errorf("the observation is not stored under the part: %v %v", rtt, ok)
			}
		})
	}
	m := &IPMicra{Tree: tr, Table: NewMemTable("a"), Prober: &fakeProber{}}
	if _, err := m.DelegatePart(context.Background(), mustAddr(t, "10.4.1.1"), part, "a", 0); !errors.Is(err, ErrBadPart) {
		t.Errorf("a part not holding the address: %v", err)
	}
	bf := &BruteForce{Tree: tr, Table: NewMemTable("a", "b", "c"), Prober: &fakeProber{rtt: map[string]int{"b": 30, "c": 20}}}
	if d, err := bf.DelegatePart(context.Background(), addr, part, "a", 90*time.Millisecond); err != nil || d.Node != "c" || d.Issued != 2 {
		t.Errorf("brute force: %+v %v", d, err)
	}
	or := &Oracle{Tree: tr, Table: NewMemTable("a", "b", "c"), RTT: func(n string, _ netip.Addr) time.Duration {
		return map[string]time.Duration{"a": 90, "b": 8, "c": 20}[n]
	}}
	if d, err := or.DelegatePart(context.Background(), addr, part, "a", 90*time.Millisecond); err != nil || d.Node != "b" {
		t.Errorf("oracle: %+v %v", d, err)
	}
}
