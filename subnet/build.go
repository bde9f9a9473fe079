package subnet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/micra-net/micra/internal/check"
)

// Option configures a Builder.
type Option func(*config) error

type config struct {
	strict    bool
	maxInput  int64
	maxRanges int
	maxIssues int
	progress  func(n int64)
}

func defaultConfig() config {
	return config{
		maxInput:  4 << 30,  // 4 GiB decompressed per input: all RIR files together are ~50 MiB
		maxRanges: 50 << 20, // 50 M ranges: ~50 times the full shared data
		maxIssues: 20,
	}
}

// Strict makes the first malformed line of any input an error (naming the
// input and line) instead of skipping and counting it.
func Strict() Option {
	return func(c *config) error { c.strict = true; return nil }
}

// MaxInputSize bounds the decompressed size of each input in bytes.
func MaxInputSize(n int64) Option {
	return func(c *config) error { return check.Set(&c.maxInput, n, check.Positive("max input size", n)) }
}

// MaxRanges bounds the number of ranges a Builder accepts over all inputs.
func MaxRanges(n int) Option {
	return func(c *config) error { return check.Set(&c.maxRanges, n, check.Positive("max ranges", n)) }
}

// MaxIssues bounds how many skipped lines are kept in detail per input; all
// of them are counted regardless.
func MaxIssues(n int) Option {
	return func(c *config) error { return check.Set(&c.maxIssues, n, check.AtLeast("max issues", n, 0)) }
}

// Progress registers a callback that receives the number of raw (possibly
// compressed) input bytes consumed since its previous call. It is called
// from the goroutine that calls Add.
func Progress(f func(n int64)) Option {
	return func(c *config) error { c.progress = f; return nil }
}

// Report summarises what a Builder read and built.
type Report struct {
	Inputs []InputReport

	Ranges     int // nodes of the built tree, roots excluded
	Orgs       int // distinct organisation keys in the tree
	Duplicates int // ranges equal to another of the same layer, merged into it
	Combined   int // ranges equal to one of a more structural layer, merged into it
	Clipped    int // ranges cut because they overlapped another without nesting
	Pieces     int // pieces the clipped ranges were cut into
	BuildTime  time.Duration
}

// InputReport summarises one input.
type InputReport struct {
	Name   string
	Format Format

	// Delegated files: the version line.
	Version       string
	Registry      string
	Serial        string
	EndDate       string // YYYYMMDD, the date the file describes
	HeaderRecords int    // record count the version line claims; -1 if none
	Summary       map[string]int

	// Records counts what was read by kind: "asn", "ipv4", "ipv6" for
	// delegated files and ip2asn tables; "inetnum", "inet6num",
	// "organisation" and "other" for RPSL.
	Records map[string]int
	Ranges  int // address ranges taken from this input

	Skipped int         // malformed lines or objects skipped
	Issues  []LineError // the first skipped lines in detail
}

// RecordTotal returns the number of records read, all kinds together.
func (r *InputReport) RecordTotal() int {
	n := 0
	for _, c := range r.Records {
		n += c
	}
	return n
}

// Builder assembles a Tree from inputs. Add inputs in any order; their
// precedence comes from their kind and date (see Build). A Builder is not
// safe for concurrent use.
type Builder struct {
	cfg    config
	stages []*stage
	nrec   int
	start  time.Time

	orgIdx map[string]int32
	orgs   []org
	named  []int32 // organisations named by the input being added, to undo on error
	regIdx map[string]uint8
	regs   []string
	stIdx  map[string]uint8
	stats  []string
}

// stage is the ranges of one input.
type stage struct {
	order  int
	layer  Layer
	date   string
	report *InputReport
	v4, v6 []rec
}

// rec is one range with interned attributes, as the builder handles it.
type rec struct {
	s, e   key
	org    int32
	asn    uint32
	cc     [2]byte
	reg    uint8
	status uint8
	layer  Layer
	frag   bool // a piece of a clipped range
	stage  uint16
	line   int32
}

