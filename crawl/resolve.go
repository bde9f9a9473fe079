package crawl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// Host names to addresses: the one way micra's packages resolve a host
// (the crawler's fetcher caches what it finds; the result path, the
// indexer and the node ask through these).

// LookupAddrs returns the addresses of host through r: an IP literal
// (bracketed or not) as it is, a name as r finds it; IPv4-mapped addresses
// unmapped.
func LookupAddrs(ctx context.Context, r Resolver, host string) ([]netip.Addr, error) {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap()}, nil
	}
	found, err := r.LookupNetIP(ctx, "ip", host)
	as := make([]netip.Addr, len(found)) // r's slice may be shared (a cache's)
	for i, a := range found {
		as[i] = a.Unmap()
	}
	return as, err
}

// LookupAddr returns the first address LookupAddrs finds, the one the
// crawler would fetch from, or an error when there is none.
func LookupAddr(ctx context.Context, r Resolver, host string) (netip.Addr, error) {
	as, err := LookupAddrs(ctx, r, host)
	if err != nil {
		return netip.Addr{}, err
	}
	if len(as) == 0 {
		return netip.Addr{}, fmt.Errorf("%s has no address", host)
	}
	return as[0], nil
}

// DNSResolver returns a resolver that asks the DNS server at server, from
// the source address src when it is valid, and names server in its
// errors (Go's resolver names the system's, whatever it dialled).
func DNSResolver(server netip.AddrPort, src netip.Addr) Resolver {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		d := net.Dialer{Timeout: 5 * time.Second}
		if src.IsValid() {
			if strings.HasPrefix(network, "udp") {
				d.LocalAddr = &net.UDPAddr{IP: src.AsSlice()}
			} else {
				d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
			}
		}
		return d.DialContext(ctx, network, server.String())
	}}
	return namedResolver{r, server.String()}
}

// namedResolver names its server in the DNS errors of r.
type namedResolver struct {
	r      *net.Resolver
	server string
}

func (n namedResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	as, err := n.r.LookupNetIP(ctx, network, host)
	var de *net.DNSError
	if errors.As(err, &de) {
		de.Server = n.server
	}
	return as, err
}
