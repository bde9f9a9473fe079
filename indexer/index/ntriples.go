package index

import (
	"bufio"
	"context"
	"encoding/hex"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/micra-net/micra/crawl"
)

// NTriplesStats counts what ExportNTriples wrote.
type NTriplesStats struct {
	Pages   int // pages with at least one statement written
	Triples int // lines written
	Skipped int // statements N-Triples cannot express, left out
}

// ExportNTriples writes the statements of every searchable page to w as
// one RDF graph in N-Triples (RDF 1.1, UTF-8, one triple a line), in id
// order, from one consistent snapshot. Blank nodes are made unique per
// page: a page's labels become _:p<first 8 bytes of its id in hex>b<n>,
// n numbering them in order of first use. Literals keep their datatype or
// language tag; xsd:string is implied. Pages delivered by a distrusted node
// are left out (N-Triples cannot mark them, the JSON Lines export does).
// Statements it cannot express (a relative or malformed IRI, a bad
// language tag: the index drops them when storing, but a record stored by
// schema 1 was not checked) are skipped and counted. It streams and stops
// when ctx ends.
func (x *Index) ExportNTriples(ctx context.Context, w io.Writer) (NTriplesStats, error) {
	return exportNTriples(ctx, x, w)
}

// exportNTriples is ExportNTriples of either store.
func exportNTriples(ctx context.Context, s Store, w io.Writer) (NTriplesStats, error) {
	var st NTriplesStats
	if err := s.check(ctx); err != nil {
		return st, err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	var line []byte
	labels := make(map[string]int)
	err := s.eachRecord(ctx, func(id docID, d *Doc) error {
		if d.Distrusted || len(d.Statements) == 0 {
			return nil
		}
		clear(labels)
		wrote := false
		for _, s := range d.Statements {
			var ok bool
			line, ok = appendNTriple(line[:0], s, id, labels)
			if !ok {
				st.Skipped++
				continue
			}
			if _, err := bw.Write(line); err != nil {
				return err
			}
			st.Triples++
			wrote = true
		}
		if wrote {
			st.Pages++
		}
		return nil
	})
	if err != nil {
		return st, err
	}
	return st, bw.Flush()
}

// appendNTriple appends statement s of page id as an N-Triples line; false
// if N-Triples cannot express it. labels maps the page's blank node labels
// to their numbers.
func appendNTriple(b []byte, s crawl.Statement, id docID, labels map[string]int) ([]byte, bool) {
	c := s
	var okS, okP, okO bool
	c.S, okS = cleanTerm(s.S, false)
	c.P, okP = cleanTerm(s.P, false)
	c.O, okO = cleanTerm(s.O, true)
	if !okS || !okP || c.P.Kind != crawl.TermIRI || !okO {
		return b, false
	}
	for i, t := range [3]crawl.Term{c.S, c.P, c.O} {
		if i > 0 {
			b = append(b, ' ')
		}
		b = appendNTTerm(b, t, id, labels)
	}
	return append(b, " .\n"...), true
}

// appendNTTerm appends a term cleanTerm accepted.
func appendNTTerm(b []byte, t crawl.Term, id docID, labels map[string]int) []byte {
	switch t.Kind {
	case crawl.TermIRI:
		b = append(b, '<')
		b = append(b, t.Value...)
		return append(b, '>')
	case crawl.TermBlank:
		n, ok := labels[t.Value]
		if !ok {
			n = len(labels)
			labels[t.Value] = n
		}
		b = append(b, "_:p"...)
		b = hex.AppendEncode(b, id[:8])
		b = append(b, 'b')
		return strconv.AppendInt(b, int64(n), 10)
	}
	b = appendNTString(b, t.Value)
	switch {
	case t.Lang != "":
		b = append(b, '@')
		b = append(b, t.Lang...)
	case t.Datatype != "":
		b = append(b, "^^<"...)
		b = append(b, t.Datatype...)
		b = append(b, '>')
	}
	return b
}

// appendNTString appends s as an N-Triples string literal: quoted, with
// ECHAR escapes for quote, backslash, tab, newline, carriage return,
// backspace and form feed, UCHAR escapes for the other controls, invalid
// UTF-8 replaced by U+FFFD.
func appendNTString(b []byte, s string) []byte {
	const hexDigits = "0123456789ABCDEF"
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case ntEscape[c] != 0:
			b = append(b, '\\', ntEscape[c])
		case c < 0x20 || c == 0x7f:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&15])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// ntEscape holds the letter of each byte's ECHAR escape (0: none).
var ntEscape = [256]byte{'"': '"', '\\': '\\', '\t': 't', '\n': 'n', '\r': 'r', '\b': 'b', '\f': 'f'}
