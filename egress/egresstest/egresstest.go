// Package egresstest lists special-purpose addresses, one or more of each
// class of the IANA registries, for the tests of every place micra must
// refuse them (seeds, crawl requests, forwarded URLs, delegation and
// probe requests), so that each entry point is tested on the same table.
package egresstest

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
)

// Intranet is a name that a LAN's DNS resolves to IntranetAddr, a private
// address: it passes every check made before resolution, and must be
// refused once resolved.
const Intranet = "intranet.example"

// IntranetAddr is the address Intranet resolves to; its class is
// IntranetClass.
var IntranetAddr = netip.MustParseAddr("10.0.0.5")

// IntranetClass is the registry entry a refusal of IntranetAddr names.
const IntranetClass = "private (RFC 1918)"

// Resolve resolves an IP literal to itself and Intranet to IntranetAddr;
// every other name fails, as an unknown one does.
func Resolve(_ context.Context, host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a, nil
	}
	if host == Intranet {
		return IntranetAddr, nil
	}
	return netip.Addr{}, fmt.Errorf("%s: no address", host)
}

// Case is one special-purpose destination.
type Case struct {
	Name  string     // what it stands for, e.g. "metadata"
	Addr  netip.Addr // the address; for a name, the loopback address it names
	Host  string     // the URL's host: the literal (bracketed for IPv6) or a name
	Class string     // part of the refusal's text, e.g. "link-local (RFC 3927)"
}

// URL returns an http URL on c's host.
func (c Case) URL() string { return (&url.URL{Scheme: "http", Host: c.Host, Path: "/"}).String() }

// IsName reports whether c's host is a name (localhost), not an address.
func (c Case) IsName() bool {
	_, err := netip.ParseAddr(strings.Trim(c.Host, "[]"))
	return err != nil
}

// Special returns the cases: loopback (IPv4, IPv6), private (10/8,
// 172.16/12, 192.168/16), link-local (IPv4, IPv6) and the cloud metadata
// address, multicast (IPv4, IPv6), documentation (192.0.2/24,
// 198.51.100/24, 203.0.113/24, 2001:db8::/32), CGNAT (100.64/10),
// unspecified (IPv4, IPv6), unique local (fc00::/7), IPv4-mapped forms,
// and the name localhost (RFC 6761).
func Special() []Case {
	cs := []Case{
		{"loopback v4", a("127.0.0.1"), "", "loopback (RFC 1122)"},
		{"loopback v6", a("::1"), "", "loopback (RFC 4291)"},
		{"private 10/8", a("10.1.2.3"), "", "private (RFC 1918)"},
		{"private 172.16/12", a("172.16.5.4"), "", "private (RFC 1918)"},
		{"private 192.168/16", a("192.168.1.1"), "", "private (RFC 1918)"},
		{"link-local v4", a("169.254.7.7"), "", "link-local (RFC 3927)"},
		{"metadata", a("169.254.169.254"), "", "link-local (RFC 3927)"},
		{"link-local v6", a("fe80::1"), "", "link-local (RFC 4291)"},
		{"multicast v4", a("224.0.0.251"), "", "multicast (RFC 5771)"},
		{"multicast v6", a("ff02::1"), "", "multicast (RFC 4291)"},
		{"documentation 192.0.2/24", a("192.0.2.10"), "", "documentation (RFC 5737)"},
		{"documentation 198.51.100/24", a("198.51.100.7"), "", "documentation (RFC 5737)"},
		{"documentation 203.0.113/24", a("203.0.113.9"), "", "documentation (RFC 5737)"},
		{"documentation 2001:db8::/32", a("2001:db8::1"), "", "documentation (RFC 3849)"},
		{"CGNAT", a("100.64.0.1"), "", "CGNAT (RFC 6598)"},
		{"unspecified v4", a("0.0.0.0"), "", "this network (RFC 791)"},
		{"unspecified v6", a("::"), "", "unspecified (RFC 4291)"},
		{"unique local", a("fd00:ec2::254"), "", "unique local (RFC 4193)"},
		{"mapped loopback", a("::ffff:127.0.0.1"), "", "loopback (RFC 1122)"},
		{"mapped private", a("::ffff:10.0.0.1"), "", "private (RFC 1918)"},
		{"mapped metadata", a("::ffff:169.254.169.254"), "", "link-local (RFC 3927)"},
		{"localhost", a("127.0.0.1"), "localhost", "loopback (RFC 6761)"},
		{"name under localhost", a("127.0.0.1"), "api.localhost.", "loopback (RFC 6761)"},
	}
	for i, c := range cs {
		if c.Host != "" {
			continue
		}
		cs[i].Host = c.Addr.String()
		if c.Addr.Is6() {
			cs[i].Host = "[" + c.Addr.String() + "]"
		}
	}
	return cs
}

func a(s string) netip.Addr { return netip.MustParseAddr(s) }
