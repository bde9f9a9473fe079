package world

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"

	"github.com/micra-net/micra/subnet"
)

// RegistryChange is one change UpdateRegistry made to an RPSL inetnum file.
type RegistryChange struct {
	File     string         // the file's name
	Old, New []subnet.Range // the objects' ranges before and after, in address order
}

// RegistryChanges lists the changes UpdateRegistry made, by kind, each
// sorted by file name and address.
type RegistryChanges struct {
	Split   []RegistryChange // Old: a leaf; New: its two halves
	Merged  []RegistryChange // Old: two adjacent leaves; New: the range spanning both
	Removed []RegistryChange // Old: a leaf; New: none
	Added   []RegistryChange // Old: none; New: the new object's range
}

// UpdateRegistry returns files after a registry update, for tests of a
// network moving from one registry snapshot to the next. It makes n
// changes of each kind below, drawn with the world's PCG-based generator
// seeded by seed, to the RPSL inetnum files (Format subnet.FormatRPSL,
// name ending in ".db.inetnum"), and returns what it changed. The same
// files, seed and n give the same result. It does not modify files: the
// result is a copy in which the files it does not change share their Data
// with files, and the changed ones keep their comments and the objects it
// does not change as they were.
//
// It edits the files as RPSL text (objects separated by blank lines, an
// inetnum object's range "a.b.c.d - e.f.g.h" or a prefix on its first
// line), so it works on any inetnum file, and relates objects within one
// file only. A leaf is an inetnum object whose range contains no other
// object's range; an object's parent is the smallest other object
// containing it. No leaf takes part in two changes; merges are drawn
// first, then splits, then removals:
//
//   - split: a leaf of at least 4 addresses becomes two objects, its lower
//     and upper halves (CIDRs when the leaf is one), with its attributes
//     and netname suffixed "-1" and "-2";
//   - merge: two leaves with one parent, the second starting right after
//     the first ends, become one object spanning both, with the first's
//     attributes. The parent must be an object of the file, and not equal
//     to the union: the file alone cannot tell whether two top-level
//     objects lie in one allocation of another file;
//   - remove: a leaf is deleted;
//   - add: a new object takes the largest aligned CIDR block, a /24 at
//     most and a /30 at least, of a gap of a parent of leaves (addresses of
//     the parent that none of its children covers), at most one per gap. It
//     copies the attributes of a sibling leaf, with netname "NEW-<k>"
//     (numbered from 1 in the order of RegistryChanges.Added) and status
//     "ASSIGNED PA", and follows that sibling in the file.
//
// Leaves holding one of the addresses prefer are drawn before the others
// (a test that delegated some ranges has those changed). When there are
// fewer candidates than n it makes as many as it can. The
// result is meant for files whose objects nest; objects that overlap
// without nesting are handled, but the changes may then overlap other
// objects. A negative n is an error, and so is a malformed object, as a
// *subnet.LineError naming the file and line: an object whose first line is
// not "attribute: value", or an inetnum whose value is not an IPv4 range
// (start ≤ end) or prefix.
func UpdateRegistry(files []RegistryFile, seed uint64, n int, prefer ...netip.Addr) ([]RegistryFile, RegistryChanges, error) {
	if n < 0 {
		return nil, RegistryChanges{}, fmt.Errorf("registry update: negative number of changes %d", n)
	}
	var inet []*rpslFile
	for i, f := range files {
		if f.Format != subnet.FormatRPSL || !strings.HasSuffix(f.Name, ".db.inetnum") {
			continue
		}
		rf, err := parseInetnums(f.Name, f.Data)
		if err != nil {
			return nil, RegistryChanges{}, err
		}
		rf.idx = i
		inet = append(inet, rf)
	}
	u := &update{rng: newRNG(seed, "registry update"), used: map[objRef]bool{}, n: n, inet: inet}
	for _, a := range prefer {
		if a = a.Unmap(); a.Is4() {
			u.prefer = append(u.prefer, binary.BigEndian.Uint32(a.AsSlice()))
		}
	}
	for fi, f := range inet {
		u.candidates(fi, f)
	}
	u.merge(inet)
	u.split(inet)
	u.remove(inet)
	u.add(inet)

	out := slices.Clone(files)
	for _, f := range inet {
		if f.edits != nil {
			out[f.idx].Data = f.write()
		}
	}
	ch := u.ch
	for _, cs := range [][]RegistryChange{ch.Split, ch.Merged, ch.Removed} {
		slices.SortFunc(cs, func(a, b RegistryChange) int {
			return cmp.Or(strings.Compare(a.File, b.File), a.Old[0].Start.Compare(b.Old[0].Start))
		})
	}
	return out, ch, nil
}