// NewBuilder returns a Builder with the given options applied to safe
// defaults.
func NewBuilder(opts ...Option) (*Builder, error) {
	b := &Builder{
		cfg:    defaultConfig(),
		orgIdx: map[string]int32{},
		regIdx: map[string]uint8{},
		stIdx:  map[string]uint8{},
		start:  time.Now(),
	}
	if err := check.Apply(&b.cfg, opts); err != nil {
		return nil, err
	}
	b.internReg("")
	b.internStatus("")
	return b, nil
}

// AddFile adds the file at path; see Add.
func (b *Builder) AddFile(ctx context.Context, path string, f Format) (*InputReport, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	return b.Add(ctx, path, fh, f)
}

// Add reads one input named name (used in messages) from r, gzip-compressed
// or not, in format f (FormatAuto detects it). Malformed lines are skipped
// and counted in the returned report, or, with Strict, end the input with an
// error that names the line. On error the builder is left as it was before
// the call.
func (b *Builder) Add(ctx context.Context, name string, r io.Reader, f Format) (_ *InputReport, err error) {
	if len(b.stages) >= 1<<16-1 {
		return nil, errors.New("too many inputs")
	}
	if b.cfg.progress != nil {
		r = &progressReader{r: r, f: b.cfg.progress}
	}
	br, f, closeIn, err := openInput(name, r, f, b.cfg.maxInput)
	if err != nil {
		return nil, err
	}
	st := &stage{
		order:  len(b.stages),
		report: &InputReport{Name: name, Format: f, HeaderRecords: -1, Records: map[string]int{}},
	}
	p := &parser{b: b, st: st, lr: lineReader{r: br}, ctx: ctx}
	nOrg, nReg, nStat := len(b.orgs), len(b.regs), len(b.stats)
	b.named = b.named[:0]
	defer func() {
		if err == nil {
			return
		}
		// Forget what the failed input added to the tables.
		for _, i := range b.named {
			b.orgs[i].name = ""
		}
		for _, o := range b.orgs[nOrg:] {
			delete(b.orgIdx, o.key)
		}
		for _, r := range b.regs[nReg:] {
			delete(b.regIdx, r)
		}
		for _, s := range b.stats[nStat:] {
			delete(b.stIdx, s)
		}
		b.orgs, b.regs, b.stats = b.orgs[:nOrg], b.regs[:nReg], b.stats[:nStat]
	}()
	switch f {
	case FormatDelegated:
		st.layer = LayerRIR
		err = p.delegated()
	case FormatRPSL:
		st.layer = LayerRPSL
		err = p.rpsl()
	case FormatIP2ASN:
		st.layer = LayerASN
		err = p.ip2asn()
	case FormatAuto:
		// Nothing but comments and blank lines: an empty input.
		st.layer = LayerASN
	default:
		err = fmt.Errorf("%s: %w %v", name, ErrUnknownFormat, f)
	}
	err = errors.Join(err, closeIn())
	if err != nil {
		return nil, err
	}
	if b.nrec+len(st.v4)+len(st.v6) > b.cfg.maxRanges {
		return nil, fmt.Errorf("%s: %w: more than %d ranges in all", name, ErrTooLarge, b.cfg.maxRanges)
	}
	b.nrec += len(st.v4) + len(st.v6)
	st.report.Ranges = len(st.v4) + len(st.v6)
	for i := range st.v4 {
		st.v4[i].layer = st.layer
	}
	for i := range st.v6 {
		st.v6[i].layer = st.layer
	}
	b.stages = append(b.stages, st)
	return st.report, nil
}

func (b *Builder) internOrg(k string) int32 {
	if k == "" {
		return -1
	}
	if i, ok := b.orgIdx[k]; ok {
		return i
	}
	i := int32(len(b.orgs))
	b.orgIdx[k] = i
	b.orgs = append(b.orgs, org{key: k})
	return i
}

// nameOrg records a display name for an organisation key; the first
// non-empty name wins.
func (b *Builder) nameOrg(k, name string) {
	if k == "" || name == "" {
		return
	}
	i := b.internOrg(k)
	if b.orgs[i].name == "" {
		b.orgs[i].name = name
		b.named = append(b.named, i)
	}
}

