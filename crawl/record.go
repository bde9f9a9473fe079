package crawl

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/micra-net/micra/crawl/internal/parse"
	"github.com/micra-net/micra/internal/codec"
)

// DocType is the detected type of a document. Values are stable on the wire.
type DocType uint8

// Document types, as detected from headers, extension and content.
const (
	TypeOther        = DocType(parse.Other)
	TypeHTML         = DocType(parse.HTML)
	TypeXHTML        = DocType(parse.XHTML)
	TypeRSS          = DocType(parse.RSS)
	TypeAtom         = DocType(parse.Atom)
	TypeRDF          = DocType(parse.RDF)
	TypeSitemap      = DocType(parse.Sitemap)
	TypeSitemapIndex = DocType(parse.SitemapIndex)
	TypeText         = DocType(parse.Text)
)

func (t DocType) String() string { return parse.Type(t).String() }

// ChangeKind says why a record was produced. Values are stable on the wire.
type ChangeKind uint8

// Change kinds. Only real changes produce records: unchanged pages (304,
// identical bytes) and trivially changed ones (counters, dates, reordered
// links) do not.
const (
	ChangeNew      ChangeKind = 1 // first time this page is indexed
	ChangeModified ChangeKind = 2 // what an indexer stores has changed
	ChangeGone     ChangeKind = 3 // previously indexed, now 404/410 or noindex
)

func (k ChangeKind) String() string {
	switch k {
	case ChangeNew:
		return "new"
	case ChangeModified:
		return "modified"
	case ChangeGone:
		return "gone"
	}
	return fmt.Sprintf("change(%d)", uint8(k))
}

// Keyword is a stemmed term (Snowball English stemmer, lower case) and its
// weight; the heaviest keyword of a record weighs 65535. Indexers must stem
// query words the same way. Weights travel quantised to multiples of 257
// (256 levels; appendVocabulary), so that a record can carry its page's
// whole vocabulary in few bytes.
type Keyword struct {
	Term   string
	Weight uint16
}

// Link is an out-link of a page with its anchor text.
type Link struct {
	URL    string
	Anchor string
}

// FetchTiming is the compact timing of the fetch that produced a record.
type FetchTiming struct {
	DNS, Connect, TTFB, Total time.Duration
}

// Record is the processed result of one page: what the node publishes to
// indexers instead of the page itself.
type Record struct {
	URL         string // the URL requested
	FinalURL    string // after redirects; equal to URL when none
	Time        time.Time
	Status      int
	Type        DocType
	Title       string
	Lang        string
	Canonical   string
	Keywords    []Keyword
	Links       []Link
	Fingerprint uint64 // 64-bit SimHash of the weighted stems
	Change      ChangeKind
	Timing      FetchTiming
	Size        int64 // decoded body bytes
	Truncated   bool  // the body hit a size cap
	Owners      []string
	// Statements are the page's structured data (record version 2; nil
	// when the page has none or the transform is off).
	Statements []Statement
}

// Batch is a sealed, compressed group of records, ready to be signed and
// published by the node. Data is self-describing; decode it with
// DecodeBatch.
type Batch struct {
	Data     []byte
	Records  int
	RawBytes int       // encoded records before compression
	Oldest   time.Time // time of the oldest record
}

// Batch encoding, version 1:
//
//	magic "MCRB" | version u8 | flags u8 (bit 0: zstd) | count uvarint | rawLen uvarint | payload
//
// payload (after decompression, exactly rawLen bytes) is count records, each
// uvarint length + record body (see appendRecord).
const (
	batchMagic   = "MCRB"
	batchVersion = 1
	flagZstd     = 1

	maxBatchRaw     = 32 << 20 // decoded bytes of one batch
	maxBatchRecords = 1 << 20
	maxRecordBytes  = 4 << 20
	maxStr          = 8 << 10 // one URL, title, anchor
	maxRecKeywords  = 4096
	maxTermBytes    = 256 // one keyword
	maxRecLinks     = 100000
	maxRecOwners    = 256
	// maxRecStatements bounds the statements of one record: four times
	// what the crawler's transform keeps of a page.
	maxRecStatements = 4096
)

// Record versions. A record without statements is written as version 1,
// which every decoder reads. Version 2 is version 1's fields followed by
// sections, each
//
//	tag uvarint | length uvarint | body
//
// in increasing tag order. A decoder skips the sections whose tags it does
// not know, so that sections can be added without a new version.
// Decoders older than version 2 refuse version 2 records (ErrBatchVersion).
const (
	recordV1 = 1
	recordV2 = 2

	sectionStatements = 1 // the record's Statements (appendStatements)
	sectionVocabulary = 2 // the record's Keywords (appendVocabulary)
)