// rpslFile is an RPSL inetnum file as lines (without their "\n"), with its
// inetnum objects and the edits to write.
type rpslFile struct {
	name  string
	idx   int // index in the files given to UpdateRegistry
	lines [][]byte
	objs  []inetnum
	edits map[int][][][]byte // by object: the objects (as lines) written in its place
}

// inetnum is one inetnum object: lines[first:end] of its file, and its
// range s-e.
type inetnum struct {
	first, end int
	s, e       uint32
	parent     int // the smallest other object containing it, or -1
	leaf       bool
}

func (o *inetnum) size() uint64 { return uint64(o.e) - uint64(o.s) + 1 }

// parseInetnums splits an RPSL file into lines and finds its inetnum
// objects, their parents and leaves.
func parseInetnums(name string, data []byte) (*rpslFile, error) {
	f := &rpslFile{name: name, lines: bytes.Split(data, []byte("\n"))}
	if n := len(f.lines); len(f.lines[n-1]) == 0 {
		f.lines = f.lines[:n-1]
	}
	for i := 0; i < len(f.lines); {
		if isBlank(f.lines[i]) || isComment(f.lines[i]) {
			i++
			continue
		}
		end := i + 1
		for end < len(f.lines) && !isBlank(f.lines[end]) {
			end++
		}
		attr, val, ok := rpslAttr(f.lines[i])
		if !ok {
			return nil, &subnet.LineError{Input: name, Line: i + 1, Reason: `expected "attribute: value"`}
		}
		if attr == "inetnum" {
			s, e, err := parseInetnum(val)
			if err != nil {
				return nil, &subnet.LineError{Input: name, Line: i + 1, Reason: fmt.Sprintf("inetnum %q: %v", val, err)}
			}
			f.objs = append(f.objs, inetnum{first: i, end: end, s: s, e: e})
		}
		i = end
	}
	f.link()
	return f, nil
}

// link sets each object's parent and leaf flag.
func (f *rpslFile) link() {
	// Objects by start, then end descending: containers before contents.
	order := make([]int, len(f.objs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		x, y := &f.objs[a], &f.objs[b]
		return cmp.Or(cmp.Compare(x.s, y.s), cmp.Compare(y.e, x.e))
	})
	// An object contains another iff a later one in that order ends no
	// later than it, or the one just before has the same range.
	minEnd := uint64(math.MaxUint64)
	for k := len(order) - 1; k >= 0; k-- {
		o := &f.objs[order[k]]
		o.leaf = uint64(o.e) < minEnd
		if k > 0 {
			if p := &f.objs[order[k-1]]; p.s == o.s && p.e == o.e {
				o.leaf = false
			}
		}
		minEnd = min(minEnd, uint64(o.e))
	}
	var open []int // objects that may contain the next ones
	for _, i := range order {
		o := &f.objs[i]
		for len(open) > 0 && f.objs[open[len(open)-1]].e < o.s {
			open = open[:len(open)-1]
		}
		o.parent = -1
		for k := len(open) - 1; k >= 0; k-- {
			if f.objs[open[k]].e >= o.e {
				o.parent = open[k]
				break
			}
		}
		open = append(open, i)
	}
}

// objRef names an object of one of the inetnum files.
type objRef struct{ f, o int }

// gap is a candidate for an added object: the block s-e in a gap of a
// parent, and the sibling leaf it copies.
type gap struct {
	sib  objRef
	s, e uint32
}

// update is UpdateRegistry's state: the candidates of each kind, the
// leaves taken and the changes made.
type update struct {
	rng    *rng
	n      int
	used   map[objRef]bool
	splits []objRef
	merges [][2]objRef
	leaves []objRef
	gaps   []gap
	ch     RegistryChanges
	inet   []*rpslFile
	prefer []uint32 // addresses whose leaves are drawn first
}

