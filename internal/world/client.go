package world

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// Resolver returns a resolver that asks the world's DNS server, sending
// its queries from address from (so a CDN-like name is answered nearest
// first for that address). from must be in 127/8; the zero Addr lets the
// system pick the source.
func (r *Running) Resolver(from netip.Addr) (*net.Resolver, error) {
	return Resolver(r.DNS(), from)
}

// Resolver returns a resolver that asks the world DNS server at dns (a
// world served elsewhere, e.g. by another process), sending its queries
// from address from, as Running.Resolver does.
func Resolver(dns netip.AddrPort, from netip.Addr) (*net.Resolver, error) {
	if from.IsValid() {
		if err := checkLoopback(from); err != nil {
			return nil, err
		}
	}
	if err := checkLoopback(dns.Addr()); err != nil {
		return nil, err
	}
	server := dns.String()
	return &net.Resolver{
		PreferGo:     true,
		StrictErrors: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			d := net.Dialer{Timeout: 5 * time.Second}
			if from.IsValid() {
				if network == "udp" || network == "udp4" || network == "udp6" {
					d.LocalAddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(from, 0))
				} else {
					d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(from, 0))
				}
			}
			return d.DialContext(ctx, network, server)
		},
	}, nil
}

// Dialer returns a dialer that binds its connections to address from, as
// a node does, resolves names with the world's DNS server, and refuses
// any destination outside 127/8. from must be in 127/8.
func (r *Running) Dialer(from netip.Addr) (*net.Dialer, error) {
	if err := checkLoopback(from); err != nil {
		return nil, err
	}
	res, err := r.Resolver(from)
	if err != nil {
		return nil, err
	}
	return &net.Dialer{
		LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(from, 0)),
		Resolver:  res,
		Timeout:   30 * time.Second,
		Control:   loopbackOnly,
	}, nil
}

// loopbackOnly is a net.Dialer Control function that refuses destinations
// outside 127/8 before any packet is sent.
func loopbackOnly(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %q", ErrNotLoopback, address)
	}
	return checkLoopback(ap.Addr())
}

// Client returns an HTTP client for a node at address from: connections
// bound to from, names resolved by the world's DNS server, no proxy,
// keep-alive on, redirects followed as net/http does (at most 10). The
// world counts its requests under from.
func (r *Running) Client(from netip.Addr) (*http.Client, error) {
	d, err := r.Dialer(from)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: &http.Transport{
		DialContext:         d.DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
	}}, nil
}
