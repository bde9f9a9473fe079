// Package egress decides which network destinations the crawler may connect
// to. It classifies IP addresses against the IANA special-purpose registries
// (RFC 6890 and successors) and checks ports, so that a volunteer's crawler
// can never be steered at its own machine, its LAN or a cloud metadata
// service, whether by a link, a redirect or DNS rebinding: the check runs on
// the resolved address at dial time.
//
// Everything here is pure and safe for concurrent use.
package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
)

// ErrForbidden is wrapped by every refusal.
var ErrForbidden = errors.New("destination forbidden by egress policy")

// special lists the ranges that are never a public web server. Each entry
// names the registry entry it comes from.
var special = []struct {
	p    netip.Prefix
	name string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this network"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (CGNAT)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("192.31.196.0/24"), "AS112"},
	{netip.MustParsePrefix("192.52.193.0/24"), "AMT"},
	{netip.MustParsePrefix("192.88.99.0/24"), "6to4 relay anycast"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("192.175.48.0/24"), "AS112"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("100::/64"), "discard-only"},
	{netip.MustParsePrefix("2001::/23"), "IETF protocol assignments"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("3fff::/20"), "documentation"},
	{netip.MustParsePrefix("5f00::/16"), "segment routing"},
	{netip.MustParsePrefix("fc00::/7"), "unique local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
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
			return "local-use NAT64"
		case sixto4.Contains(ip):
			if r := Classify(netip.AddrFrom4([4]byte(b[2:6]))); r != "" {
				return "6to4 of " + r
			}
			return ""
		case compat4.Contains(ip) && ip != netip.IPv6Unspecified() && ip != netip.IPv6Loopback():
			return "IPv4-compatible"
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

// CheckAddr returns nil if ip may be dialled, else an error wrapping
// ErrForbidden that names the range.
func (p *Policy) CheckAddr(ip netip.Addr) error {
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsUnspecified() || ip.IsMulticast() {
		return fmt.Errorf("%w: %s is not a unicast address", ErrForbidden, ip)
	}
	if p.AllowPrivate {
		return nil
	}
	for _, a := range p.Allow {
		if a.Contains(ip) {
			return nil
		}
	}
	if r := Classify(ip); r != "" {
		return fmt.Errorf("%w: %s is %s", ErrForbidden, ip, r)
	}
	return nil
}

// CheckAddrPort checks both the address and the port.
func (p *Policy) CheckAddrPort(ap netip.AddrPort) error {
	if !p.PortAllowed(ap.Port()) {
		return fmt.Errorf("%w: port %d", ErrForbidden, ap.Port())
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
		return fmt.Errorf("%w: network %q", ErrForbidden, network)
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
