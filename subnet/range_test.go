package subnet

import (
	"net/netip"
	"testing"
)

func TestRange(t *testing.T) {
	tests := []struct {
		r      string
		str    string
		prefix bool
		n      uint64
	}{
		{"10.0.0.0 - 10.0.0.255", "10.0.0.0/24", true, 256},
		{"10.0.0.0 - 10.0.2.255", "10.0.0.0 - 10.0.2.255", false, 768},
		{"10.0.0.1 - 10.0.1.0", "10.0.0.1 - 10.0.1.0", false, 256},
		{"1.2.3.4 - 1.2.3.4", "1.2.3.4/32", true, 1},
		{"0.0.0.0 - 255.255.255.255", "0.0.0.0/0", true, 1 << 32},
		{"2001:db8:: - 2001:db8::ffff", "2001:db8::/112", true, 65536},
		{":: - ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "::/0", true, ^uint64(0)},
		{"2001:db8:: - 2001:db8:0:1::", "2001:db8:: - 2001:db8:0:1::", false, ^uint64(0)}, // 2^64+1 addresses saturate
	}
	for _, tc := range tests {
		r := mustRange(t, tc.r)
		if !r.Valid() {
			t.Errorf("%s not valid", tc.r)
		}
		if got := r.String(); got != tc.str {
			t.Errorf("String(%s) = %q, want %q", tc.r, got, tc.str)
		}
		if _, ok := r.Prefix(); ok != tc.prefix {
			t.Errorf("Prefix(%s) ok = %v", tc.r, ok)
		}
		if got := r.NumAddrs(); got != tc.n {
			t.Errorf("NumAddrs(%s) = %d, want %d", tc.r, got, tc.n)
		}
	}
	for _, p := range []string{"10.0.0.0/8", "10.1.2.3/32", "0.0.0.0/0", "2001:db8::/32", "::/0", "2001:db8::1/128", "2001:db8::/65"} {
		pfx := netip.MustParsePrefix(p)
		got, ok := RangeOf(pfx).Prefix()
		if !ok || got != pfx {
			t.Errorf("RangeOf(%s).Prefix() = %v %v", p, got, ok)
		}
	}
	r := mustRange(t, "10.0.0.0/8")
	if !r.Contains(mustAddr(t, "::ffff:10.1.2.3")) || r.Contains(mustAddr(t, "11.0.0.0")) || r.Contains(mustAddr(t, "2001:db8::")) {
		t.Error("Contains wrong")
	}
	if !r.ContainsRange(mustRange(t, "10.1.0.0/16")) || r.ContainsRange(mustRange(t, "9.0.0.0/7")) {
		t.Error("ContainsRange wrong")
	}
	for _, bad := range []Range{
		{},
		{Start: mustAddr(t, "10.0.0.2"), End: mustAddr(t, "10.0.0.1")},
		{Start: mustAddr(t, "10.0.0.1"), End: mustAddr(t, "2001:db8::")},
		{Start: mustAddr(t, "fe80::1%eth0"), End: mustAddr(t, "fe80::2")},
	} {
		if bad.Valid() {
			t.Errorf("%v valid", bad)
		}
	}
	if (Range{}).String() != "invalid range" {
		t.Error("String of invalid range")
	}
}

func TestKeyArithmetic(t *testing.T) {
	k := key{hi: 1, lo: 0}
	if k.prev() != (key{0, ^uint64(0)}) || k.prev().next() != k {
		t.Error("borrow/carry across the 64-bit halves")
	}
	for _, s := range []string{"0.0.0.0", "255.255.255.255", "10.1.2.3", "::", "2001:db8::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"} {
		a := netip.MustParseAddr(s)
		if got := keyOf(a).addr(a.Is4()); got != a {
			t.Errorf("key round trip %s -> %s", a, got)
		}
	}
	if keyOf(netip.MustParseAddr("10.0.0.1")).cmp(keyOf(netip.MustParseAddr("10.0.0.2"))) != -1 {
		t.Error("cmp")
	}
}
