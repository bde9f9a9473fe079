package crawl

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"

	"github.com/micra-net/micra/crawl/internal/structured"
)

// TermKind is the kind of a statement's term. Values are stable on the
// wire.
type TermKind uint8

// Term kinds.
const (
	TermIRI     = TermKind(structured.IRI)
	TermBlank   = TermKind(structured.Blank)
	TermLiteral = TermKind(structured.Literal)
)

// SchemaOrg is the one form of schema.org IRIs in statements: pages'
// http://schema.org/, https://www.schema.org/ … are all written so.
const SchemaOrg = structured.SchemaOrg

// Term is a node of a Statement: an absolute IRI, a blank node (Value is
// its label, without "_:", unique within its record) or a literal (Value
// is its lexical form; Datatype is an IRI, "" for xsd:string and for a
// language-tagged string, which has Lang, lower case).
type Term struct {
	Kind     TermKind
	Value    string
	Datatype string
	Lang     string
}

// Statement is one RDF triple a page publishes: its JSON-LD, microdata,
// RDFa, RDF/XML, or a feed's items (in the RSS 1.0 vocabulary). S is an
// IRI or a blank node, P an IRI, O any term. The crawler's transform step
// writes them in one normal form (see package crawl's doc).
type Statement struct {
	S, P, O Term
}

func fromStructured(in []structured.Statement) []Statement {
	if len(in) == 0 {
		return nil
	}
	term := func(t structured.Term) Term {
		return Term{Kind: TermKind(t.Kind), Value: t.Value, Datatype: t.Datatype, Lang: t.Lang}
	}
	out := make([]Statement, len(in))
	for i, s := range in {
		out[i] = Statement{S: term(s.S), P: term(s.P), O: term(s.O)}
	}
	return out
}

// statementsDigest is an order-independent hash of statements, for change
// detection: the sum of each statement's hash.
func statementsDigest(stmts []Statement) uint64 {
	var sum uint64
	var buf []byte
	for _, s := range stmts {
		buf = buf[:0]
		for _, t := range [...]Term{s.S, s.P, s.O} {
			buf = append(buf, byte(t.Kind))
			for _, v := range [...]string{t.Value, t.Datatype, t.Lang} {
				buf = binary.AppendUvarint(buf, uint64(len(v)))
				buf = append(buf, v...)
			}
		}
		sum += xxhash.Sum64(buf)
	}
	return sum
}