func intern8(m map[string]uint8, tab *[]string, s string) (uint8, bool) {
	if i, ok := m[s]; ok {
		return i, true
	}
	if len(*tab) >= 255 {
		return 0, false
	}
	i := uint8(len(*tab))
	m[s] = i
	*tab = append(*tab, s)
	return i, true
}

func (b *Builder) internReg(s string) (uint8, bool)    { return intern8(b.regIdx, &b.regs, s) }
func (b *Builder) internStatus(s string) (uint8, bool) { return intern8(b.stIdx, &b.stats, s) }

// Build assembles the tree from everything added so far.
//
// Precedence, used when two ranges overlap without nesting (the loser is cut
// at the winner's boundaries and each piece kept) and when equal ranges of
// the same layer are merged (the winner's attributes are kept, blanks filled
// from the other): IANA's file first, then delegated files by the date they
// describe, newest first, then RPSL inputs, then IP-to-ASN tables; inputs of
// equal rank in the order they were added; within one input, the range that
// starts first. Structural layers stay on top: a range is also cut around
// every range of a more structural layer that it strictly contains, so no
// range has a parent of a less structural layer. Equal ranges, of any
// layers, are merged into one node that keeps the layer and attributes of
// the one taking precedence, with blanks filled from the others.
func (b *Builder) Build() (*Tree, *Report, error) {
	order := slices.Clone(b.stages)
	slices.SortStableFunc(order, func(x, y *stage) int {
		if c := cmp.Compare(x.layer, y.layer); c != 0 {
			return c
		}
		if x.layer == LayerRIR || x.layer == LayerIANA {
			return -cmp.Compare(x.date, y.date)
		}
		return 0
	})
	rep := &Report{}
	for _, st := range b.stages {
		rep.Inputs = append(rep.Inputs, *st.report)
	}
	var acc4, acc6 family
	for rank, st := range order {
		for _, fam := range [][]rec{st.v4, st.v6} {
			for i := range fam {
				fam[i].stage = uint16(rank)
			}
		}
		var err error
		if acc4, err = mergeStage(acc4, st.v4, true, rep); err != nil {
			return nil, nil, err
		}
		if acc6, err = mergeStage(acc6, st.v6, false, rep); err != nil {
			return nil, nil, err
		}
	}
	// A range covering a whole family (RIPE's database has one, "IANA-BLK")
	// is the root itself.
	whole := func(rs []rec, is4 bool) []rec {
		if len(rs) > 0 && rs[0].s.isZero() && rs[0].e == maxKey(is4) {
			rep.Combined++
			return rs[1:]
		}
		return rs
	}
	t, err := b.assemble(whole(acc4.rs, true), whole(acc6.rs, false))
	if err != nil {
		return nil, nil, err
	}
	rep.Ranges = t.Len() - 2
	rep.Orgs = len(t.orgs)
	rep.BuildTime = time.Since(b.start)
	t.meta.BuildTime = rep.BuildTime
	t.meta.Built = time.Now().UTC().Truncate(time.Second)
	for _, in := range rep.Inputs {
		t.meta.Sources = append(t.meta.Sources, in.Name)
	}
	return t, rep, nil
}

// recCmp orders records for the preorder: start ascending, end descending,
// then layer, input precedence, whole before fragment, and line.
func recCmp(x, y *rec) int {
	if c := x.s.cmp(y.s); c != 0 {
		return c
	}
	if c := y.e.cmp(x.e); c != 0 {
		return c
	}
	if c := cmp.Compare(x.layer, y.layer); c != 0 {
		return c
	}
	if c := cmp.Compare(x.stage, y.stage); c != 0 {
		return c
	}
	if x.frag != y.frag {
		if !x.frag {
			return -1
		}
		return 1
	}
	return cmp.Compare(x.line, y.line)
}

// mergeInto fills dst's blank attributes from src. The country "ZZ"
// (unknown, as IANA's file and AFRINIC's free pool use it) counts as blank.
func mergeInto(dst *rec, src *rec) {
	if dst.org < 0 {
		dst.org = src.org
	}
	if dst.asn == 0 {
		dst.asn = src.asn
	}
	if (dst.cc == [2]byte{} || dst.cc == [2]byte{'Z', 'Z'}) && src.cc != [2]byte{} {
		dst.cc = src.cc
	}
	if dst.reg == 0 {
		dst.reg = src.reg
	}
	if dst.status == 0 {
		dst.status = src.status
	}
}

