package index

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// encoder and decoder implement the compact binary encoding of stored
// values: unsigned varints, zig-zag varints, length-prefixed strings. Every
// value starts with a version byte. The decoder never panics and never
// allocates more than its input justifies: each length is checked against
// both a per-field limit and the remaining input.

type encoder struct{ b []byte }

func (e *encoder) byte(v byte)      { e.b = append(e.b, v) }
func (e *encoder) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) u64(v uint64)     { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *encoder) u16(v uint16)     { e.b = binary.BigEndian.AppendUint16(e.b, v) }
func (e *encoder) str(s string)     { e.uvarint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *encoder) f64(v float64)    { e.u64(math.Float64bits(v)) }
func (e *encoder) time(t time.Time) {
	if t.IsZero() {
		e.varint(0)
		return
	}
	e.varint(t.UnixNano())
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, a ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorruptValue, fmt.Sprintf(format, a...))
	}
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.fail("short input")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) fixed(n int) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b) < n {
		d.fail("short input")
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u64() uint64 {
	if p := d.fixed(8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if p := d.fixed(2); p != nil {
		return binary.BigEndian.Uint16(p)
	}
	return 0
}

func (d *decoder) str(limit int) string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(limit) || n > uint64(len(d.b)) {
		d.fail("length %d over limit", n)
		return ""
	}
	v := string(d.b[:n])
	d.b = d.b[n:]
	return v
}

// f64 reads a finite float64.
func (d *decoder) f64() float64 {
	v := math.Float64frombits(d.u64())
	if math.IsNaN(v) || math.IsInf(v, 0) {
		d.fail("non-finite number")
		return 0
	}
	return v
}

func (d *decoder) time() time.Time {
	v := d.varint()
	if v == 0 {
		return time.Time{}
	}
	return time.Unix(0, v)
}

// count reads a collection length, bounded by limit and by the input left
// (each element takes at least minSize bytes).
func (d *decoder) count(limit, minSize int) int {
	n := d.uvarint()
	if d.err != nil {
		return 0
	}
	if n > uint64(limit) || n*uint64(minSize) > uint64(len(d.b)) {
		d.fail("count %d over limit", n)
		return 0
	}
	return int(n)
}

func (d *decoder) version(want byte) {
	if v := d.byte(); d.err == nil && v != want {
		d.fail("version %d", v)
	}
}

// done fails if input is left over.
func (d *decoder) done() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	return d.err
}

// Bounds of decoded fields.
const (
	maxURLBytes  = 2048 // urlnorm.MaxLength: what the crawler emits
	maxNodeBytes = 256  // a peer id as text
	maxTermBytes = 64   // textproc keeps words up to 40 bytes; stems are shorter
	maxNameBytes = 64   // profile names
	maxWordBytes = 128  // a profile keyword as typed
)

// Provenance says where a stored record came from, for audits.
type Provenance struct {
	Node     string    // the publishing node (its peer id), as the caller verified it
	Seq      uint64    // the sequence number of the batch that carried the record
	Received time.Time // when this indexer stored it
}

// docMeta is the state of a page: what decides whether a record replaces
// the stored one.
type docMeta struct {
	Gone bool      // a tombstone: the page is out of search
	Time time.Time // time of the record that set this state
	Hash uint64    // content hash of that record
	URL  string
	Prov Provenance
}

func (m *docMeta) encode() []byte {
	e := encoder{b: make([]byte, 0, 64+len(m.URL)+len(m.Prov.Node))}
	e.byte(1)
	if m.Gone {
		e.byte(1)
	} else {
		e.byte(0)
	}
	e.time(m.Time)
	e.u64(m.Hash)
	e.str(m.URL)
	e.str(m.Prov.Node)
	e.uvarint(m.Prov.Seq)
	e.time(m.Prov.Received)
	return e.b
}

func decodeDocMeta(b []byte) (docMeta, error) {
	d := decoder{b: b}
	var m docMeta
	d.version(1)
	switch d.byte() {
	case 0:
	case 1:
		m.Gone = true
	default:
		d.fail("bad state")
	}
	m.Time = d.time()
	m.Hash = d.u64()
	m.URL = d.str(maxURLBytes)
	m.Prov.Node = d.str(maxNodeBytes)
	m.Prov.Seq = d.uvarint()
	m.Prov.Received = d.time()
	if err := d.done(); err != nil {
		return docMeta{}, err
	}
	return m, nil
}

