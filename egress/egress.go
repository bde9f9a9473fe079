package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
)

// ErrForbidden is wrapped by every refusal.
var ErrForbidden = errors.New("refused by the egress policy")

// ErrSpecialPurpose is wrapped by the refusals of special-purpose
// addresses (and of names of them, like localhost); it wraps ErrForbidden.
// A refusal of a port or a network wraps ErrForbidden only.
var ErrSpecialPurpose = fmt.Errorf("special-purpose address %w", ErrForbidden)

// lift says how an operator lifts a refusal of a special-purpose address.
const lift = "--allow-private-networks lifts this"

// special lists the ranges that are never a public web server. Each entry
// names the registry entry and the RFC it comes from.
var special = []struct {
	p    netip.Prefix
	name string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this network (RFC 791)"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private (RFC 1918)"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space, CGNAT (RFC 6598)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback (RFC 1122)"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (RFC 3927)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private (RFC 1918)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments (RFC 6890)"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation (RFC 5737)"},
	{netip.MustParsePrefix("192.31.196.0/24"), "AS112 (RFC 7535)"},
	{netip.MustParsePrefix("192.52.193.0/24"), "AMT (RFC 7450)"},
	{netip.MustParsePrefix("192.88.99.0/24"), "6to4 relay anycast (RFC 7526)"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private (RFC 1918)"},
	{netip.MustParsePrefix("192.175.48.0/24"), "AS112 (RFC 7534)"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking (RFC 2544)"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation (RFC 5737)"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation (RFC 5737)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast (RFC 5771)"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved (RFC 1112)"},
	{netip.MustParsePrefix("::/128"), "unspecified (RFC 4291)"},
	{netip.MustParsePrefix("::1/128"), "loopback (RFC 4291)"},
	{netip.MustParsePrefix("100::/64"), "discard-only (RFC 6666)"},
	{netip.MustParsePrefix("2001::/23"), "IETF protocol assignments (RFC 2928)"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation (RFC 3849)"},
	{netip.MustParsePrefix("3fff::/20"), "documentation (RFC 9637)"},
	{netip.MustParsePrefix("5f00::/16"), "segment routing (RFC 9602)"},
	{netip.MustParsePrefix("fc00::/7"), "unique local (RFC 4193)"},
	{netip.MustParsePrefix("fe80::/10"), "link-local (RFC 4291)"},
	{netip.MustParsePrefix("fec0::/10"), "site-local (RFC 3879)"},
	{netip.MustParsePrefix("ff00::/8"), "multicast (RFC 4291)"},
}

// Prefixes that embed an IPv4 address, which is then checked as well.
var (
	nat64   = netip.MustParsePrefix("64:ff9b::/96")
	nat64l  = netip.MustParsePrefix("64:ff9b:1::/48")
	sixto4  = netip.MustParsePrefix("2002::/16")
	compat4 = netip.MustParsePrefix("::/96")
)

// Classify reports why ip is not a public unicast address, or "" if it is
// one. IPv4-mapped, IPv4-compatible, NAT64 and 6to4 addresses are judged by
// the IPv4 address they carry.
func Classify(ip netip.Addr) string {
	if !ip.IsValid() {
		return "invalid"
	}
	ip = ip.WithZone("")
	if ip.Is4In6() {
		return Classify(ip.Unmap())
	}
	if ip.Is6() {
		b := ip.As16()
		switch {
		case nat64.Contains(ip):
			if r := Classify(netip.AddrFrom4([4]byte(b[12:16]))); r != "" {
				return "NAT64 of " + r
			}
			return ""
		case nat64l.Contains(ip):
			return "local-use NAT64 (RFC 8215)"
		case sixto4.Contains(ip):
			if r := Classify(netip.AddrFrom4([4]byte(b[2:6]))); r != "" {
				return "6to4 of " + r
			}
			return ""
		case compat4.Contains(ip) && ip != netip.IPv6Unspecified() && ip != netip.IPv6Loopback():
			return "IPv4-compatible (RFC 4291)"
		}
	}
	for _, s := range special {
		if s.p.Contains(ip) {
			return s.name
		}
	}
	return ""
}

// DefaultPorts are the only ports allowed unless the policy says otherwise.
var DefaultPorts = []uint16{80, 443}

// Policy is an egress policy. The zero value refuses every special-purpose
// address and every port but 80 and 443.
type Policy struct {
	// AllowPrivate lifts the special-purpose address check, except for
	// unspecified and multicast addresses, which are never a web server.
	AllowPrivate bool
	// AnyPort allows every port.
	AnyPort bool
	// Ports are allowed in addition to DefaultPorts.
	Ports []uint16
	// Allow lists prefixes whose special-purpose addresses are allowed
	// while AllowPrivate is off (the emulated Internet's sites on
	// loopback): every other special-purpose address stays refused.
	// Unspecified and multicast addresses are never allowed.
	Allow []netip.Prefix
}

// PortAllowed reports whether port may be dialled.
func (p *Policy) PortAllowed(port uint16) bool {
	if p.AnyPort {
		return true
	}
	for _, q := range DefaultPorts {
		if q == port {
			return true
		}
	}
	for _, q := range p.Ports {
		if q == port {
			return true
		}
	}
	return false
}

// CheckAddr returns nil if ip may be contacted, else an error that names
// the address and its registry entry and wraps ErrSpecialPurpose.
// Unspecified and multicast addresses are never a web server: no policy
// allows them.
func (p *Policy) CheckAddr(addr netip.Addr) error {
	ip := addr.Unmap()
	never := !ip.IsValid() || ip.IsUnspecified() || ip.IsMulticast()
	if !never {
		if p.AllowPrivate {
			return nil
		}
		for _, a := range p.Allow {
			if a.Contains(ip) {
				return nil
			}
		}
	}
	r := Classify(ip)
	switch {
	case never && r == "":
		r = "not a unicast address"
	case r == "":
		return nil
	}
	if never {
		return fmt.Errorf("address %s is %s: %w", addr, r, ErrSpecialPurpose)
	}
	return fmt.Errorf("address %s is %s: %w; %s", addr, r, ErrSpecialPurpose, lift)
}

// CheckHost checks a URL's host (as url.URL.Hostname returns it) before
// it is resolved: an IP literal as CheckAddr does, and the name localhost
// and every name under it as the loopback address, since they resolve to
// loopback whatever DNS says (RFC 6761, 6.3). Any other name passes: the
// addresses it resolves to are checked where they are known.
func (p *Policy) CheckHost(host string) error {
	h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if ip, err := netip.ParseAddr(h); err == nil {
		return p.CheckAddr(ip)
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if h != "localhost" && !strings.HasSuffix(h, ".localhost") {
		return nil
	}
	if p.CheckAddr(netip.IPv6Loopback()) == nil && p.CheckAddr(localhost4) == nil {
		return nil
	}
	return fmt.Errorf("host %s is loopback (RFC 6761): %w; %s", host, ErrSpecialPurpose, lift)
}

// localhost4 is the address localhost names in IPv4.
var localhost4 = netip.AddrFrom4([4]byte{127, 0, 0, 1})

// CheckAddrPort checks both the address and the port.
func (p *Policy) CheckAddrPort(ap netip.AddrPort) error {
	if !p.PortAllowed(ap.Port()) {
		return fmt.Errorf("port %d %w", ap.Port(), ErrForbidden)
	}
	return p.CheckAddr(ap.Addr())
}

// Control is a net.Dialer Control function: it runs after name resolution,
// on the exact address the socket is about to connect to, so a DNS answer
// that changes between check and use cannot slip past it.
func (p *Policy) Control(network, address string, _ syscall.RawConn) error {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return fmt.Errorf("network %q %w", network, ErrForbidden)
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrForbidden, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("%w: %q is not an address", ErrForbidden, host)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return fmt.Errorf("%w: port %q", ErrForbidden, port)
	}
	return p.CheckAddrPort(netip.AddrPortFrom(ip, uint16(n)))
}