var (
	// The default level with a 512 KiB window: on the PostgreSQL manual
	// it compresses records within 0.3 % of SpeedBetterCompression with its
	// default 8 MiB window, and the encoder keeps 2.8 MiB instead of 21 MiB
	// of history and tables alive (bench/README.md). Batches are 256 KiB by
	// default, so the window rarely limits a match.
	zenc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithWindowSize(512<<10), zstd.WithEncoderConcurrency(1))
	zdec, _ = zstd.NewReader(nil, zstd.WithDecoderMaxMemory(maxBatchRaw), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(8<<20))
	zmu     sync.Mutex // zdec.DecodeAll is safe, but bound concurrent decode memory
)

// The encoder makes its pool of block encoders on first use. Made here, at
// package initialisation, the pool belongs to no testing/synctest bubble:
// one made inside a bubble cannot be used from any other goroutine, and
// zenc is shared by every crawler in the process.
func init() { zenc.EncodeAll(nil, nil) }

// appendRecord encodes r onto b: record version 1, or 2 with its
// statements.
func appendRecord(b []byte, r *Record) []byte {
	e := codec.Encoder(b)
	if len(r.Statements) > 0 || len(r.Keywords) > 0 {
		e.Byte(recordV2)
	} else {
		e.Byte(recordV1)
	}
	e.Str(r.URL)
	if r.FinalURL == r.URL {
		e.Str("")
	} else {
		e.Str(r.FinalURL)
	}
	e.Time(r.Time)
	e.Uvarint(uint64(r.Status))
	e.Byte(byte(r.Type))
	e.Str(r.Title)
	e.Str(r.Lang)
	e.Str(r.Canonical)
	// Version 1's keyword list, exact weights: empty, the keywords are
	// in the vocabulary section, where they take a third of the bytes
	// (their exact weights barely compress). Read from older records.
	e.Uvarint(0)
	e.Uvarint(uint64(len(r.Links)))
	for _, l := range r.Links {
		e.Str(l.URL)
		e.Str(l.Anchor)
	}
	e.U64(r.Fingerprint)
	e.Byte(byte(r.Change))
	e.Dur(r.Timing.DNS)
	e.Dur(r.Timing.Connect)
	e.Dur(r.Timing.TTFB)
	e.Dur(r.Timing.Total)
	e.Uvarint(uint64(max(r.Size, 0)))
	e.Bool(r.Truncated)
	e.Uvarint(uint64(len(r.Owners)))
	for _, o := range r.Owners {
		e.Str(o)
	}
	if len(r.Statements) > 0 {
		e.Uvarint(sectionStatements)
		e.Bytes(appendStatements(nil, r.Statements))
	}
	if len(r.Keywords) > 0 {
		e.Uvarint(sectionVocabulary)
		e.Bytes(appendVocabulary(nil, r.Keywords))
	}
	return e
}

// QuantiseWeight returns the weight a keyword of weight w has after a
// record's encoding: w rounded to a multiple of 257, at least 257.
func QuantiseWeight(w uint16) uint16 { return uint16(quantise(w)) * 257 }

// quantise maps a weight to its level 1..255 (weights round to multiples
// of 257; a positive weight keeps level 1 at least).
func quantise(w uint16) byte { return byte(max(1, (uint32(w)+128)/257)) }