// Posting flags: where else than the keywords a term was found.
const (
	inTitle   = 1 << 0 // the term is a stem of the title
	inHost    = 1 << 1 // the term is a stem of a host name label
	inKeyword = 1 << 2 // the term is one of the record's keywords
	inStruct  = 1 << 3 // a hidden term of the record's statements (schema 2)
	inAnchor  = 1 << 4 // the term is in the anchors of links to the page (schema 3; anchors.go)

	ownFlags     = inTitle | inHost | inKeyword | inStruct // the page's own record has the term
	postingFlags = ownFlags | inAnchor
)

// posting is one term of a page as the index holds it: its own weight
// and flags from the page's record, and the weight of the anchors of links
// to it (0: none).
type posting struct {
	Term   string
	Weight uint16
	Flags  uint8
	Anchor uint16
}

// encodePostingValue writes weight u16 | flags u8, and anchor u16 with
// the inAnchor flag when anchor > 0.
func encodePostingValue(w uint16, flags uint8, anchor uint16) []byte {
	flags &^= inAnchor
	if anchor == 0 {
		return []byte{byte(w >> 8), byte(w), flags}
	}
	return []byte{byte(w >> 8), byte(w), flags | inAnchor, byte(anchor >> 8), byte(anchor)}
}

func decodePostingValue(b []byte) (w uint16, flags uint8, anchor uint16, err error) {
	switch {
	case len(b) == 3 && b[2]&^ownFlags == 0:
		return uint16(b[0])<<8 | uint16(b[1]), b[2], 0, nil
	case len(b) == 5 && b[2]&^postingFlags == 0 && b[2]&inAnchor != 0 && (b[3] != 0 || b[4] != 0):
		return uint16(b[0])<<8 | uint16(b[1]), b[2] &^ inAnchor, uint16(b[3])<<8 | uint16(b[4]), nil
	}
	return 0, 0, 0, fmt.Errorf("%w: posting value %x", ErrCorruptValue, b)
}

// maxPostings bounds the postings of one stored record: keywords, the
// stems of the title and of the host name, and the hidden terms of its
// statements.
const maxPostings = ceilKeywords + maxTitleTerms + maxTitleVerbatims + maxHostTerms + maxStructTerms

// stored is the value under /index/r/: the postings the record was indexed
// under, so that replacing it removes exactly those, followed by the record.
type stored struct {
	Postings []posting
	Record   []byte // crawl.AppendRecord form
}

func (s *stored) encode() []byte {
	e := encoder{b: make([]byte, 0, 2+len(s.Postings)*12+len(s.Record))}
	e.byte(1)
	e.uvarint(uint64(len(s.Postings)))
	for _, p := range s.Postings {
		e.str(p.Term)
		e.u16(p.Weight)
		e.byte(p.Flags)
	}
	e.b = append(e.b, s.Record...)
	return e.b
}

// postings reads a page's own postings as stored.encode writes them.
func (d *decoder) postings() []posting {
	n := d.count(maxPostings, 4)
	if n == 0 {
		return nil
	}
	ps := make([]posting, n)
	for i := range ps {
		p := &ps[i]
		p.Term = d.str(maxStoredTermBytes)
		p.Weight = d.u16()
		p.Flags = d.byte()
		if d.err == nil && (p.Term == "" || p.Flags&^ownFlags != 0) {
			d.fail("bad posting")
		}
	}
	return ps
}

// encodePostings and decodePostings write and read a page's own postings
// alone, as the PostgreSQL store keeps them (micra.pages.postings): the
// encoding of a stored value without its record.
func encodePostings(ps []posting) []byte { return (&stored{Postings: ps}).encode() }

func decodePostings(b []byte) ([]posting, error) {
	d := decoder{b: b}
	d.version(1)
	ps := d.postings()
	if err := d.done(); err != nil {
		return nil, err
	}
	return ps, nil
}

// decodeStored decodes a stored value; Record aliases b.
func decodeStored(b []byte) (stored, error) {
	d := decoder{b: b}
	var s stored
	d.version(1)
	s.Postings = d.postings()
	if d.err != nil {
		return stored{}, d.err
	}
	if len(d.b) == 0 {
		return stored{}, fmt.Errorf("%w: no record", ErrCorruptValue)
	}
	s.Record = d.b
	return s, nil
}

