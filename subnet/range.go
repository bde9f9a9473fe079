package subnet

import (
	"fmt"
	"math/bits"
	"net/netip"
)

// Range is an inclusive range of IP addresses, Start ≤ End, both of the same
// family (IPv4 or IPv6). Ranges need not be CIDR-aligned: the RIRs delegate
// IPv4 blocks whose sizes are not powers of two.
type Range struct {
	Start, End netip.Addr
}

// RangeOf returns the range covered by the prefix p.
func RangeOf(p netip.Prefix) Range {
	p = p.Masked()
	s := p.Addr()
	bitsLen := s.BitLen()
	k := keyOf(s)
	e := k.or(hostMask(bitsLen, p.Bits()))
	return Range{Start: s, End: e.addr(s.Is4())}
}

// Valid reports whether r has two addresses of the same family (no zones)
// with Start ≤ End.
func (r Range) Valid() bool {
	if !r.Start.IsValid() || !r.End.IsValid() || r.Start.Is4() != r.End.Is4() {
		return false
	}
	if r.Start.Zone() != "" || r.End.Zone() != "" {
		return false
	}
	return r.Start.Compare(r.End) <= 0
}

// Contains reports whether a lies in r. An IPv4-mapped IPv6 address is
// treated as the IPv4 address it maps.
func (r Range) Contains(a netip.Addr) bool {
	a = a.Unmap()
	return a.Is4() == r.Start.Is4() && r.Start.Compare(a) <= 0 && a.Compare(r.End) <= 0
}

// ContainsRange reports whether o lies entirely in r.
func (r Range) ContainsRange(o Range) bool {
	return r.Start.Is4() == o.Start.Is4() && r.Start.Compare(o.Start) <= 0 && o.End.Compare(r.End) <= 0
}

// IsUnary reports whether r holds exactly one address. IPMicra skips unary
// ranges during delegation and uses their parent instead (thesis 7.6.1).
func (r Range) IsUnary() bool { return r.Start == r.End }

// Prefix returns r as a CIDR prefix when it is exactly one.
func (r Range) Prefix() (netip.Prefix, bool) {
	if !r.Valid() {
		return netip.Prefix{}, false
	}
	s, e := keyOf(r.Start), keyOf(r.End)
	n := e.sub(s)
	// n+1 must be a power of two and s aligned to it.
	if n.add(key{lo: 1}).isZero() { // the whole IPv6 space
		return netip.PrefixFrom(r.Start, 0), true
	}
	size := n.add(key{lo: 1})
	if size.onesCount() != 1 || !s.and(n).isZero() {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(r.Start, r.Start.BitLen()-size.trailingZeros()), true
}

// String formats r as a CIDR prefix when it is one and as "start - end"
// otherwise.
func (r Range) String() string {
	if !r.Valid() {
		return "invalid range"
	}
	if p, ok := r.Prefix(); ok {
		return p.String()
	}
	return r.Start.String() + " - " + r.End.String()
}

// NumAddrs returns the number of addresses in r, saturated at 2^64-1 for very
// large IPv6 ranges.
func (r Range) NumAddrs() uint64 {
	d := keyOf(r.End).sub(keyOf(r.Start))
	if d.hi != 0 || d.lo == ^uint64(0) {
		return ^uint64(0)
	}
	return d.lo + 1
}

// key is an address as a 128-bit unsigned integer. IPv4 addresses use the low
// 32 bits; a family never mixes with the other, so no tag is needed.
type key struct{ hi, lo uint64 }

func keyOf(a netip.Addr) key {
	if a.Is4() {
		b := a.As4()
		return key{lo: uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])}
	}
	b := a.As16()
	var k key
	for i := 0; i < 8; i++ {
		k.hi = k.hi<<8 | uint64(b[i])
		k.lo = k.lo<<8 | uint64(b[8+i])
	}
	return k
}

func (k key) addr(is4 bool) netip.Addr {
	if is4 {
		v := uint32(k.lo)
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	var b [16]byte
	for i := 0; i < 8; i++ {
		b[7-i] = byte(k.hi >> (8 * i))
		b[15-i] = byte(k.lo >> (8 * i))
	}
	return netip.AddrFrom16(b)
}

func (k key) less(o key) bool { return k.hi < o.hi || (k.hi == o.hi && k.lo < o.lo) }
func (k key) cmp(o key) int {
	switch {
	case k.less(o):
		return -1
	case o.less(k):
		return 1
	}
	return 0
}
func (k key) isZero() bool   { return k.hi == 0 && k.lo == 0 }
func (k key) and(o key) key  { return key{k.hi & o.hi, k.lo & o.lo} }
func (k key) or(o key) key   { return key{k.hi | o.hi, k.lo | o.lo} }
func (k key) onesCount() int { return bits.OnesCount64(k.hi) + bits.OnesCount64(k.lo) }
func (k key) trailingZeros() int {
	if k.lo != 0 {
		return bits.TrailingZeros64(k.lo)
	}
	return 64 + bits.TrailingZeros64(k.hi)
}

func (k key) add(o key) key {
	lo, c := bits.Add64(k.lo, o.lo, 0)
	hi, _ := bits.Add64(k.hi, o.hi, c)
	return key{hi, lo}
}

func (k key) sub(o key) key {
	lo, b := bits.Sub64(k.lo, o.lo, 0)
	hi, _ := bits.Sub64(k.hi, o.hi, b)
	return key{hi, lo}
}

// next returns k+1; prev returns k-1. Callers guarantee no wrap.
func (k key) next() key { return k.add(key{lo: 1}) }
func (k key) prev() key { return k.sub(key{lo: 1}) }

// maxKey returns the largest address of a family.
func maxKey(is4 bool) key {
	if is4 {
		return key{lo: 1<<32 - 1}
	}
	return key{^uint64(0), ^uint64(0)}
}

// hostMask returns the mask of the host bits of a prefix of length ones in
// an address of bitLen bits.
func hostMask(bitLen, ones int) key {
	h := bitLen - ones
	switch {
	case h <= 0:
		return key{}
	case h >= 128:
		return key{^uint64(0), ^uint64(0)}
	case h >= 64:
		return key{hi: 1<<(h-64) - 1, lo: ^uint64(0)}
	}
	return key{lo: 1<<h - 1}
}

// span is a range in key form, used while building.
type span struct{ s, e key }

func (p span) String() string { return fmt.Sprintf("[%x:%x-%x:%x]", p.s.hi, p.s.lo, p.e.hi, p.e.lo) }
