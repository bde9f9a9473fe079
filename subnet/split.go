package subnet

import (
	"context"
	"fmt"
	"net/netip"
	"time"
)

// Delegation finer than the registry. IPMicra delegates whole registry
// ranges, assuming each sits in one place; a cloud's or a national ISP's
// range does not (on one cloud organisation's real prefixes, one node per
// smallest registry range can be optimal for at most about 63 % of the
// sites). When the node holding a range finds a new site in it much
// farther than the site the range was delegated for (the crawl's own
// timing, calibration), the part of the range that holds the new site and
// not the old one is searched apart (DelegatePart) and, when another node
// is nearer, delegated to it: a split recorded like any delegation.

// Part is a delegation of part of a registry range, split off apart from
// the range (DelegatePart), or the range's own delegation.
type Part struct {
	Range Range      // a CIDR block inside the range, or the range itself
	Node  string     // the node it is delegated to
	Addr  netip.Addr // the address it was decided for; invalid when unknown
}

// PartTable is a Table that also holds parts of delegated ranges
// delegated apart. The searches' step 1 then gives an address the node of
// the most specific part holding it.
type PartTable interface {
	Table
	// Parts returns the parts of the delegated range id delegated apart,
	// and the address the range itself was decided for (invalid when
	// unknown).
	Parts(id ID) (parts []Part, at netip.Addr)
}

// PartStrategy is a Strategy that can also delegate a part of a delegated
// range apart.
type PartStrategy interface {
	Strategy
	// DelegatePart searches the node for part, a part of the delegated
	// range holding addr whose holder answered observed for addr (a
	// measurement the holder made anyway, such as its crawl's timing:
	// counted as an answer, not as a probe). The decision names the range
	// in Subnet and the part in Part; its Node is holder when nobody is
	// nearer.
	DelegatePart(ctx context.Context, addr netip.Addr, part Range, holder string, observed time.Duration) (Decision, error)
}

// Holder returns the delegation holding addr: the most specific part of
// its smallest non-unary range delegated apart, or the range's own
// delegation. ok is false when the range is not delegated.
func Holder(t *Tree, tab Table, addr netip.Addr) (Part, bool) {
	s := t.SmallestNonUnary(addr)
	if s == None {
		return Part{}, false
	}
	node, ok := owner(tab, s)
	if !ok {
		return Part{}, false
	}
	h := Part{Range: t.Range(s), Node: node}
	if pt, ok := tab.(PartTable); ok {
		parts, at := pt.Parts(s)
		h.Addr = at
		for _, p := range parts {
			if p.Range.Contains(addr) && h.Range.ContainsRange(p.Range) {
				h = p
			}
		}
	}
	return h, true
}

// SplitRange returns the part to search apart for addr in the delegation
// h: the largest CIDR block inside h's range that holds addr and not the
// address h was decided for (when that is unknown, the largest that is not
// the whole range). ok is false when there is none: addr is that address.
func SplitRange(h Part, addr netip.Addr) (Range, bool) {
	if !h.Range.Contains(addr) {
		return Range{}, false
	}
	for bits := 0; bits <= addr.BitLen(); bits++ {
		p, err := addr.Prefix(bits)
		if err != nil {
			return Range{}, false
		}
		r := RangeOf(p)
		if !h.Range.ContainsRange(r) || r == h.Range {
			continue
		}
		if h.Addr.IsValid() && r.Contains(h.Addr) {
			continue
		}
		return r, true
	}
	return Range{}, false
}

// DelegatePart implements PartStrategy: the search of Delegate for part
// alone, S being addr's smallest non-unary range. holder's observation is
// its answer; probes are stored under part.
func (m *IPMicra) DelegatePart(ctx context.Context, addr netip.Addr, part Range, holder string, observed time.Duration) (Decision, error) {
	cfg := m.Config.withDefaults()
	s, err := partOf(m.Tree, addr, part)
	if err != nil {
		return Decision{}, err
	}
	d := Decision{Subnet: s, Part: part, RTT: Unreachable}
	r := &run{m: m, ctx: ctx, addr: addr, subnet: part, cfg: cfg, d: &d, asked: map[string]bool{}}
	r.answer(holder, observed)
	if cfg.Guided {
		return r.guided(s, nil)
	}
	if observed < cfg.Threshold {
		d.Node, d.RTT, d.Step = holder, observed, StepHierarchy
		return d, nil
	}
	return r.bottomUp(s)
}

// partOf returns addr's smallest non-unary range, checking that part is a
// part of it holding addr.
func partOf(t *Tree, addr netip.Addr, part Range) (ID, error) {
	s := t.SmallestNonUnary(addr)
	if s == None || !t.Range(s).ContainsRange(part) || !part.Contains(addr) {
		return None, fmt.Errorf("%w: %v is not a part of %v's range", ErrBadPart, part, addr)
	}
	return s, nil
}

// answer records an answer the search did not ask for (DelegatePart's
// observation) and stores it.
func (r *run) answer(node string, rtt time.Duration) {
	r.asked[node] = true
	r.d.Probes = append(r.d.Probes, Probe{Node: node, RTT: rtt, Cached: true})
	if c := r.m.Cache; c != nil {
		c.Put(node, r.subnet, rtt)
	}
}

// DelegatePart implements PartStrategy: every other node probes addr for
// part, and the best answer, holder's observation included, wins.
func (s *BruteForce) DelegatePart(ctx context.Context, addr netip.Addr, part Range, holder string, observed time.Duration) (Decision, error) {
	id, err := partOf(s.Tree, addr, part)
	if err != nil {
		return Decision{}, err
	}
	d := Decision{Subnet: id, Part: part, RTT: Unreachable}
	r := &run{m: &IPMicra{Prober: s.Prober, Cache: s.Cache}, ctx: ctx, addr: addr, subnet: part, d: &d, asked: map[string]bool{}}
	r.answer(holder, observed)
	for _, n := range s.Table.Nodes() {
		if !r.asked[n] {
			if _, err := r.probe(n); err != nil {
				return d, err
			}
		}
	}
	d, err = r.best()
	d.Step = StepBaseline
	return d, err
}

// DelegatePart implements PartStrategy: the truly nearest node.
func (s *Oracle) DelegatePart(_ context.Context, addr netip.Addr, part Range, _ string, _ time.Duration) (Decision, error) {
	id, err := partOf(s.Tree, addr, part)
	if err != nil {
		return Decision{}, err
	}
	d := Decision{Subnet: id, Part: part, RTT: Unreachable, Step: StepBaseline}
	for _, n := range s.Table.Nodes() {
		if rtt := s.RTT(n, addr); d.Node == "" || rtt < d.RTT {
			d.Node, d.RTT = n, rtt
		}
	}
	if d.Node == "" {
		return d, ErrNoNodes
	}
	return d, nil
}

var (
	_ PartStrategy = (*IPMicra)(nil)
	_ PartStrategy = (*BruteForce)(nil)
	_ PartStrategy = (*Oracle)(nil)
)