// appendVocabulary encodes keywords as runs of one weight level, heaviest
// level first, the terms of a run sorted and front-coded:
//
//	runs uvarint | (level u8 | terms uvarint | (shared uvarint | suffix str)…)…
//
// shared is the length of the prefix the term shares with the run's
// previous term. Sorted, front-coded terms are about half as many bytes
// as the plain list, and compress as well.
func appendVocabulary(b []byte, kws []Keyword) []byte {
	type lt struct {
		level byte
		term  string
	}
	// Each term once, at its heaviest level; empty and over-long terms,
	// which no decoder accepts, dropped.
	heaviest := make(map[string]byte, len(kws))
	for _, k := range kws {
		if k.Term != "" && len(k.Term) <= maxTermBytes {
			heaviest[k.Term] = max(heaviest[k.Term], quantise(k.Weight))
		}
	}
	all := make([]lt, 0, len(heaviest))
	for t, l := range heaviest {
		all = append(all, lt{l, t})
	}
	slices.SortFunc(all, func(a, c lt) int {
		if a.level != c.level {
			return cmp.Compare(c.level, a.level)
		}
		return strings.Compare(a.term, c.term)
	})
	all = all[:min(len(all), maxRecKeywords)]
	var runs int
	for i := range all {
		if i == 0 || all[i].level != all[i-1].level {
			runs++
		}
	}
	e := codec.Encoder(b)
	e.Uvarint(uint64(runs))
	for i := 0; i < len(all); {
		j := i
		for j < len(all) && all[j].level == all[i].level {
			j++
		}
		e.Byte(all[i].level)
		e.Uvarint(uint64(j - i))
		prev := ""
		for _, x := range all[i:j] {
			n := 0
			for n < len(prev) && n < len(x.term) && prev[n] == x.term[n] {
				n++
			}
			e.Uvarint(uint64(n))
			e.Str(x.term[n:])
			prev = x.term
		}
		i = j
	}
	return e
}

// decodeVocabulary decodes what appendVocabulary wrote: at most limit
// keywords, levels strictly decreasing, terms of 1..maxTermBytes bytes
// strictly increasing within a run.
func decodeVocabulary(b []byte, limit int) ([]Keyword, error) {
	d := newDecoder(b)
	runs := d.Count(256, 3)
	var out []Keyword
	last := 256
	for range runs {
		level := int(d.Byte())
		if d.Err() == nil && (level == 0 || level >= last) {
			d.Fail("weight level %d after %d", level, last)
		}
		last = level
		n := d.Count(limit-len(out), 2)
		prev := ""
		for i := range n {
			shared := d.Uvarint()
			if d.Err() == nil && shared > uint64(len(prev)) {
				d.Fail("term shares %d bytes of %d", shared, len(prev))
			}
			if d.Err() != nil {
				break
			}
			t := prev[:shared] + d.Str(maxTermBytes)
			if d.Err() == nil && (t == "" || len(t) > maxTermBytes || (i > 0 && t <= prev)) {
				d.Fail("term %q after %q", t, prev)
			}
			if d.Err() != nil {
				break
			}
			out = append(out, Keyword{Term: t, Weight: uint16(level * 257)})
			prev = t
		}
		if d.Err() != nil {
			break
		}
	}
	return codec.Finish(&d, out)
}

// Wire kinds of a statement's terms: a literal's kind says whether a
// datatype or a language follows.
const (
	wireIRI        = 1
	wireBlank      = 2
	wireLiteral    = 3 // xsd:string
	wireTyped      = 4 // + datatype
	wireLangTagged = 5 // + language
)

// appendStatements encodes statements as a table of their distinct
// strings, in order of first use, and then each statement's terms as
// references into it:
//
//	strings uvarint | string… | statements uvarint | (S P O)…
//	S, O: wire kind u8 | string uvarint [| datatype or language uvarint]
//	P: string uvarint (an IRI)
//
// IRIs repeat (the page, schema.org's terms), so the table keeps records
// small before compression as well as after.
func appendStatements(b []byte, stmts []Statement) []byte {
	index := map[string]uint64{}
	var table []string
	ref := func(s string) uint64 {
		i, ok := index[s]
		if !ok {
			i = uint64(len(table))
			index[s] = i
			table = append(table, s)
		}
		return i
	}
	var body codec.Encoder
	term := func(t Term, isPred bool) {
		if isPred {
			body.Uvarint(ref(t.Value))
			return
		}
		switch {
		case t.Kind == TermIRI:
			body.Byte(wireIRI)
		case t.Kind == TermBlank:
			body.Byte(wireBlank)
		case t.Lang != "":
			body.Byte(wireLangTagged)
		case t.Datatype != "":
			body.Byte(wireTyped)
		default:
			body.Byte(wireLiteral)
		}
		body.Uvarint(ref(t.Value))
		if t.Kind == TermLiteral {
			switch {
			case t.Lang != "":
				body.Uvarint(ref(t.Lang))
			case t.Datatype != "":
				body.Uvarint(ref(t.Datatype))
			}
		}
	}
	for _, s := range stmts {
		term(s.S, false)
		term(s.P, true)
		term(s.O, false)
	}
	e := codec.Encoder(b)
	e.Uvarint(uint64(len(table)))
	for _, s := range table {
		e.Str(s)
	}
	e.Uvarint(uint64(len(stmts)))
	e = append(e, body...)
	return e
}