// preferred reports whether object r holds one of the preferred addresses.
func (u *update) preferred(r objRef) bool {
	o := &u.inet[r.f].objs[r.o]
	return slices.ContainsFunc(u.prefer, func(a uint32) bool { return o.s <= a && a <= o.e })
}

// first moves the candidates that preferred says to hold a preferred
// address to the front, keeping the drawn order otherwise.
func first[T any](cs []T, preferred func(T) bool) {
	slices.SortStableFunc(cs, func(a, b T) int {
		pa, pb := preferred(a), preferred(b)
		switch {
		case pa && !pb:
			return -1
		case pb && !pa:
			return 1
		}
		return 0
	})
}

// candidates collects the candidates of file f, index fi.
func (u *update) candidates(fi int, f *rpslFile) {
	byStart := map[uint32][]int{}
	children := map[int][]int{} // by parent, in address order
	for i := range f.objs {
		o := &f.objs[i]
		if o.parent >= 0 {
			children[o.parent] = append(children[o.parent], i)
		}
		if o.leaf {
			byStart[o.s] = append(byStart[o.s], i)
			u.leaves = append(u.leaves, objRef{fi, i})
			if o.size() >= 4 {
				u.splits = append(u.splits, objRef{fi, i})
			}
		}
	}
	for i := range f.objs {
		a := &f.objs[i]
		if !a.leaf || a.parent < 0 || a.e == math.MaxUint32 {
			continue
		}
		p := &f.objs[a.parent]
		for _, j := range byStart[a.e+1] {
			if b := &f.objs[j]; b.parent == a.parent && (a.s != p.s || b.e != p.e) {
				u.merges = append(u.merges, [2]objRef{{fi, i}, {fi, j}})
			}
		}
	}
	for p := range f.objs {
		kids := children[p]
		slices.SortStableFunc(kids, func(a, b int) int { return cmp.Compare(f.objs[a].s, f.objs[b].s) })
		sib := -1
		for _, k := range kids {
			if f.objs[k].leaf {
				sib = k
				break
			}
		}
		if sib < 0 {
			continue // not a parent of leaves
		}
		par := &f.objs[p]
		// next is the first address the children so far leave free.
		next := uint64(par.s)
		gapTo := func(end uint64) {
			if s, e, ok := cidrIn(next, end); ok {
				u.gaps = append(u.gaps, gap{objRef{fi, sib}, uint32(s), uint32(e)})
			}
		}
		for _, k := range kids {
			c := &f.objs[k]
			if uint64(c.s) > next {
				gapTo(uint64(c.s) - 1)
			}
			next = max(next, uint64(c.e)+1)
			if c.leaf {
				sib = k
			}
		}
		gapTo(uint64(par.e))
	}
}

// cidrIn returns the first of the largest aligned blocks of 256 down to 4
// addresses inside s-e, or false when there is none (as when s > e).
func cidrIn(s, e uint64) (uint64, uint64, bool) {
	for size := uint64(256); size >= 4; size /= 2 {
		if a := (s + size - 1) &^ (size - 1); a+size-1 <= e {
			return a, a + size - 1, true
		}
	}
	return 0, 0, false
}

// take marks refs as used and reports true if none was.
func (u *update) take(refs ...objRef) bool {
	for _, r := range refs {
		if u.used[r] {
			return false
		}
	}
	for _, r := range refs {
		u.used[r] = true
	}
	return true
}

func (u *update) merge(inet []*rpslFile) {
	u.rng.shuffle(len(u.merges), func(i, j int) { u.merges[i], u.merges[j] = u.merges[j], u.merges[i] })
	first(u.merges, func(m [2]objRef) bool { return u.preferred(m[0]) || u.preferred(m[1]) })
	for _, m := range u.merges {
		if len(u.ch.Merged) == u.n || !u.take(m[0], m[1]) {
			continue
		}
		f := inet[m[0].f]
		a, b := &f.objs[m[0].o], &f.objs[m[1].o]
		f.edit(m[0].o, withRange(f.object(m[0].o), a.s, b.e))
		f.edit(m[1].o)
		u.ch.Merged = append(u.ch.Merged, RegistryChange{File: f.name,
			Old: []subnet.Range{v4Range(a.s, a.e), v4Range(b.s, b.e)},
			New: []subnet.Range{v4Range(a.s, b.e)}})
	}
}