// family is a laminar family of ranges of one address family, in preorder,
// with the index of each range's parent (-1 at the top level).
type family struct {
	rs  []rec
	par []int32
}

// mergeStage merges the ranges of one input (in) into the accumulated
// ranges of the inputs that take precedence over it, and returns the new
// accumulated family.
func mergeStage(acc family, in []rec, is4 bool, rep *Report) (family, error) {
	if len(in) == 0 {
		return acc, nil
	}
	slices.SortFunc(in, func(x, y rec) int { return recCmp(&x, &y) })
	in = laminate(in, rep)
	if len(acc.rs) > 0 {
		in = clipAgainst(acc, in, rep)
	}
	a := acc.rs
	out := make([]rec, 0, len(a)+len(in))
	i, j := 0, 0
	for i < len(a) || j < len(in) {
		if j == len(in) || (i < len(a) && recCmp(&a[i], &in[j]) <= 0) {
			out = append(out, a[i])
			i++
			continue
		}
		r := in[j]
		j++
		// Equal ranges are one range described twice: the one that takes
		// precedence (sorted first) keeps its attributes, blanks filled.
		if n := len(out); n > 0 && out[n-1].s == r.s && out[n-1].e == r.e {
			if out[n-1].layer == r.layer {
				rep.Duplicates++
			} else {
				rep.Combined++
			}
			mergeInto(&out[n-1], &r)
			continue
		}
		out = append(out, r)
	}
	par, err := parents(out, is4)
	if err != nil {
		return family{}, fmt.Errorf("internal error merging inputs: %w", err)
	}
	return family{rs: out, par: par}, nil
}