// decodeStatements decodes what appendStatements wrote. Every reference
// must name a string of the table; subjects are IRIs or blank nodes,
// predicates IRIs.
func decodeStatements(b []byte) ([]Statement, error) {
	d := newDecoder(b)
	ns := d.Count(3*maxRecStatements, 1)
	table := make([]string, ns)
	for i := range table {
		table[i] = d.Str(maxStr)
	}
	n := d.Count(maxRecStatements, 3)
	str := func() string {
		i := d.Uvarint()
		if d.Err() == nil && i >= uint64(len(table)) {
			d.Fail("string %d of %d", i, len(table))
		}
		if d.Err() != nil {
			return ""
		}
		return table[i]
	}
	term := func(subject bool) Term {
		k := d.Byte()
		var t Term
		switch {
		case k == wireIRI:
			t = Term{Kind: TermIRI, Value: str()}
		case k == wireBlank:
			t = Term{Kind: TermBlank, Value: str()}
		case subject:
			d.Fail("subject kind %d", k)
		case k == wireLiteral:
			t = Term{Kind: TermLiteral, Value: str()}
		case k == wireTyped:
			t = Term{Kind: TermLiteral, Value: str()}
			if t.Datatype = str(); t.Datatype == "" {
				d.Fail("empty datatype")
			}
		case k == wireLangTagged:
			t = Term{Kind: TermLiteral, Value: str()}
			if t.Lang = str(); t.Lang == "" || len(t.Lang) > 64 {
				d.Fail("language %q", t.Lang)
			}
		default:
			d.Fail("term kind %d", k)
		}
		return t
	}
	var out []Statement
	if n > 0 {
		out = make([]Statement, n)
	}
	for i := range out {
		out[i].S = term(true)
		out[i].P = Term{Kind: TermIRI, Value: str()}
		out[i].O = term(false)
		if d.Err() != nil {
			break
		}
	}
	return codec.Finish(&d, out)
}

func decodeRecord(b []byte) (Record, error) {
	d := newDecoder(b)
	var r Record
	v := d.Byte()
	if d.Err() == nil && v != recordV1 && v != recordV2 {
		return r, fmt.Errorf("%w: record version %d", ErrBatchVersion, v)
	}
	r.URL = d.Str(maxStr)
	r.FinalURL = d.Str(maxStr)
	if r.FinalURL == "" {
		r.FinalURL = r.URL
	}
	r.Time = d.Time()
	st := d.Uvarint()
	if st > 999 {
		d.Fail("status %d", st)
	}
	r.Status = int(st)
	r.Type = DocType(d.Byte())
	r.Title = d.Str(maxStr)
	r.Lang = d.Str(64)
	r.Canonical = d.Str(maxStr)
	if n := d.Count(maxRecKeywords, 2); n > 0 {
		r.Keywords = make([]Keyword, n)
		for i := range r.Keywords {
			r.Keywords[i].Term = d.Str(maxTermBytes)
			w := d.Uvarint()
			if w > 65535 {
				d.Fail("weight %d", w)
			}
			r.Keywords[i].Weight = uint16(w)
		}
	}
	if n := d.Count(maxRecLinks, 2); n > 0 {
		r.Links = make([]Link, n)
		for i := range r.Links {
			r.Links[i] = Link{URL: d.Str(maxStr), Anchor: d.Str(maxStr)}
		}
	}
	r.Fingerprint = d.U64()
	r.Change = ChangeKind(d.Byte())
	r.Timing = FetchTiming{DNS: d.Dur(), Connect: d.Dur(), TTFB: d.Dur(), Total: d.Dur()}
	size := d.Uvarint()
	if size > 1<<62 {
		d.Fail("size")
	}
	r.Size = int64(size)
	r.Truncated = d.Bool()
	if n := d.Count(maxRecOwners, 1); n > 0 {
		r.Owners = make([]string, n)
		for i := range r.Owners {
			r.Owners[i] = d.Str(256)
		}
	}
	for last := uint64(0); v == recordV2 && d.Err() == nil && len(d.Rest()) > 0; {
		tag := d.Uvarint()
		body := d.Raw(maxRecordBytes)
		if d.Err() != nil {
			break
		}
		if tag <= last {
			d.Fail("section %d after %d", tag, last)
			break
		}
		last = tag
		switch tag {
		case sectionStatements:
			stmts, err := decodeStatements(body)
			if err != nil {
				d.Fail("statements: %v", err)
			}
			r.Statements = stmts
		case sectionVocabulary:
			kws, err := decodeVocabulary(body, maxRecKeywords-len(r.Keywords))
			if err != nil {
				d.Fail("vocabulary: %v", err)
			}
			r.Keywords = append(r.Keywords, kws...)
		default:
			// A section of a later version: skipped.
		}
	}
	if err := d.Done(); err != nil {
		return Record{}, fmt.Errorf("%w: %w", ErrBatchCorrupt, err)
	}
	return r, nil
}