func (u *update) split(inet []*rpslFile) {
	u.rng.shuffle(len(u.splits), func(i, j int) { u.splits[i], u.splits[j] = u.splits[j], u.splits[i] })
	first(u.splits, u.preferred)
	for _, r := range u.splits {
		if len(u.ch.Split) == u.n || !u.take(r) {
			continue
		}
		f := inet[r.f]
		o := &f.objs[r.o]
		mid := uint32(uint64(o.s) + o.size()/2 - 1)
		lines := f.object(r.o)
		name := ""
		if v, ok := attrValue(lines, "netname"); ok {
			name = stripRPSLComment(v)
		}
		half := func(s, e uint32, suffix string) [][]byte {
			h := withRange(lines, s, e)
			if name != "" {
				h = setAttr(h, "netname", name+suffix)
			}
			return h
		}
		f.edit(r.o, half(o.s, mid, "-1"), half(mid+1, o.e, "-2"))
		u.ch.Split = append(u.ch.Split, RegistryChange{File: f.name,
			Old: []subnet.Range{v4Range(o.s, o.e)},
			New: []subnet.Range{v4Range(o.s, mid), v4Range(mid+1, o.e)}})
	}
}

func (u *update) remove(inet []*rpslFile) {
	u.rng.shuffle(len(u.leaves), func(i, j int) { u.leaves[i], u.leaves[j] = u.leaves[j], u.leaves[i] })
	first(u.leaves, u.preferred)
	for _, r := range u.leaves {
		if len(u.ch.Removed) == u.n || !u.take(r) {
			continue
		}
		f := inet[r.f]
		o := &f.objs[r.o]
		f.edit(r.o)
		u.ch.Removed = append(u.ch.Removed, RegistryChange{File: f.name, Old: []subnet.Range{v4Range(o.s, o.e)}})
	}
}

func (u *update) add(inet []*rpslFile) {
	u.rng.shuffle(len(u.gaps), func(i, j int) { u.gaps[i], u.gaps[j] = u.gaps[j], u.gaps[i] })
	gaps := u.gaps[:min(u.n, len(u.gaps))]
	slices.SortFunc(gaps, func(a, b gap) int {
		return cmp.Or(strings.Compare(inet[a.sib.f].name, inet[b.sib.f].name), cmp.Compare(a.s, b.s))
	})
	for k, g := range gaps {
		f := inet[g.sib.f]
		obj := withRange(f.object(g.sib.o), g.s, g.e)
		obj = setAttr(obj, "netname", fmt.Sprintf("NEW-%d", k+1))
		obj = setAttr(obj, "status", "ASSIGNED PA")
		if _, ok := f.edits[g.sib.o]; !ok {
			f.edit(g.sib.o, f.object(g.sib.o))
		}
		f.edits[g.sib.o] = append(f.edits[g.sib.o], obj)
		u.ch.Added = append(u.ch.Added, RegistryChange{File: f.name, New: []subnet.Range{v4Range(g.s, g.e)}})
	}
}

// object returns the lines of object i.
func (f *rpslFile) object(i int) [][]byte { return f.lines[f.objs[i].first:f.objs[i].end] }

// edit replaces object i with objs (none: deletes it).
func (f *rpslFile) edit(i int, objs ...[][]byte) {
	if f.edits == nil {
		f.edits = map[int][][][]byte{}
	}
	f.edits[i] = objs
}

// write returns the file with its edits, objects separated by one blank
// line; a deleted object takes the blank lines after it along.
func (f *rpslFile) write() []byte {
	at := map[int]int{} // first line → object
	for i, o := range f.objs {
		at[o.first] = i
	}
	var b bytes.Buffer
	line := func(l []byte) { b.Write(l); b.WriteByte('\n') }
	for i := 0; i < len(f.lines); {
		o, ok := at[i]
		objs, edited := f.edits[o]
		if !ok || !edited {
			line(f.lines[i])
			i++
			continue
		}
		for k, obj := range objs {
			if k > 0 {
				line(nil)
			}
			for _, l := range obj {
				line(l)
			}
		}
		i = f.objs[o].end
		for len(objs) == 0 && i < len(f.lines) && isBlank(f.lines[i]) {
			i++
		}
	}
	return b.Bytes()
}

