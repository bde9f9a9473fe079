package node

import (
	"net/netip"
	"strings"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/micra-net/micra/internal/worldmap"
	"github.com/micra-net/micra/subnet"
)

// Place is one dot of the dashboard's world map: this node, a peer or the
// servers of a delegated subnet, at the registry country of its address
// (the country's median address position: internal/worldmap). Addresses
// without a country (private, loopback, a registry's "ZZ") have no place.
type Place struct {
	Kind    string  `json:"kind"`  // "self", "peer" or "subnet"
	Label   string  `json:"label"` // the peer id or the subnet's range
	Country string  `json:"country"`
	X       float64 `json:"x"` // longitude + 180
	Y       float64 `json:"y"` // 90 − latitude
}

// maxPlaces bounds the places a status lists.
const maxPlaces = 600

// places are the map's dots: this node, its peers (by the address of
// their connection) and its delegated subnets.
func places(t *subnet.Tree, own netip.Addr, conns []Conn, subnets []Subnet) []Place {
	out := []Place{}
	add := func(kind, label string, a netip.Addr) {
		if len(out) >= maxPlaces || !a.IsValid() {
			return
		}
		cc := t.Country(t.Lookup(a))
		if x, y, ok := worldmap.Country(cc); ok {
			out = append(out, Place{Kind: kind, Label: label, Country: cc, X: x, Y: y})
		}
	}
	add("self", "this node", own)
	seen := map[string]bool{}
	for _, c := range conns {
		if seen[c.Peer] || c.Relayed {
			continue
		}
		seen[c.Peer] = true
		if m, err := ma.NewMultiaddr(c.Remote); err == nil {
			if ip, err := manetIP(m); err == nil {
				add("peer", c.Peer, ip)
			}
		}
	}
	for _, s := range subnets {
		start, _, _ := strings.Cut(s.Range, "-")
		if p, err := netip.ParsePrefix(start); err == nil {
			add("subnet", s.Range, p.Addr())
		} else if a, err := netip.ParseAddr(start); err == nil {
			add("subnet", s.Range, a)
		}
	}
	return out
}