// EncodeBatch encodes and compresses records into a Batch. It is what the
// crawler's batcher does; it is exported for tools and tests.
func EncodeBatch(recs []Record) (Batch, error) {
	if len(recs) > maxBatchRecords {
		return Batch{}, fmt.Errorf("%w: %d records", ErrBatchCorrupt, len(recs))
	}
	var raw codec.Encoder
	var oldest time.Time
	var tmp []byte
	for i := range recs {
		tmp = appendRecord(tmp[:0], &recs[i])
		if len(tmp) > maxRecordBytes {
			return Batch{}, fmt.Errorf("%w: record of %d bytes", ErrBatchCorrupt, len(tmp))
		}
		raw.Bytes(tmp)
		if oldest.IsZero() || recs[i].Time.Before(oldest) {
			oldest = recs[i].Time
		}
	}
	if len(raw) > maxBatchRaw {
		return Batch{}, fmt.Errorf("%w: %d bytes", ErrBatchCorrupt, len(raw))
	}
	return sealBatch(raw, len(recs), oldest), nil
}

func sealBatch(raw []byte, n int, oldest time.Time) Batch {
	out := codec.Encoder(batchMagic)
	out.Byte(batchVersion)
	out.Byte(flagZstd)
	out.Uvarint(uint64(n))
	out.Uvarint(uint64(len(raw)))
	return Batch{Data: zenc.EncodeAll(raw, out), Records: n, RawBytes: len(raw), Oldest: oldest}
}

// DecodeBatch decodes a batch produced by EncodeBatch or the crawler. It
// accepts untrusted input: sizes are bounded (32 MiB decoded, 1 Mi records)
// and any inconsistency fails with ErrBatchCorrupt; an unknown version with
// ErrBatchVersion. Safe for concurrent use.
func DecodeBatch(data []byte) ([]Record, error) {
	if len(data) < len(batchMagic)+2 || !bytes.Equal(data[:4], []byte(batchMagic)) {
		return nil, fmt.Errorf("%w: bad magic", ErrBatchCorrupt)
	}
	if data[4] != batchVersion {
		return nil, fmt.Errorf("%w: %d", ErrBatchVersion, data[4])
	}
	flags := data[5]
	if flags&^flagZstd != 0 {
		return nil, fmt.Errorf("%w: unknown flags %#x", ErrBatchCorrupt, flags)
	}
	d := newDecoder(data[6:])
	n, rawLen := d.Uvarint(), d.Uvarint()
	if d.Err() != nil || n > maxBatchRecords || rawLen > maxBatchRaw {
		return nil, fmt.Errorf("%w: header", ErrBatchCorrupt)
	}
	payload := d.Rest()
	raw := payload
	if flags&flagZstd != 0 {
		zmu.Lock()
		var err error
		raw, err = zdec.DecodeAll(payload, make([]byte, 0, min(rawLen, uint64(len(payload))*8+64)))
		zmu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBatchCorrupt, err)
		}
	}
	if uint64(len(raw)) != rawLen {
		return nil, fmt.Errorf("%w: payload is %d bytes, header says %d", ErrBatchCorrupt, len(raw), rawLen)
	}
	// Each record needs at least 2 bytes of framing and body.
	if n*2 > rawLen {
		return nil, fmt.Errorf("%w: %d records in %d bytes", ErrBatchCorrupt, n, rawLen)
	}
	recs := make([]Record, 0, n)
	pd := newDecoder(raw)
	for range n {
		body := pd.Raw(maxRecordBytes)
		if pd.Err() != nil {
			return nil, fmt.Errorf("%w: %w", ErrBatchCorrupt, pd.Err())
		}
		r, err := decodeRecord(body)
		if err != nil {
			return nil, err
		}
		recs = append(recs, r)
	}
	if err := pd.Done(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBatchCorrupt, err)
	}
	return recs, nil
}
