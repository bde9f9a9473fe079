package overlay

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/subnet"
)

// Places (Sybil limits): nodes from one /24 (IPv4) or /48
// (IPv6), or one origin AS, count as one place, so that one operator's
// nodes cannot stand as independent auditors of each other. A node's place
// is known only from addresses proven by a handshake: this node's own
// address for itself, and for a peer the IP addresses of its live direct
// connections (a relayed connection shows none of the peer's own). The AS
// is that of the snapshot's IP-to-ASN range holding the address
// (subnet.LayerASN); trees built without IP-to-ASN tables give none, and
// places are then the /24s and /48s alone.

// place is where a node sits: its /24 or /48 prefixes and origin ASes.
// A zero place (no direct connection) is unknown.
type place struct {
	prefixes []netip.Prefix
	asns     []uint32
}

func (p place) known() bool { return len(p.prefixes) > 0 }

// same reports whether p and q count as one place: a prefix or an AS in
// common. Two unknown places count as one (neither can show it is
// elsewhere); an unknown place and a known one do not.
func (p place) same(q place) bool {
	if !p.known() || !q.known() {
		return !p.known() && !q.known()
	}
	return slices.ContainsFunc(p.prefixes, func(a netip.Prefix) bool { return slices.Contains(q.prefixes, a) }) ||
		slices.ContainsFunc(p.asns, func(a uint32) bool { return slices.Contains(q.asns, a) })
}

// placeOf returns p's place as this node knows it now.
func (o *Overlay) placeOf(p peer.ID) place {
	var pl place
	if p == o.h.ID() {
		if o.cfg.ownAddr.IsValid() {
			pl.addAddr(o.tree, o.cfg.ownAddr)
		}
		return pl
	}
	for _, c := range o.h.Network().ConnsToPeer(p) {
		if a, ok := ipOf(c.RemoteMultiaddr()); ok {
			pl.addAddr(o.tree, a)
		}
	}
	return pl
}

// PlaceKey names p's place for shares that one operator's peers should
// have as one (Sybil limits): "AS" and its number when an
// address of p's direct connections has an origin AS in the snapshot's
// IP-to-ASN ranges (the smallest), else its /24 or /48 (the smallest), and
// "" when p's place is unknown (no direct connection: relayed, or not
// connected). Peers named alike are of one place; the converse need not
// hold (place.same also joins a prefix and an AS in common).
func (o *Overlay) PlaceKey(p peer.ID) string {
	pl := o.placeOf(p)
	switch {
	case len(pl.asns) > 0:
		return fmt.Sprintf("AS%d", slices.Min(pl.asns))
	case len(pl.prefixes) > 0:
		return slices.MinFunc(pl.prefixes, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) }).String()
	}
	return ""
}

// addAddr adds the place of address a, by tree t's IP-to-ASN ranges.
func (pl *place) addAddr(t *subnet.Tree, a netip.Addr) {
	a = a.Unmap()
	bits := 24
	if a.Is6() {
		bits = 48
	}
	if pre, err := a.Prefix(bits); err == nil && !slices.Contains(pl.prefixes, pre) {
		pl.prefixes = append(pl.prefixes, pre)
	}
	if asn := asnOf(t, a); asn != 0 && !slices.Contains(pl.asns, asn) {
		pl.asns = append(pl.asns, asn)
	}
}

// asnOf returns the origin AS of the narrowest IP-to-ASN range of t
// holding a, 0 when none does.
func asnOf(t *subnet.Tree, a netip.Addr) uint32 {
	for n := t.Lookup(a); n != subnet.None; n = t.Parent(n) {
		if t.Layer(n) == subnet.LayerASN {
			if asn := t.Node(n).ASN; asn != 0 {
				return asn
			}
		}
	}
	return 0
}

// shareByPlace makes the nodes of one known place (place.same: one /24 or
// /48, or one AS) one node for load balancing (Sybil limits):
// each shows the place's greatest declared capacity and the sum of its
// nodes' loads, so that an operator running many nodes in one place holds
// no more delegations there than its largest node could. Nodes whose place
// is unknown (no direct connection: relayed, or not connected) keep their
// own figures: they show nothing, and grouping them would make every
// volunteer behind NAT one place. ps is changed in place and returned.
func (o *Overlay) shareByPlace(ps []PeerInfo) []PeerInfo {
	places := make([]place, len(ps))
	group := make([]int, len(ps)) // union-find parents
	for i, p := range ps {
		places[i], group[i] = o.placeOf(p.ID), i
	}
	var find func(int) int
	find = func(i int) int {
		for group[i] != i {
			group[i] = group[group[i]]
			i = group[i]
		}
		return i
	}
	// Union the nodes that share a prefix or an AS, by maps of each to
	// the first node seen with it: linear in the peers.
	shared := false
	byPrefix, byASN := map[netip.Prefix]int{}, map[uint32]int{}
	union := func(i, j int) {
		if a, b := find(i), find(j); a != b {
			group[b] = a
			shared = true
		}
	}
	for i := range ps {
		if !places[i].known() || ps[i].Capacity == 0 {
			continue
		}
		for _, pre := range places[i].prefixes {
			if j, ok := byPrefix[pre]; ok {
				union(j, i)
			} else {
				byPrefix[pre] = i
			}
		}
		for _, asn := range places[i].asns {
			if j, ok := byASN[asn]; ok {
				union(j, i)
			} else {
				byASN[asn] = i
			}
		}
	}
	if !shared {
		return ps
	}
	capOf, loadOf := map[int]uint64{}, map[int]uint64{}
	for i, p := range ps {
		if p.Capacity == 0 {
			continue
		}
		g := find(i)
		capOf[g] = max(capOf[g], p.Capacity)
		loadOf[g] += p.Load
	}
	for i := range ps {
		if ps[i].Capacity == 0 {
			continue
		}
		g := find(i)
		ps[i].Capacity, ps[i].Load = capOf[g], loadOf[g]
	}
	return ps
}