// laminate makes the ranges of one input, sorted by recCmp, a laminar
// family: equal ranges are merged, and a range that overlaps an earlier one
// without nesting is cut at the ends of the ranges it crosses, the later
// pieces being handled again in their own place in the order.
func laminate(in []rec, rep *Report) []rec {
	out := make([]rec, 0, len(in))
	stack := make([]int, 0, 16)
	var pending recHeap
	i := 0
	for i < len(in) || len(pending) > 0 {
		var r rec
		if len(pending) > 0 && (i == len(in) || recCmp(&pending[0], &in[i]) < 0) {
			r = pending.pop()
		} else {
			r = in[i]
			i++
		}
		for len(stack) > 0 && out[stack[len(stack)-1]].e.less(r.s) {
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 {
			top := &out[stack[len(stack)-1]]
			if top.s == r.s && top.e == r.e {
				mergeInto(top, &r)
				rep.Duplicates++
				continue
			}
			if top.e.less(r.e) {
				// r starts inside the open ranges and ends beyond some of
				// them: keep the part inside the innermost, queue the rest
				// cut at the end of each open range it leaves.
				rep.Clipped++
				cur := top.e.next()
				for k := len(stack) - 2; k >= -1; k-- {
					var end key
					if k >= 0 {
						end = out[stack[k]].e
						if !end.less(r.e) {
							end = r.e
						}
					} else {
						end = r.e
					}
					if !end.less(cur) {
						p := r
						p.s, p.e, p.frag = cur, end, true
						pending.push(p)
						rep.Pieces++
						cur = end.next()
					}
					if end == r.e {
						break
					}
				}
				r.e = top.e
				r.frag = true
				rep.Pieces++
			}
		}
		out = append(out, r)
		stack = append(stack, len(out)-1)
	}
	return out
}

// clipAgainst cuts the ranges of in (laminar, sorted) so that they fit into
// the ranges of acc, which take precedence: a range is cut at the boundaries
// of every range of acc that it overlaps without nesting, and of every range
// of a more structural layer that it strictly contains (structural layers
// stay on top: routing data never becomes the parent of an allocation, nor
// an allocation the parent of an IANA block). It returns the pieces sorted;
// equal pieces of the same input are merged.
func clipAgainst(acc family, in []rec, rep *Report) []rec {
	a, par := acc.rs, acc.par
	out := make([]rec, 0, len(in))
	var cuts []key
	sorted := true
	for _, r := range in {
		cuts = cuts[:0]
		// Ranges containing r.s but ending inside r: cut after their end.
		for x := acc.deepest(r.s); x >= 0; x = par[x] {
			if a[x].e.less(r.e) && a[x].s.less(r.s) {
				cuts = append(cuts, a[x].e)
			}
		}
		// Ranges containing r.e but starting inside r: cut before their start.
		for x := acc.deepest(r.e); x >= 0; x = par[x] {
			if r.s.less(a[x].s) && r.e.less(a[x].e) {
				cuts = append(cuts, a[x].s.prev())
			}
		}
		// Ranges of a more structural layer inside r: cut around them.
		for x := acc.lowerBound(r.s); x < len(a) && !r.e.less(a[x].s); {
			if r.e.less(a[x].e) {
				x++ // crosses r's end (cut above); look inside it
				continue
			}
			if a[x].layer < r.layer && (a[x].s != r.s || a[x].e != r.e) {
				if r.s.less(a[x].s) {
					cuts = append(cuts, a[x].s.prev())
				}
				if a[x].e.less(r.e) {
					cuts = append(cuts, a[x].e)
				}
				x = acc.skip(x)
				continue
			}
			x++
		}
		if len(cuts) == 0 {
			out = append(out, r)
			continue
		}
		rep.Clipped++
		slices.SortFunc(cuts, key.cmp)
		cuts = slices.Compact(cuts)
		cur := r.s
		for _, c := range append(cuts, r.e) {
			p := r
			p.s, p.e, p.frag = cur, c, true
			out = append(out, p)
			rep.Pieces++
			cur = c.next()
		}
		sorted = false
	}
	if !sorted {
		slices.SortFunc(out, func(x, y rec) int { return recCmp(&x, &y) })
		w := 0
		for i := range out {
			if w > 0 && out[w-1].s == out[i].s && out[w-1].e == out[i].e {
				mergeInto(&out[w-1], &out[i])
				rep.Duplicates++
				continue
			}
			out[w] = out[i]
			w++
		}
		out = out[:w]
	}
	return out
}

// lowerBound returns the index of the first range of f that starts at or
// after k.
func (f family) lowerBound(k key) int {
	i, j := 0, len(f.rs)
	for i < j {
		h := int(uint(i+j) >> 1)
		if f.rs[h].s.less(k) {
			i = h + 1
		} else {
			j = h
		}
	}
	return i
}

// skip returns the index after the subtree of range x.
func (f family) skip(x int) int {
	e := f.rs[x].e
	x++
	for x < len(f.rs) && !e.less(f.rs[x].s) {
		x++
	}
	return x
}

// deepest returns the index of the deepest range of f that contains k, or
// -1 when none does.
func (f family) deepest(k key) int32 {
	i, j := 0, len(f.rs)
	for i < j {
		h := int(uint(i+j) >> 1)
		if !k.less(f.rs[h].s) {
			i = h + 1
		} else {
			j = h
		}
	}
	n := int32(i - 1)
	for n >= 0 && f.rs[n].e.less(k) {
		n = f.par[n]
	}
	return n
}

// parents computes the parent of each range of a family in preorder and
// checks that it is laminar. Unlike Tree.link it expects no root.
func parents(rs []rec, is4 bool) ([]int32, error) {
	par := make([]int32, len(rs))
	stack := make([]int32, 0, 16)
	for i := range rs {
		if i > 0 && recCmp(&rs[i-1], &rs[i]) > 0 {
			return nil, fmt.Errorf("ranges out of order at %v", rs[i].span())
		}
		if rs[i].e.less(rs[i].s) || maxKey(is4).less(rs[i].e) {
			return nil, fmt.Errorf("invalid range %v", rs[i].span())
		}
		for len(stack) > 0 && rs[stack[len(stack)-1]].e.less(rs[i].s) {
			stack = stack[:len(stack)-1]
		}
		par[i] = -1
		if len(stack) > 0 {
			p := stack[len(stack)-1]
			if rs[p].e.less(rs[i].e) {
				return nil, fmt.Errorf("%v overlaps %v without nesting", rs[i].span(), rs[p].span())
			}
			par[i] = p
		}
		stack = append(stack, int32(i))
	}
	return par, nil
}

func (r *rec) span() span { return span{r.s, r.e} }

// assemble turns the merged families into a Tree with canonical tables:
// organisations, registries and statuses sorted, unused ones dropped.
func (b *Builder) assemble(v4, v6 []rec) (*Tree, error) {
	n := len(v4) + len(v6) + 2
	t := &Tree{
		n4:    len(v4) + 1,
		start: make([]key, 0, n),
		end:   make([]key, 0, n),
		attrs: make([]attr, 0, n),
	}
	usedOrg := make([]bool, len(b.orgs))
	usedReg := make([]bool, len(b.regs))
	usedSt := make([]bool, len(b.stats))
	usedReg[0], usedSt[0] = true, true
	for _, fam := range [][]rec{v4, v6} {
		for i := range fam {
			if fam[i].org >= 0 {
				usedOrg[fam[i].org] = true
			}
			usedReg[fam[i].reg] = true
			usedSt[fam[i].status] = true
		}
	}
	orgMap := canonical(len(b.orgs), usedOrg, func(i int) string { return b.orgs[i].key })
	regMap := canonical(len(b.regs), usedReg, func(i int) string { return b.regs[i] })
	stMap := canonical(len(b.stats), usedSt, func(i int) string { return b.stats[i] })
	t.orgs = make([]org, countTrue(usedOrg))
	for i, m := range orgMap {
		if m >= 0 {
			t.orgs[m] = b.orgs[i]
		}
	}
	t.registries = make([]string, countTrue(usedReg))
	for i, m := range regMap {
		if m >= 0 {
			t.registries[m] = b.regs[i]
		}
	}
	t.statuses = make([]string, countTrue(usedSt))
	for i, m := range stMap {
		if m >= 0 {
			t.statuses[m] = b.stats[i]
		}
	}
	for f, fam := range [][]rec{v4, v6} {
		is4 := f == 0
		t.start = append(t.start, key{})
		t.end = append(t.end, maxKey(is4))
		t.attrs = append(t.attrs, attr{org: -1, layer: LayerRoot})
		for i := range fam {
			r := &fam[i]
			a := attr{org: -1, asn: r.asn, cc: r.cc, reg: uint8(regMap[r.reg]), status: uint8(stMap[r.status]), layer: r.layer}
			if r.org >= 0 {
				a.org = orgMap[r.org]
			}
			t.start = append(t.start, r.s)
			t.end = append(t.end, r.e)
			t.attrs = append(t.attrs, a)
		}
	}
	if err := t.finish(); err != nil {
		return nil, fmt.Errorf("internal error assembling tree: %w", err)
	}
	t.id = t.contentHash()
	return t, nil
}

// canonical maps the used entries of a table to their rank in sorted order;
// unused entries map to -1.
func canonical(n int, used []bool, name func(int) string) []int32 {
	idx := make([]int, 0, n)
	for i := 0; i < n; i++ {
		if used[i] {
			idx = append(idx, i)
		}
	}
	slices.SortFunc(idx, func(x, y int) int { return strings.Compare(name(x), name(y)) })
	m := make([]int32, n)
	for i := range m {
		m[i] = -1
	}
	for rank, i := range idx {
		m[i] = int32(rank)
	}
	return m
}

func countTrue(b []bool) int {
	n := 0
	for _, v := range b {
		if v {
			n++
		}
	}
	return n
}

// recHeap is a min-heap of records by recCmp.
type recHeap []rec

func (h *recHeap) push(r rec) {
	*h = append(*h, r)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if recCmp(&s[p], &s[i]) <= 0 {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *recHeap) pop() rec {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && recCmp(&s[l], &s[m]) < 0 {
			m = l
		}
		if r < len(s) && recCmp(&s[r], &s[m]) < 0 {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// progressReader reports the bytes read through it.
type progressReader struct {
	r io.Reader
	f func(int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.f(int64(n))
	}
	return n, err
}
