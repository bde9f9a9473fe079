package world

import (
	"fmt"
	"slices"
)

// bitset marks the used addresses of one block while it is laid out.
type bitset []uint64

func newBitset(n uint32) bitset { return make(bitset, (n+63)/64) }

func (s bitset) get(i uint32) bool { return s[i>>6]&(1<<(i&63)) != 0 }

// isFree reports whether [off, off+n) is unused.
func (s bitset) isFree(off, n uint32) bool {
	for i := off; i < off+n; {
		if i&63 == 0 && i+64 <= off+n {
			if s[i>>6] != 0 {
				return false
			}
			i += 64
			continue
		}
		if s.get(i) {
			return false
		}
		i++
	}
	return true
}

func (s bitset) mark(off, n uint32) {
	for i := off; i < off+n; {
		if i&63 == 0 && i+64 <= off+n {
			s[i>>6] = ^uint64(0)
			i += 64
			continue
		}
		s[i>>6] |= 1 << (i & 63)
		i++
	}
}

// layout gives every block that has no position yet a random position
// aligned to its size inside its parent, and every host a random free
// address. Placing children largest first at aligned positions always
// succeeds while they fit, whatever positions were drawn before.
func (g *gen) layout() error {
	r := newRNG(g.seed, "layout")
	for _, k := range g.root.kids {
		if err := layoutBlock(r, k); err != nil {
			return err
		}
	}
	return nil
}

func layoutBlock(r *rng, b *block) error {
	occ := newBitset(b.size)
	for _, k := range b.kids {
		if k.rel >= 0 {
			k.start = b.start + uint32(k.rel)
			k.placed = true
			if k.rel+int64(k.size) > int64(b.size) {
				return fmt.Errorf("internal error: block %d+%d outside its parent %d+%d", k.rel, k.size, b.start, b.size)
			}
			occ.mark(uint32(k.rel), k.size)
		} else if k.placed {
			if k.start < b.start || k.start+k.size > b.start+b.size {
				return fmt.Errorf("internal error: block %d+%d outside its parent %d+%d", k.start, k.size, b.start, b.size)
			}
			occ.mark(k.start-b.start, k.size)
		}
	}
	order := make([]*block, 0, len(b.kids))
	for _, k := range b.kids {
		if !k.placed {
			order = append(order, k)
		}
	}
	slices.SortStableFunc(order, func(x, y *block) int {
		switch {
		case x.slotSize() > y.slotSize():
			return -1
		case x.slotSize() < y.slotSize():
			return 1
		}
		return 0
	})
	for _, k := range order {
		sz := k.slotSize()
		first := (b.start+sz-1)/sz*sz - b.start
		if first+sz > b.size {
			return fmt.Errorf("internal error: no room for a block of %d in %d", sz, b.size)
		}
		slots := (b.size-first-sz)/sz + 1
		fits := func(off uint32) bool {
			if k.size == 1 {
				// A unary range is a host's address: never the first or
				// last of its parent, nor .0 or .255.
				a := b.start + off
				if off == 0 || off == b.size-1 || a&0xff == 0 || a&0xff == 0xff {
					return false
				}
			}
			return occ.isFree(off, sz)
		}
		found := false
		var off uint32
		for try := 0; try < 32 && !found; try++ {
			off = first + uint32(r.intn(int(slots)))*sz
			found = fits(off)
		}
		if !found {
			s0 := uint32(r.intn(int(slots)))
			for i := uint32(0); i < slots && !found; i++ {
				off = first + (s0+i)%slots*sz
				found = fits(off)
			}
		}
		if !found {
			return fmt.Errorf("internal error: block of %d does not fit in %d", sz, b.size)
		}
		occ.mark(off, sz)
		k.start = b.start + off + k.slotOff
		k.placed = true
	}
	usable := func(off uint32) bool {
		a := b.start + off
		if b.size >= 4 && (off == 0 || off == b.size-1) {
			return false
		}
		if b.size > 1 && (a&0xff == 0 || a&0xff == 0xff) {
			return false
		}
		return !occ.get(off)
	}
	for _, h := range b.hosts {
		found := false
		var off uint32
		for try := 0; try < 64 && !found; try++ {
			off = uint32(r.intn(int(b.size)))
			found = usable(off)
		}
		if !found {
			s0 := uint32(r.intn(int(b.size)))
			for i := uint32(0); i < b.size && !found; i++ {
				off = (s0 + i) % b.size
				found = usable(off)
			}
		}
		if !found {
			return fmt.Errorf("internal error: no free address for a host in a block of %d", b.size)
		}
		occ.mark(off, 1)
		h.addr = b.start + off
	}
	for _, k := range b.kids {
		if err := layoutBlock(r, k); err != nil {
			return err
		}
	}
	return nil
}
