package crawl

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
)

type fixedResolver map[string][]netip.Addr

func (f fixedResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if as, ok := f[host]; ok {
		return as, nil
	}
	return nil, errors.New("no such host")
}

// TestLookupAddrs: literals as they are (bracketed or not), names through
// the resolver, mapped addresses unmapped without changing the resolver's
// slice (a cache's, shared).
func TestLookupAddrs(t *testing.T) {
	mapped := netip.MustParseAddr("::ffff:192.0.2.7")
	r := fixedResolver{"a.example": {mapped, netip.MustParseAddr("2001:db8::1")}, "none.example": {}}
	ctx := t.Context()
	for host, want := range map[string][]netip.Addr{
		"192.0.2.1":        {netip.MustParseAddr("192.0.2.1")},
		"[2001:db8::5]":    {netip.MustParseAddr("2001:db8::5")},
		"::ffff:192.0.2.9": {netip.MustParseAddr("192.0.2.9")},
		"a.example":        {netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("2001:db8::1")},
	} {
		if got, err := LookupAddrs(ctx, r, host); err != nil || !slices.Equal(got, want) {
			t.Errorf("LookupAddrs(%q) = %v, %v; want %v", host, got, err, want)
		}
	}
	if r["a.example"][0] != mapped {
		t.Error("the resolver's slice was changed")
	}
	if a, err := LookupAddr(ctx, r, "a.example"); err != nil || a != netip.MustParseAddr("192.0.2.7") {
		t.Errorf("LookupAddr = %v, %v", a, err)
	}
	for _, host := range []string{"none.example", "gone.example"} {
		if _, err := LookupAddr(ctx, r, host); err == nil {
			t.Errorf("LookupAddr(%q) found an address", host)
		}
	}
}
