package geo

import (
	"errors"
	"io"
	"math/rand/v2"
	"net/netip"
	"slices"
)

// Sample reads r to the end and returns n of its rows drawn uniformly at
// random without replacement (reservoir sampling: the same seed and input
// give the same rows), in file order; every row when the file has n or
// fewer. n <= 0 returns every row.
func Sample(r *Reader, n int, seed uint64) ([]Row, error) { return SampleFunc(r, n, seed, nil) }

// SampleFunc is Sample over the rows keep accepts (every row when keep is
// nil).
func SampleFunc(r *Reader, n int, seed uint64, keep func(Row) bool) ([]Row, error) {
	rng := rand.New(rand.NewPCG(seed, 0x67656f73616d706c)) // "geosampl"
	var out []Row
	for i := 0; ; {
		row, err := r.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, err
		}
		if keep != nil && !keep(row) {
			continue
		}
		i++
		switch {
		case n <= 0 || len(out) < n:
			out = append(out, row)
		default:
			if j := rng.IntN(i); j < n {
				out[j] = row
			}
		}
	}
	slices.SortFunc(out, func(a, b Row) int { return a.Line - b.Line })
	return out, nil
}

// Addr returns one address inside the row's prefix, chosen by seed (the
// same seed and prefix give the same address): the address itself for a
// one-address prefix; for a prefix of more than two addresses never the
// first (network) nor the last (broadcast) address. Only the low 64 host
// bits vary, for IPv6 prefixes larger than a /64.
func (r Row) Addr(seed uint64) netip.Addr {
	p := r.Prefix.Masked()
	host := p.Addr().BitLen() - p.Bits()
	if host <= 0 {
		return p.Addr()
	}
	b := p.Addr().As16()
	h := mix(seed, b)
	var off uint64
	switch {
	case host == 1:
		off = h & 1
	case host >= 64:
		off = 1 + h%(^uint64(0)-1)
	default:
		off = 1 + h%(uint64(1)<<host-2)
	}
	lo := uint64(b[8])<<56 | uint64(b[9])<<48 | uint64(b[10])<<40 | uint64(b[11])<<32 |
		uint64(b[12])<<24 | uint64(b[13])<<16 | uint64(b[14])<<8 | uint64(b[15])
	lo += off // no carry: off is below the host part's size, whose bits are zero
	for i := 0; i < 8; i++ {
		b[15-i] = byte(lo >> (8 * i))
	}
	a := netip.AddrFrom16(b)
	if p.Addr().Is4() {
		a = a.Unmap()
	}
	return a
}

// mix hashes a seed and an address (FNV-1a, then SplitMix64).
func mix(seed uint64, b [16]byte) uint64 {
	h := uint64(14695981039346656037) ^ seed
	for _, x := range b {
		h ^= uint64(x)
		h *= 1099511628211
	}
	h += 0x9e3779b97f4a7c15
	h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9
	h = (h ^ (h >> 27)) * 0x94d049bb133111eb
	return h ^ (h >> 31)
}
