package subnet

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// fakeProber answers from a table of RTTs in ms per node; missing nodes
// fail, and nodes in notProbed do not probe. It counts the probes asked.
type fakeProber struct {
	rtt       map[string]int
	notProbed map[string]bool
	asked     []string
}

func (p *fakeProber) Probe(_ context.Context, node string, _ netip.Addr) (time.Duration, error) {
	p.asked = append(p.asked, node)
	if p.notProbed[node] {
		return 0, fmt.Errorf("%s: %w: refused", node, ErrNotProbed)
	}
	ms, ok := p.rtt[node]
	if !ok {
		return 0, errors.New("unreachable")
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func find(t *testing.T, tr *Tree, r string) ID {
	t.Helper()
	id, ok := tr.Find(mustRange(t, r))
	if !ok {
		t.Fatalf("range %s not in tree", r)
	}
	return id
}

func TestIPMicraThesisExample(t *testing.T) {
	// Thesis 7.6.1: a URL at 121.0.0.1 falls in unary subnet 12, so subnet
	// 8 is used; nobody of 8's organisation is delegated; 8's children 11
	// and 13 are delegated to crawlers x and y, which are asked in turn.
	tr, _ := build(t, figure72)
	tab := NewMemTable("x", "y", "z")
	tab.Set(find(t, tr, "120.0.0.1 - 120.255.255.255"), "x") // 11
	tab.Set(find(t, tr, "122.0.0.0/8"), "y")                 // 13
	p := &fakeProber{rtt: map[string]int{"x": 80, "y": 30, "z": 5}}
	m := &IPMicra{Tree: tr, Table: tab, Prober: p}
	d, err := m.Delegate(context.Background(), mustAddr(t, "121.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	if d.Subnet != find(t, tr, "120.0.0.1 - 125.255.255.255") || d.Node != "y" || d.Step != StepHierarchy ||
		d.Issued != 2 || !slices.Equal(p.asked, []string{"x", "y"}) || d.RTT != 30*time.Millisecond {
		t.Errorf("decision %+v, asked %v; want subnet 8 to y after asking x then y", d, p.asked)
	}
}

func TestIPMicraSteps(t *testing.T) {
	// A hierarchy with organisations spread over several ranges.
	tr, _ := build(t, `inetnum: 10.0.0.0 - 10.255.255.255
org: ORG-ISP

inetnum: 10.1.0.0 - 10.1.255.255
org: ORG-A

inetnum: 10.1.0.0 - 10.1.0.255
org: ORG-A1

inetnum: 10.1.1.0 - 10.1.1.255
org: ORG-B

inetnum: 10.2.0.0 - 10.2.255.255
org: ORG-C

inetnum: 10.2.0.0 - 10.2.0.255
org: ORG-C1

inetnum: 10.3.0.0 - 10.3.255.255
org: ORG-A

inetnum: 10.4.0.0 - 10.4.255.255
org: ORG-B

inetnum: 10.5.0.0 - 10.5.255.255
org: ORG-D

inetnum: 10.6.0.0 - 10.6.255.255
org: ORG-A
`)
	id := func(r string) ID { return find(t, tr, r) }
	type deleg struct{ r, node string }
	tests := []struct {
		name   string
		dels   []deleg
		rtt    map[string]int
		not    []string // nodes that do not probe
		addr   string
		cfg    SearchConfig
		node   string
		step   Step
		asked  []string
		subnet string
	}{{
		name: "owned: no probe", dels: []deleg{{"10.5.0.0/16", "d"}},
		addr: "10.5.1.1", node: "d", step: StepOwned, subnet: "10.5.0.0/16",
	}, {
		name: "one node holds the organisation: no probe", dels: []deleg{{"10.3.0.0/16", "a"}},
		addr: "10.1.200.1", node: "a", step: StepOrganisation, subnet: "10.1.0.0/16",
	}, {
		name: "owned beats organisation", dels: []deleg{{"10.1.1.0/24", "b1"}, {"10.4.0.0/16", "b2"}},
		rtt:  map[string]int{"b1": 70, "b2": 20, "far": 1},
		addr: "10.4.0.0", node: "b2", step: StepOwned, subnet: "10.4.0.0/16", // owned wins first
	}, {
		name: "organisation on two nodes, probed in turn", dels: []deleg{{"10.3.0.0/16", "b1"}, {"10.4.0.0/16", "b2"}, {"10.6.0.0/16", "b3"}},
		rtt:  map[string]int{"b1": 70, "b2": 60, "b3": 20},
		addr: "10.1.100.1", node: "b3", step: StepOrganisation, asked: []string{"b1", "b3"}, subnet: "10.1.0.0/16",
	}, {
		name: "organisation nodes all too far: the search goes on", dels: []deleg{{"10.3.0.0/16", "b1"}, {"10.6.0.0/16", "b3"}, {"10.5.0.0/16", "d"}},
		rtt:  map[string]int{"b1": 70, "b3": 60, "d": 30},
		addr: "10.1.100.1", node: "d", step: StepHierarchy, asked: []string{"b1", "b3", "d"}, subnet: "10.1.0.0/16",
	}, {
		name: "below the subnet first: its children", dels: []deleg{{"10.2.0.0/24", "c1"}, {"10.5.0.0/16", "d"}},
		rtt:  map[string]int{"c1": 10, "d": 1},
		addr: "10.2.9.9", node: "c1", step: StepHierarchy, asked: []string{"c1"}, subnet: "10.2.0.0/16",
	}, {
		name: "one level up: the siblings and their children", dels: []deleg{{"10.1.0.0/24", "a1"}, {"10.5.0.0/16", "d"}},
		rtt:  map[string]int{"a1": 90, "d": 40},
		addr: "10.2.9.9", node: "d", step: StepHierarchy, asked: []string{"a1", "d"}, subnet: "10.2.0.0/16",
	}, {
		name: "nobody under the threshold: everybody, then the best", dels: []deleg{{"10.5.0.0/16", "d"}},
		rtt:  map[string]int{"d": 90, "e": 70, "f": 80},
		addr: "10.2.9.9", node: "e", step: StepBest, asked: []string{"d", "e", "f"}, subnet: "10.2.0.0/16",
	}, {
		name: "no fallback: the best of the hierarchy", dels: []deleg{{"10.5.0.0/16", "d"}},
		rtt: map[string]int{"d": 90, "e": 70, "f": 80}, cfg: SearchConfig{NoFallback: true},
		addr: "10.2.9.9", node: "d", step: StepBest, asked: []string{"d"}, subnet: "10.2.0.0/16",
	}, {
		name: "a higher threshold stops earlier", dels: []deleg{{"10.1.0.0/24", "a1"}, {"10.5.0.0/16", "d"}},
		rtt: map[string]int{"a1": 90, "d": 40}, cfg: SearchConfig{Threshold: 100 * time.Millisecond},
		addr: "10.2.9.9", node: "a1", step: StepHierarchy, asked: []string{"a1"}, subnet: "10.2.0.0/16",
	}, {
		name: "probe budget", dels: []deleg{{"10.1.0.0/24", "a1"}, {"10.5.0.0/16", "d"}},
		rtt: map[string]int{"a1": 90, "d": 40}, cfg: SearchConfig{MaxProbes: 1},
		addr: "10.2.9.9", node: "a1", step: StepBest, asked: []string{"a1"}, subnet: "10.2.0.0/16",
	}, {
		name: "unreachable nodes count as infinitely far", dels: []deleg{{"10.5.0.0/16", "d"}},
		rtt:  map[string]int{"f": 300},
		addr: "10.2.9.9", node: "f", step: StepBest, asked: []string{"d", "e", "f"}, subnet: "10.2.0.0/16",
	}, {
		name: "nobody reachable: the first asked keeps it", dels: []deleg{{"10.5.0.0/16", "d"}},
		addr: "10.2.9.9", node: "d", step: StepBest, asked: []string{"d", "e", "f"}, subnet: "10.2.0.0/16",
	}, {
		name: "nobody reachable: the first asked that probed keeps it", dels: []deleg{{"10.5.0.0/16", "d"}}, not: []string{"d"},
		addr: "10.2.9.9", node: "e", step: StepBest, asked: []string{"d", "e", "f"}, subnet: "10.2.0.0/16",
	}, {
		name: "a node that did not probe never wins", dels: []deleg{{"10.5.0.0/16", "d"}}, not: []string{"d", "e"},
		rtt:  map[string]int{"f": 300},
		addr: "10.2.9.9", node: "f", step: StepBest, asked: []string{"d", "e", "f"}, subnet: "10.2.0.0/16",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tab := NewMemTable("d", "e", "f")
			for _, d := range tc.dels {
				tab.Set(id(d.r), d.node)
				tab.AddNode(d.node)
			}
			p := &fakeProber{rtt: tc.rtt, notProbed: map[string]bool{}}
			for _, n := range tc.not {
				p.notProbed[n] = true
			}
			m := &IPMicra{Tree: tr, Table: tab, Prober: p, Config: tc.cfg}
			d, err := m.Delegate(context.Background(), mustAddr(t, tc.addr))
			if err != nil {
				t.Fatal(err)
			}
			if d.Node != tc.node || d.Step != tc.step || tr.Range(d.Subnet).String() != tc.subnet || !slices.Equal(p.asked, tc.asked) || d.Issued != len(tc.asked) {
				t.Errorf("got node %s step %s subnet %s asked %v issued %d; want %s %s %s %v",
					d.Node, d.Step, tr.Range(d.Subnet), p.asked, d.Issued, tc.node, tc.step, tc.subnet, tc.asked)
			}
		})
	}
}

func TestIPMicraReusesProbes(t *testing.T) {
	tr, _ := build(t, figure72)
	tab := NewMemTable("x", "y")
	tab.Set(find(t, tr, "122.0.0.0/8"), "y")
	p := &fakeProber{rtt: map[string]int{"x": 80, "y": 90}}
	cache := &MemProbeCache{}
	m := &IPMicra{Tree: tr, Table: tab, Prober: p, Cache: cache}
	d1, err := m.Delegate(context.Background(), mustAddr(t, "124.0.0.1"))
	if err != nil || d1.Issued != 2 || d1.Node != "x" {
		t.Fatalf("first search %+v %v", d1, err)
	}
	// Another address of the same subnet, still undelegated: nothing new is
	// asked.
	d2, err := m.Delegate(context.Background(), mustAddr(t, "124.9.9.9"))
	if err != nil || d2.Issued != 0 || len(d2.Probes) != 2 || !d2.Probes[0].Cached || d2.Node != "x" {
		t.Errorf("second search %+v %v", d2, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Delegate(ctx, mustAddr(t, "130.0.0.1")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled search: %v", err)
	}
	if _, err := (&IPMicra{Tree: tr, Table: NewMemTable(), Prober: p}).Delegate(context.Background(), mustAddr(t, "130.0.0.1")); !errors.Is(err, ErrNoNodes) {
		t.Errorf("no nodes: %v", err)
	}
	// Nodes that did not probe: no answer is cached and nobody takes the
	// subnet, by either search.
	for _, guided := range []bool{false, true} {
		none := &fakeProber{notProbed: map[string]bool{"x": true, "y": true}}
		cache := &MemProbeCache{}
		m := &IPMicra{Tree: tr, Table: tab, Prober: none, Cache: cache, Config: SearchConfig{Guided: guided}}
		d, err := m.Delegate(context.Background(), mustAddr(t, "124.0.0.1"))
		if !errors.Is(err, ErrNoNodes) || len(d.Probes) != 0 || len(none.asked) != 2 {
			t.Errorf("guided %v: nobody probed: %+v, %v, asked %v; want ErrNoNodes after asking both", guided, d, err, none.asked)
		}
		if _, ok := cache.Get("x", tr.Range(d.Subnet)); ok {
			t.Errorf("guided %v: a node that did not probe was cached", guided)
		}
	}
}

func TestBaselines(t *testing.T) {
	tr, _ := build(t, figure72)
	nodes := []string{"a", "b", "c"}
	rtt := map[string]int{"a": 70, "b": 20, "c": 40}
	tab := NewMemTable(nodes...)
	owned := find(t, tr, "130.0.0.0/16")
	tab.Set(owned, "c")
	addr := mustAddr(t, "124.0.0.1")

	p := &fakeProber{rtt: rtt}
	d, err := (&BruteForce{Tree: tr, Table: tab, Prober: p}).Delegate(context.Background(), addr)
	if err != nil || d.Node != "b" || d.Issued != 3 || d.Step != StepBaseline {
		t.Errorf("brute force %+v %v", d, err)
	}
	d, err = (&Oracle{Tree: tr, Table: tab, RTT: func(n string, _ netip.Addr) time.Duration {
		return time.Duration(rtt[n]) * time.Millisecond
	}}).Delegate(context.Background(), addr)
	if err != nil || d.Node != "b" || d.Issued != 0 || d.RTT != 20*time.Millisecond {
		t.Errorf("oracle %+v %v", d, err)
	}
	counts := map[string]int{}
	r := &Random{Tree: tr, Table: tab, Rand: rand.New(rand.NewPCG(1, 1))}
	for i := 0; i < 300; i++ {
		d, err := r.Delegate(context.Background(), addr)
		if err != nil || d.Issued != 0 {
			t.Fatal(d, err)
		}
		counts[d.Node]++
	}
	for _, n := range nodes {
		if counts[n] < 50 {
			t.Errorf("random chose %s %d times of 300", n, counts[n])
		}
	}
	// Owned subnets stay with their owner for every strategy.
	for _, s := range []Strategy{r, &BruteForce{Tree: tr, Table: tab, Prober: p}} {
		if d, _ := s.Delegate(context.Background(), mustAddr(t, "130.0.1.1")); d.Node != "c" || d.Step != StepOwned {
			t.Errorf("%T on an owned subnet: %+v", s, d)
		}
	}
}

func TestHiMicraThesisExample(t *testing.T) {
	// Thesis 6.6, figure 6.2: the coordinator's children 1 and 2 answer 85
	// and 80; 2's children 5 and 6 answer 90 and 86; then 1's children 3
	// and 4 answer 55 and 49: 4 wins.
	h := &HiMicraTree{children: map[string][]string{"": {"1", "2"}, "1": {"3", "4"}, "2": {"5", "6"}, "5": {"9"}, "4": {"8"}}}
	tr, _ := build(t, figure72)
	p := &fakeProber{rtt: map[string]int{"1": 85, "2": 80, "3": 55, "4": 49, "5": 90, "6": 86, "8": 1, "9": 1}}
	s := &HiMicra{Tree: tr, Table: NewMemTable("1", "2", "3", "4", "5", "6", "8", "9"), Prober: p, Hierarchy: h}
	d, err := s.Delegate(context.Background(), mustAddr(t, "124.0.0.1"))
	if err != nil || d.Node != "4" || !slices.Equal(p.asked, []string{"1", "2", "5", "6", "3", "4"}) {
		t.Errorf("HiMicra %+v asked %v", d, p.asked)
	}
}

func TestBuildHiMicra(t *testing.T) {
	// Two far-apart groups of three nodes: the root's two children must
	// come from different groups and each cluster hold its own group.
	nodes := []string{"eu1", "eu2", "eu3", "as1", "as2", "as3"}
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	rtt := [][]time.Duration{
		ms(10, 12, 250, 240), ms(11, 15, 245, 250), ms(14, 10, 260, 235),
		ms(240, 250, 12, 9), ms(235, 255, 8, 14), ms(250, 245, 10, 10),
	}
	h, err := BuildHiMicra(nodes, rtt, 2)
	if err != nil {
		t.Fatal(err)
	}
	top := h.Children("")
	if len(top) != 2 || top[0][:2] == top[1][:2] {
		t.Fatalf("root children %v, want one per group", top)
	}
	for _, c := range top {
		var sub []string
		var walk func(string)
		walk = func(n string) {
			for _, k := range h.Children(n) {
				sub = append(sub, k)
				walk(k)
			}
		}
		walk(c)
		if len(sub) != 2 || sub[0][:2] != c[:2] || sub[1][:2] != c[:2] {
			t.Errorf("cluster under %s is %v", c, sub)
		}
	}
	if _, err := BuildHiMicra(nodes, rtt, 1); err == nil {
		t.Error("branching 1 accepted")
	}
	if _, err := BuildHiMicra(nodes, rtt[:2], 2); err == nil {
		t.Error("mismatched probes accepted")
	}
	// The greedy path for large sets still picks distinct children.
	many := make([]string, 700)
	rows := make([][]time.Duration, 700)
	for i := range many {
		many[i] = string(rune('A'+i%26)) + string(rune('a'+i/26))
		rows[i] = ms(i%7*30, i%5*40)
	}
	h, err = BuildHiMicra(many, rows, 3)
	if err != nil || len(h.Children("")) != 3 {
		t.Fatalf("greedy build: %v %v", err, h.Children(""))
	}
}

func BenchmarkIPMicra(b *testing.B) {
	tr, _ := build(b, figure72)
	tab := NewMemTable("x", "y", "z")
	tab.Set(find(&testing.T{}, tr, "122.0.0.0/8"), "y")
	p := &fakeProber{rtt: map[string]int{"x": 80, "y": 30, "z": 5}}
	m := &IPMicra{Tree: tr, Table: tab, Prober: p}
	a := netip.MustParseAddr("121.0.0.1")
	b.ReportAllocs()
	for b.Loop() {
		p.asked = p.asked[:0]
		if _, err := m.Delegate(context.Background(), a); err != nil {
			b.Fatal(err)
		}
	}
}

func TestIPMicraGuided(t *testing.T) {
	tr := rpslTree(t, "10.0.0.0 - 10.255.255.255", "10.1.0.0 - 10.1.255.255", "10.2.0.0 - 10.2.255.255",
		"10.4.0.0 - 10.4.255.255", "10.5.0.0 - 10.5.255.255", "11.0.0.0 - 11.255.255.255")
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	newCache := func() *MemProbeCache {
		c := &MemProbeCache{}
		for node, v := range map[string][2]int{"x": {10, 12}, "y": {80, 70}, "z": {200, 190}} {
			c.Put(node, mustRange(t, "10.1.0.0/16"), ms(v[0]))
			c.Put(node, mustRange(t, "10.2.0.0/16"), ms(v[1]))
		}
		return c
	}
	tests := []struct {
		name  string
		rtt   map[string]int
		th    time.Duration
		node  string
		step  Step
		asked []string
	}{
		{"the predicted nearest answers under the threshold", map[string]int{"x": 20, "y": 75, "z": 195}, 0, "x", StepGuided, []string{"x"}},
		{"confirmed and clearly best: the others are not asked", map[string]int{"x": 13, "y": 75, "z": 195}, ms(5), "x", StepGuided, []string{"x"}},
		{"a probe far from its prediction: predictions dropped, the paper's order", map[string]int{"x": 90, "y": 30, "z": 195}, 0, "y", StepGuided, []string{"x", "z", "y"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tab := NewMemTable("x", "y", "z")
			tab.Set(find(t, tr, "10.5.0.0/16"), "z")
			tab.Set(find(t, tr, "11.0.0.0/8"), "y")
			p := &fakeProber{rtt: tc.rtt}
			m := &IPMicra{Tree: tr, Table: tab, Prober: p, Cache: newCache(), Config: SearchConfig{Guided: true, Threshold: tc.th}}
			d, err := m.Delegate(context.Background(), mustAddr(t, "10.4.1.1"))
			if err != nil {
				t.Fatal(err)
			}
			if d.Node != tc.node || d.Step != tc.step || !slices.Equal(p.asked, tc.asked) {
				t.Errorf("node %s step %s asked %v; want %s %s %v", d.Node, d.Step, p.asked, tc.node, tc.step, tc.asked)
			}
		})
	}
	// Without stored probes nearby, nodes are asked in the paper's order.
	tab := NewMemTable("x", "y")
	tab.Set(find(t, tr, "10.5.0.0/16"), "y")
	p := &fakeProber{rtt: map[string]int{"x": 20, "y": 30}}
	d, _ := (&IPMicra{Tree: tr, Table: tab, Prober: p, Cache: &MemProbeCache{}, Config: SearchConfig{Guided: true}}).Delegate(context.Background(), mustAddr(t, "10.4.1.1"))
	if d.Node != "y" || d.Step != StepGuided || len(p.asked) != 1 {
		t.Errorf("guided without data: %+v", d)
	}
}

func TestIPMicraGuidedPrunesByTriangleInequality(t *testing.T) {
	tr := rpslTree(t, "10.0.0.0 - 10.255.255.255", "10.4.0.0 - 10.4.255.255", "10.5.0.0 - 10.5.255.255")
	between := map[[2]string]int{{"a", "b"}: 10, {"a", "c"}: 200, {"b", "c"}: 190}
	dist := func(x, y string) (time.Duration, bool) {
		if x == y {
			return 0, true
		}
		if v, ok := between[[2]string{x, y}]; ok {
			return time.Duration(v) * time.Millisecond, true
		}
		v, ok := between[[2]string{y, x}]
		return time.Duration(v) * time.Millisecond, ok
	}
	for _, tc := range []struct {
		name    string
		between func(a, b string) (time.Duration, bool)
		asked   []string
	}{
		{"with node RTTs c is never asked", dist, []string{"a", "b"}},
		{"without them everybody is", nil, []string{"a", "b", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := NewMemTable("a", "b", "c")
			tab.Set(find(t, tr, "10.5.0.0/16"), "a")
			p := &fakeProber{rtt: map[string]int{"a": 30, "b": 25, "c": 180}}
			m := &IPMicra{Tree: tr, Table: tab, Prober: p, Cache: &MemProbeCache{},
				Config: SearchConfig{Guided: true, Threshold: 20 * time.Millisecond, Between: tc.between}}
			d, err := m.Delegate(context.Background(), mustAddr(t, "10.4.1.1"))
			if err != nil || d.Node != "b" || !slices.Equal(p.asked, tc.asked) {
				t.Errorf("node %s asked %v err %v; want b after %v", d.Node, p.asked, err, tc.asked)
			}
		})
	}
}

func TestMemProbeCacheWithin(t *testing.T) {
	c := &MemProbeCache{}
	c.Put("a", mustRange(t, "10.1.0.0/16"), time.Millisecond)
	c.Put("b", mustRange(t, "10.1.0.0/16"), 2*time.Millisecond)
	c.Put("a", mustRange(t, "10.1.5.0/24"), 3*time.Millisecond)
	c.Put("a", mustRange(t, "10.2.0.0/16"), 4*time.Millisecond)
	c.Put("a", mustRange(t, "2001:db8::/32"), 5*time.Millisecond)
	var got []string
	for r, ps := range c.Within(mustRange(t, "10.1.0.0/16")) {
		got = append(got, fmt.Sprintf("%s:%d", r, len(ps)))
	}
	if want := []string{"10.1.0.0/16:2", "10.1.5.0/24:1"}; !slices.Equal(got, want) {
		t.Errorf("Within = %v, want %v", got, want)
	}
	if rtt, ok := c.Get("b", mustRange(t, "10.1.0.0/16")); !ok || rtt != 2*time.Millisecond {
		t.Errorf("Get = %v %v", rtt, ok)
	}
}

func TestIPMicraGuidedOrganisation(t *testing.T) {
	tr, _ := build(t, "inetnum: 10.0.0.0 - 10.255.255.255\norg: ORG-ISP\n\ninetnum: 10.1.0.0 - 10.1.255.255\norg: ORG-A\n\n"+
		"inetnum: 10.2.0.0 - 10.2.255.255\norg: ORG-A\n\ninetnum: 10.3.0.0 - 10.3.255.255\norg: ORG-B\n\n"+
		"inetnum: 10.5.0.0 - 10.5.255.255\norg: ORG-A\n\ninetnum: 10.6.0.0 - 10.6.255.255\norg: ORG-A\n")
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	for _, tc := range []struct {
		name   string
		stored map[string]map[string]int // range → node → stored probe
		asked  int
		step   Step
	}{
		{"three of the organisation's subnets put its node nearest: no probe", map[string]map[string]int{
			"10.1.0.0/16": {"a": 10, "b": 90}, "10.5.0.0/16": {"a": 12, "b": 80}, "10.6.0.0/16": {"a": 9, "b": 95}}, 0, StepOrganisation},
		{"one of the organisation's subnets and a neighbour agree: too little to skip probing", map[string]map[string]int{
			"10.1.0.0/16": {"a": 10, "b": 90}, "10.3.0.0/16": {"a": 10, "b": 90}}, 1, StepGuided},
		{"the organisation's subnets disagree (a cloud): the search probes", map[string]map[string]int{
			"10.1.0.0/16": {"a": 10, "b": 90}, "10.5.0.0/16": {"a": 12, "b": 80}, "10.6.0.0/16": {"a": 95, "b": 9}}, 1, StepGuided},
		{"stored probes disagree with the organisation's node: the search probes", map[string]map[string]int{
			"10.3.0.0/16": {"a": 90, "b": 10}}, 1, StepGuided},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := NewMemTable("a", "b")
			tab.Set(find(t, tr, "10.1.0.0/16"), "a")
			cache := &MemProbeCache{}
			for r, probes := range tc.stored {
				for n, v := range probes {
					cache.Put(n, mustRange(t, r), ms(v))
				}
			}
			p := &fakeProber{rtt: map[string]int{"a": 15, "b": 12}}
			d, err := (&IPMicra{Tree: tr, Table: tab, Prober: p, Cache: cache, Config: SearchConfig{Guided: true}}).Delegate(context.Background(), mustAddr(t, "10.2.0.1"))
			if err != nil || d.Step != tc.step || len(p.asked) != tc.asked {
				t.Errorf("decision %+v asked %v err %v; want step %s after %d probes", d, p.asked, err, tc.step, tc.asked)
			}
		})
	}
}