func v4Range(s, e uint32) subnet.Range { return subnet.Range{Start: u32addr(s), End: u32addr(e)} }

// parseInetnum parses an inetnum's range: "a.b.c.d - e.f.g.h", a prefix, or
// an abbreviated prefix such as "200.3/16". End-of-line comments are
// ignored.
func parseInetnum(v string) (s, e uint32, err error) {
	v = stripRPSLComment(v)
	var r subnet.Range
	if a, b, ok := strings.Cut(v, "-"); ok {
		start, err1 := netip.ParseAddr(strings.TrimSpace(a))
		end, err2 := netip.ParseAddr(strings.TrimSpace(b))
		if errors.Join(err1, err2) != nil {
			return 0, 0, errors.New("not a range of two addresses")
		}
		r = subnet.Range{Start: start, End: end}
	} else {
		if a, bits, ok := strings.Cut(v, "/"); ok && strings.Count(a, ".") < 3 && a != "" {
			v = a + strings.Repeat(".0", 3-strings.Count(a, ".")) + "/" + bits
		}
		p, err := netip.ParsePrefix(v)
		if err != nil || p.Masked() != p {
			return 0, 0, errors.New("not a range or a prefix")
		}
		r = subnet.RangeOf(p)
	}
	if !r.Start.Is4() || !r.End.Is4() || r.Start.Compare(r.End) > 0 {
		return 0, 0, errors.New("not an IPv4 range with start ≤ end")
	}
	s, _ = addrU32(r.Start)
	e, _ = addrU32(r.End)
	return s, e, nil
}

// withRange returns a copy of the object lines with its range set to s-e.
func withRange(lines [][]byte, s, e uint32) [][]byte {
	out := slices.Clone(lines)
	out[0] = setValue(out[0], u32addr(s).String()+" - "+u32addr(e).String())
	return out
}

// setAttr returns a copy of the object lines with the first attribute name
// set to value, its continuation lines dropped, or value added at the end.
func setAttr(lines [][]byte, name, value string) [][]byte {
	for i := 1; i < len(lines); i++ {
		if a, _, ok := rpslAttr(lines[i]); ok && a == name {
			j := i + 1
			for j < len(lines) && isContinuation(lines[j]) {
				j++
			}
			return slices.Concat(lines[:i], [][]byte{setValue(lines[i], value)}, lines[j:])
		}
	}
	return append(slices.Clone(lines), fmt.Appendf(nil, "%-16s%s", name+":", value))
}

// attrValue returns the value of the object's first attribute name after
// its first line.
func attrValue(lines [][]byte, name string) (string, bool) {
	for _, l := range lines[1:] {
		if a, v, ok := rpslAttr(l); ok && a == name {
			return v, true
		}
	}
	return "", false
}

// setValue returns a new "attribute: value" line with the attribute and
// spacing of l and the value v.
func setValue(l []byte, v string) []byte {
	i := bytes.IndexByte(l, ':') + 1
	j := i
	for j < len(l) && (l[j] == ' ' || l[j] == '\t') {
		j++
	}
	out := slices.Clone(l[:j])
	if j == i {
		out = append(out, ' ')
	}
	return append(out, v...)
}

// rpslAttr splits an "attribute: value" line into the lowercase attribute
// name and the trimmed value.
func rpslAttr(l []byte) (name, value string, ok bool) {
	i := bytes.IndexByte(l, ':')
	if i <= 0 || i > 64 {
		return "", "", false
	}
	for _, c := range l[:i] {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return "", "", false
		}
	}
	return strings.ToLower(string(l[:i])), string(bytes.TrimSpace(l[i+1:])), true
}

func isBlank(l []byte) bool        { return len(bytes.TrimSpace(l)) == 0 }
func isComment(l []byte) bool      { return l[0] == '%' || l[0] == '#' }
func isContinuation(l []byte) bool { return l[0] == ' ' || l[0] == '\t' || l[0] == '+' }

// stripRPSLComment removes an end-of-line comment and surrounding space.
func stripRPSLComment(v string) string {
	v, _, _ = strings.Cut(v, "#")
	return strings.TrimSpace(v)
}
