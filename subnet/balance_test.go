package subnet

import (
	"errors"
	"net/netip"
	"testing"
	"time"
)

func TestBalance(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	r := func(p string) Range { return RangeOf(netip.MustParsePrefix(p)) }
	tA, tB := r("10.1.0.0/24"), r("10.2.0.0/24")
	full := Load{Capacity: 100, Load: 100}
	for _, tc := range []struct {
		name    string
		req     BalanceRequest
		node    string
		handOff *HandOff
		over    bool
		cost    float64
	}{
		{
			name: "room: the best takes it",
			req: BalanceRequest{Node: "n1", Pages: 10, Probes: []Probe{{Node: "n1", RTT: ms(20)}, {Node: "n2", RTT: ms(30)}},
				Loads: map[string]Load{"n1": {Capacity: 100, Load: 90}}},
			node: "n1", cost: 200,
		},
		{
			name: "undeclared capacity is unbounded",
			req:  BalanceRequest{Node: "n1", Pages: 1000, Probes: []Probe{{Node: "n1", RTT: ms(20)}}},
			node: "n1", cost: 20000,
		},
		{
			name: "full, nothing to hand off: the second-best with room",
			req: BalanceRequest{Node: "n1", Pages: 10,
				Probes: []Probe{{Node: "n1", RTT: ms(20)}, {Node: "n3", RTT: ms(25)}, {Node: "n2", RTT: ms(30)}, {Node: "n4", RTT: Unreachable}},
				Loads:  map[string]Load{"n1": full, "n3": {Capacity: 50, Load: 45}}},
			node: "n2", cost: 300,
		},
		{
			name: "full: handing off the least-varied subnet is cheaper",
			req: BalanceRequest{Node: "n1", Pages: 10,
				Probes: []Probe{{Node: "n1", RTT: ms(10)}, {Node: "n2", RTT: ms(200)}},
				Loads:  map[string]Load{"n1": full},
				Held: []Holding{
					// Widely varied: the others are far from it.
					{Subnet: tA, Pages: 10, Probes: []Probe{{Node: "n1", RTT: ms(10)}, {Node: "n2", RTT: ms(300)}}},
					// Barely varied: n3 is about as near.
					{Subnet: tB, Pages: 10, Probes: []Probe{{Node: "n1", RTT: ms(40)}, {Node: "n3", RTT: ms(42)}}},
				}},
			node: "n1", handOff: &HandOff{Subnet: tB, From: "n1", To: "n3", Pages: 10},
			cost: 10*10 + 10*(42-40),
		},
		{
			name: "full: the second-best is cheaper than the hand-off",
			req: BalanceRequest{Node: "n1", Pages: 10,
				Probes: []Probe{{Node: "n1", RTT: ms(20)}, {Node: "n2", RTT: ms(22)}},
				Loads:  map[string]Load{"n1": full},
				Held:   []Holding{{Subnet: tB, Pages: 10, Probes: []Probe{{Node: "n1", RTT: ms(40)}, {Node: "n3", RTT: ms(90)}}}}},
			node: "n2", cost: 220,
		},
		{
			name: "the least-varied subnet's takers are full: the next subnet",
			req: BalanceRequest{Node: "n1", Pages: 10,
				Probes: []Probe{{Node: "n1", RTT: ms(10)}},
				Loads:  map[string]Load{"n1": full, "n3": full},
				Held: []Holding{
					{Subnet: tB, Pages: 10, Probes: []Probe{{Node: "n1", RTT: ms(40)}, {Node: "n3", RTT: ms(41)}}},
					{Subnet: tA, Pages: 10, Probes: []Probe{{Node: "n1", RTT: ms(40)}, {Node: "n4", RTT: ms(80)}, {Node: "n3", RTT: ms(45)}}},
				}},
			node: "n1", handOff: &HandOff{Subnet: tA, From: "n1", To: "n4", Pages: 10},
			cost: 100 + 10*(80-40),
		},
		{
			name: "a hand-off that frees too little is no way out",
			req: BalanceRequest{Node: "n1", Pages: 10,
				Probes: []Probe{{Node: "n1", RTT: ms(10)}},
				Loads:  map[string]Load{"n1": full},
				Held:   []Holding{{Subnet: tB, Pages: 5, Probes: []Probe{{Node: "n1", RTT: ms(40)}, {Node: "n3", RTT: ms(41)}}}}},
			node: "n1", over: true, cost: 100,
		},
		{
			name: "a subnet with one probe has no known next-best",
			req: BalanceRequest{Node: "n1", Pages: 10,
				Probes: []Probe{{Node: "n1", RTT: ms(10)}, {Node: "n2", RTT: ms(30)}},
				Loads:  map[string]Load{"n1": full, "n2": full},
				Held:   []Holding{{Subnet: tB, Pages: 50, Probes: []Probe{{Node: "n1", RTT: ms(1)}}}}},
			node: "n1", over: true, cost: 100,
		},
		{
			name: "chosen without probing: taken as 0 ms",
			req: BalanceRequest{Node: "n1", Pages: 10,
				Probes: []Probe{{Node: "n2", RTT: ms(30)}},
				Loads:  map[string]Load{"n1": full},
				Held:   []Holding{{Subnet: tB, Pages: 10, Probes: []Probe{{Node: "n1", RTT: ms(40)}, {Node: "n3", RTT: ms(50)}}}}},
			node: "n1", handOff: &HandOff{Subnet: tB, From: "n1", To: "n3", Pages: 10}, cost: 100,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Balance(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if p.Node != tc.node || p.Over != tc.over || p.Cost != tc.cost {
				t.Errorf("plan %+v, want node %s over %v cost %v", p, tc.node, tc.over, tc.cost)
			}
			switch {
			case (p.HandOff == nil) != (tc.handOff == nil):
				t.Errorf("hand-off %+v, want %+v", p.HandOff, tc.handOff)
			case p.HandOff != nil && *p.HandOff != *tc.handOff:
				t.Errorf("hand-off %+v, want %+v", *p.HandOff, *tc.handOff)
			}
			// The invariant: the plan leaves nobody above capacity when a
			// probed candidate had room.
			if !p.Over {
				loads := map[string]Load{}
				for n, l := range tc.req.Loads {
					loads[n] = l
				}
				add := func(n string, d int64) {
					l := loads[n]
					l.Load = uint64(int64(l.Load) + d)
					loads[n] = l
				}
				add(p.Node, int64(tc.req.Pages))
				if h := p.HandOff; h != nil {
					add(h.From, -int64(h.Pages))
					add(h.To, int64(h.Pages))
				}
				for n, l := range loads {
					if l.Capacity > 0 && l.Load > l.Capacity && tc.req.Loads[n].Load <= tc.req.Loads[n].Capacity {
						t.Errorf("%s ends at %d of %d", n, l.Load, l.Capacity)
					}
				}
			}
		})
	}
	if _, err := Balance(BalanceRequest{}); !errors.Is(err, ErrNoNodes) {
		t.Errorf("empty request: %v", err)
	}
}
