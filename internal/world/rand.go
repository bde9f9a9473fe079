package world

import (
	"math"
	"math/bits"
	"math/rand/v2"
)

// rng is the world's deterministic random source. Only the PCG generator's
// raw Uint64 stream is used (its algorithm is fixed by math/rand/v2); every
// derived draw is implemented here, so a seed gives the same world on every
// Go version and platform.
type rng struct{ src *rand.PCG }

// newRNG returns a stream derived from the world seed and a label, so that
// independent parts of the world draw from independent streams and adding
// a draw in one part never shifts another.
func newRNG(seed uint64, label string, idx ...uint64) *rng {
	h := mix(seed, label, idx...)
	return &rng{src: rand.NewPCG(h, splitmix(h^0x9e3779b97f4a7c15))}
}

func (r *rng) u64() uint64 { return r.src.Uint64() }

// intn returns a uniform int in [0, n); n must be positive.
func (r *rng) intn(n int) int {
	if n <= 0 {
		panic("world: intn of non-positive n")
	}
	// Lemire's multiply-and-reject: unbiased and stable.
	un := uint64(n)
	hi, lo := bits.Mul64(r.u64(), un)
	if lo < un {
		thresh := -un % un
		for lo < thresh {
			hi, lo = bits.Mul64(r.u64(), un)
		}
	}
	return int(hi)
}

// rangeInt returns a uniform int in [lo, hi].
func (r *rng) rangeInt(lo, hi int) int {
	if hi <= lo {
		return lo
	}
	return lo + r.intn(hi-lo+1)
}

// float returns a uniform float64 in [0, 1).
func (r *rng) float() float64 { return float64(r.u64()>>11) / (1 << 53) }

// chance reports true with probability p.
func (r *rng) chance(p float64) bool { return p > 0 && r.float() < p }

// norm returns a standard normal deviate (Box-Muller, one of the pair).
func (r *rng) norm() float64 {
	u1 := r.float()
	for u1 == 0 {
		u1 = r.float()
	}
	u2 := r.float()
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}

// logUniform returns a value whose logarithm is uniform in [log lo, log hi].
func (r *rng) logUniform(lo, hi float64) float64 {
	if hi <= lo {
		return lo
	}
	return math.Exp(math.Log(lo) + r.float()*(math.Log(hi)-math.Log(lo)))
}

// pareto returns a Pareto(xm=1, alpha) deviate, ≥ 1, heavy-tailed.
func (r *rng) pareto(alpha float64) float64 {
	u := 1 - r.float() // (0, 1]
	return math.Pow(u, -1/alpha)
}

// shuffle permutes n elements with swap, Fisher-Yates.
func (r *rng) shuffle(n int, swap func(i, j int)) {
	for i := n - 1; i > 0; i-- {
		swap(i, r.intn(i+1))
	}
}

// perm returns a random permutation of [0, n).
func (r *rng) perm(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	r.shuffle(n, func(i, j int) { p[i], p[j] = p[j], p[i] })
	return p
}

// weighted picks an index with probability proportional to w[i] ≥ 0.
func (r *rng) weighted(w []float64) int {
	total := 0.0
	for _, x := range w {
		total += x
	}
	if total <= 0 {
		return r.intn(len(w))
	}
	t := r.float() * total
	for i, x := range w {
		if t < x {
			return i
		}
		t -= x
	}
	return len(w) - 1
}

// splitmix is the SplitMix64 finaliser, a good 64-bit mixer.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// mix hashes a seed, a label and numbers into 64 bits (FNV-1a over the
// bytes, then SplitMix64). It is the world's stable hash for deriving
// per-site, per-page and per-version values.
func mix(seed uint64, label string, idx ...uint64) uint64 {
	h := uint64(14695981039346656037)
	add := func(b byte) {
		h ^= uint64(b)
		h *= 1099511628211
	}
	for i := 0; i < 8; i++ {
		add(byte(seed >> (8 * i)))
	}
	for i := 0; i < len(label); i++ {
		add(label[i])
	}
	add(0xff)
	for _, v := range idx {
		for i := 0; i < 8; i++ {
			add(byte(v >> (8 * i)))
		}
	}
	return splitmix(h)
}

// unit maps a hash to a float64 in [0, 1).
func unit(h uint64) float64 { return float64(h>>11) / (1 << 53) }
