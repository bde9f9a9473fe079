package overlay

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// checkPortsFree refuses listen addresses whose port another process
// holds. go-libp2p's TCP transport listens with SO_REUSEPORT, so that its
// outgoing connections can leave from the listening port; a second node
// started on the same port would then share it silently, each taking
// half of the incoming connections. A plain bind, without SO_REUSEPORT,
// fails where any socket listens (TCP) or is bound (UDP, QUIC's) on the
// address: that is the test, made and closed just before the host binds.
// Port 0 (any) and addresses that are neither TCP nor UDP pass; an error
// other than "in use" (an address the machine does not have) is left to
// the host, which reports its own.
func checkPortsFree(addrs []ma.Multiaddr) error {
	for _, a := range addrs {
		na, err := manet.ToNetAddr(portOnly(a))
		if err != nil {
			continue
		}
		var closeFn func() error
		switch n := na.(type) {
		case *net.TCPAddr:
			if n.Port == 0 {
				continue
			}
			l, err := net.ListenTCP("tcp", n)
			if err == nil {
				closeFn = l.Close
			} else if errors.Is(err, syscall.EADDRINUSE) {
				return fmt.Errorf("listen address %s: TCP port %d is in use by another process (another micra node?): choose another port", a, n.Port)
			}
		case *net.UDPAddr:
			if n.Port == 0 {
				continue
			}
			c, err := net.ListenUDP("udp", n)
			if err == nil {
				closeFn = c.Close
			} else if errors.Is(err, syscall.EADDRINUSE) {
				return fmt.Errorf("listen address %s: UDP port %d is in use by another process (another micra node?): choose another port", a, n.Port)
			}
		}
		if closeFn != nil {
			if err := closeFn(); err != nil {
				return fmt.Errorf("listen address %s: %w", a, err)
			}
		}
	}
	return nil
}

// portOnly cuts a listen address after its transport port
// (/ip4/…/udp/4001/quic-v1 → /ip4/…/udp/4001), which manet converts.
func portOnly(a ma.Multiaddr) ma.Multiaddr {
	var out ma.Multiaddr
	for _, c := range a {
		out = append(out, c)
		if c.Protocol().Code == ma.P_TCP || c.Protocol().Code == ma.P_UDP {
			break
		}
	}
	return out
}