// match is the annotation of a record for a profile (eRACE's ACI): how
// relevant the record is and which profile terms it contains.
type match struct {
	Relevance float64
	Terms     []string
}

func (m *match) encode() []byte {
	e := encoder{}
	e.byte(1)
	e.f64(m.Relevance)
	e.uvarint(uint64(len(m.Terms)))
	for _, t := range m.Terms {
		e.str(t)
	}
	return e.b
}

func decodeMatch(b []byte) (match, error) {
	d := decoder{b: b}
	var m match
	d.version(1)
	m.Relevance = d.f64()
	if d.err == nil && (m.Relevance < 0 || m.Relevance > 1) {
		d.fail("relevance %v", m.Relevance)
	}
	if n := d.count(ceilProfileKeywords, 1); n > 0 {
		m.Terms = make([]string, n)
		for i := range m.Terms {
			m.Terms[i] = d.str(maxTermBytes)
		}
	}
	if err := d.done(); err != nil {
		return match{}, err
	}
	return m, nil
}

// Profile states: a profile is written pending before its matches are
// (re)built and ready after; one being deleted is marked so before its
// matches are removed. New finishes whatever a crash interrupted.
const (
	profileReady    = 0
	profilePending  = 1
	profileDeleting = 2
)

type profileValue struct {
	Name      string
	Keywords  []ProfileKeyword
	Threshold float64
	Updated   time.Time
	State     byte
}

func (p *profileValue) encode() []byte {
	e := encoder{}
	e.byte(1)
	e.str(p.Name)
	e.f64(p.Threshold)
	e.time(p.Updated)
	e.byte(p.State)
	e.uvarint(uint64(len(p.Keywords)))
	for _, k := range p.Keywords {
		e.str(k.Word)
		e.f64(k.Weight)
	}
	return e.b
}

func decodeProfileValue(b []byte) (profileValue, error) {
	d := decoder{b: b}
	var p profileValue
	d.version(1)
	p.Name = d.str(maxNameBytes)
	p.Threshold = d.f64()
	p.Updated = d.time()
	p.State = d.byte()
	if d.err == nil && p.State > profileDeleting {
		d.fail("profile state %d", p.State)
	}
	if n := d.count(ceilProfileKeywords, 9); n > 0 {
		p.Keywords = make([]ProfileKeyword, n)
		for i := range p.Keywords {
			p.Keywords[i] = ProfileKeyword{Word: d.str(maxWordBytes), Weight: d.f64()}
		}
	}
	if err := d.done(); err != nil {
		return profileValue{}, err
	}
	return p, nil
}

// counts are the index's counters, persisted with every write.
type counts struct {
	Docs, Tombstones, Terms, Postings, Matches            int64
	Added, Replaced, Removed, Duplicates, Stale, Rejected uint64
	LastIngest                                            time.Time
}

func (c *counts) encode() []byte {
	e := encoder{}
	e.byte(1)
	for _, v := range []int64{c.Docs, c.Tombstones, c.Terms, c.Postings, c.Matches} {
		e.uvarint(uint64(max(v, 0)))
	}
	for _, v := range []uint64{c.Added, c.Replaced, c.Removed, c.Duplicates, c.Stale, c.Rejected} {
		e.uvarint(v)
	}
	e.time(c.LastIngest)
	return e.b
}

func decodeCounts(b []byte) (counts, error) {
	d := decoder{b: b}
	var c counts
	d.version(1)
	for _, p := range []*int64{&c.Docs, &c.Tombstones, &c.Terms, &c.Postings, &c.Matches} {
		v := d.uvarint()
		if v > math.MaxInt64 {
			d.fail("counter overflow")
		}
		*p = int64(v)
	}
	for _, p := range []*uint64{&c.Added, &c.Replaced, &c.Removed, &c.Duplicates, &c.Stale, &c.Rejected} {
		*p = d.uvarint()
	}
	c.LastIngest = d.time()
	if err := d.done(); err != nil {
		return counts{}, err
	}
	return c, nil
}

func encodeUvarint(v uint64) []byte { return binary.AppendUvarint(nil, v) }

func decodeUvarint(b []byte) (uint64, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 || n != len(b) {
		return 0, fmt.Errorf("%w: counter", ErrCorruptValue)
	}
	return v, nil
}
