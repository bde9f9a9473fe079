package index

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/micra-net/micra/internal/codec"
)

// The index's stored values are written with codec.Encoder and read with
// a codec.Decoder; every value starts with a version byte.

// newDecoder returns a decoder of a stored value, whose failures wrap
// ErrCorruptValue.
func newDecoder(b []byte) codec.Decoder { return codec.NewDecoder(b, ErrCorruptValue) }

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
	e := make(codec.Encoder, 0, 64+len(m.URL)+len(m.Prov.Node))
	e.Byte(1)
	e.Bool(m.Gone)
	e.Time(m.Time)
	e.U64(m.Hash)
	e.Str(m.URL)
	e.Str(m.Prov.Node)
	e.Uvarint(m.Prov.Seq)
	e.Time(m.Prov.Received)
	return e
}

func decodeDocMeta(b []byte) (docMeta, error) {
	d := newDecoder(b)
	var m docMeta
	d.Version("page state", 1)
	switch d.Byte() {
	case 0:
	case 1:
		m.Gone = true
	default:
		d.Fail("bad state")
	}
	m.Time = d.Time()
	m.Hash = d.U64()
	m.URL = d.Str(maxURLBytes)
	m.Prov.Node = d.Str(maxNodeBytes)
	m.Prov.Seq = d.Uvarint()
	m.Prov.Received = d.Time()
	return codec.Finish(&d, m)
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
	e := make(codec.Encoder, 0, 2+len(s.Postings)*12+len(s.Record))
	e.Byte(1)
	e.Uvarint(uint64(len(s.Postings)))
	for _, p := range s.Postings {
		e.Str(p.Term)
		e.U16(p.Weight)
		e.Byte(p.Flags)
	}
	return append(e, s.Record...)
}

// readPostings reads a page's own postings as stored.encode writes them.
func readPostings(d *codec.Decoder) []posting {
	n := d.Count(maxPostings, 4)
	if n == 0 {
		return nil
	}
	ps := make([]posting, n)
	for i := range ps {
		p := &ps[i]
		p.Term = d.Str(maxStoredTermBytes)
		p.Weight = d.U16()
		p.Flags = d.Byte()
		if d.Err() == nil && (p.Term == "" || p.Flags&^ownFlags != 0) {
			d.Fail("bad posting")
		}
	}
	return ps
}

// encodePostings and decodePostings write and read a page's own postings
// alone, as the PostgreSQL store keeps them (micra.pages.postings): the
// encoding of a stored value without its record.
func encodePostings(ps []posting) []byte { return (&stored{Postings: ps}).encode() }

func decodePostings(b []byte) ([]posting, error) {
	d := newDecoder(b)
	d.Version("postings", 1)
	ps := readPostings(&d)
	return codec.Finish(&d, ps)
}

// decodeStored decodes a stored value; Record aliases b.
func decodeStored(b []byte) (stored, error) {
	d := newDecoder(b)
	var s stored
	d.Version("stored record", 1)
	s.Postings = readPostings(&d)
	if d.Err() != nil {
		return stored{}, d.Err()
	}
	if len(d.Rest()) == 0 {
		return stored{}, fmt.Errorf("%w: no record", ErrCorruptValue)
	}
	s.Record = d.Rest()
	return s, nil
}

// match is the annotation of a record for a profile (eRACE's ACI): how
// relevant the record is and which profile terms it contains.
type match struct {
	Relevance float64
	Terms     []string
}

func (m *match) encode() []byte {
	var e codec.Encoder
	e.Byte(1)
	e.F64(m.Relevance)
	e.Uvarint(uint64(len(m.Terms)))
	for _, t := range m.Terms {
		e.Str(t)
	}
	return e
}

func decodeMatch(b []byte) (match, error) {
	d := newDecoder(b)
	var m match
	d.Version("match", 1)
	m.Relevance = d.F64()
	if d.Err() == nil && (m.Relevance < 0 || m.Relevance > 1) {
		d.Fail("relevance %v", m.Relevance)
	}
	if n := d.Count(ceilProfileKeywords, 1); n > 0 {
		m.Terms = make([]string, n)
		for i := range m.Terms {
			m.Terms[i] = d.Str(maxTermBytes)
		}
	}
	return codec.Finish(&d, m)
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
	var e codec.Encoder
	e.Byte(1)
	e.Str(p.Name)
	e.F64(p.Threshold)
	e.Time(p.Updated)
	e.Byte(p.State)
	e.Uvarint(uint64(len(p.Keywords)))
	for _, k := range p.Keywords {
		e.Str(k.Word)
		e.F64(k.Weight)
	}
	return e
}

func decodeProfileValue(b []byte) (profileValue, error) {
	d := newDecoder(b)
	var p profileValue
	d.Version("profile", 1)
	p.Name = d.Str(maxNameBytes)
	p.Threshold = d.F64()
	p.Updated = d.Time()
	p.State = d.Byte()
	if d.Err() == nil && p.State > profileDeleting {
		d.Fail("profile state %d", p.State)
	}
	if n := d.Count(ceilProfileKeywords, 9); n > 0 {
		p.Keywords = make([]ProfileKeyword, n)
		for i := range p.Keywords {
			p.Keywords[i] = ProfileKeyword{Word: d.Str(maxWordBytes), Weight: d.F64()}
		}
	}
	return codec.Finish(&d, p)
}

// counts are the index's counters, persisted with every write.
type counts struct {
	Docs, Tombstones, Terms, Postings, Matches            int64
	Added, Replaced, Removed, Duplicates, Stale, Rejected uint64
	LastIngest                                            time.Time
}

func (c *counts) encode() []byte {
	var e codec.Encoder
	e.Byte(1)
	for _, v := range []int64{c.Docs, c.Tombstones, c.Terms, c.Postings, c.Matches} {
		e.Uvarint(uint64(max(v, 0)))
	}
	for _, v := range []uint64{c.Added, c.Replaced, c.Removed, c.Duplicates, c.Stale, c.Rejected} {
		e.Uvarint(v)
	}
	e.Time(c.LastIngest)
	return e
}

func decodeCounts(b []byte) (counts, error) {
	d := newDecoder(b)
	var c counts
	d.Version("counts", 1)
	for _, p := range []*int64{&c.Docs, &c.Tombstones, &c.Terms, &c.Postings, &c.Matches} {
		v := d.Uvarint()
		if v > math.MaxInt64 {
			d.Fail("counter overflow")
		}
		*p = int64(v)
	}
	for _, p := range []*uint64{&c.Added, &c.Replaced, &c.Removed, &c.Duplicates, &c.Stale, &c.Rejected} {
		*p = d.Uvarint()
	}
	c.LastIngest = d.Time()
	return codec.Finish(&d, c)
}

func encodeUvarint(v uint64) []byte { return binary.AppendUvarint(nil, v) }

func decodeUvarint(b []byte) (uint64, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 || n != len(b) {
		return 0, fmt.Errorf("%w: counter", ErrCorruptValue)
	}
	return v, nil
}
