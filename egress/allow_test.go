package egress

import (
	"errors"
	"net/netip"
	"testing"
)

// TestAllow: an allowed prefix opens its own special-purpose addresses
// only; the rest of the range, unspecified and multicast stay refused.
func TestAllow(t *testing.T) {
	p := Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.77.0.0/24")}}
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.77.0.1", true},
		{"::ffff:127.77.0.9", true},
		{"127.0.0.1", false},
		{"127.77.1.1", false},
		{"169.254.169.254", false},
		{"10.0.0.1", false},
		{"0.0.0.0", false},
		{"224.0.0.1", false},
		{"8.8.8.8", true},
	} {
		err := p.CheckAddr(netip.MustParseAddr(tc.addr))
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrForbidden)) {
			t.Errorf("CheckAddr(%s) = %v, want allowed %v", tc.addr, err, tc.ok)
		}
	}
	all := Policy{Allow: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}
	for _, a := range []string{"0.0.0.0", "224.0.0.1"} {
		if all.CheckAddr(netip.MustParseAddr(a)) == nil {
			t.Errorf("%s allowed by a prefix", a)
		}
	}
}
