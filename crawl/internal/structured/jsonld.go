package structured

import (
	"bytes"
	"cmp"
	_ "embed" // the schema.org context
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/piprate/json-gold/ld"
)

// schemaContext is the part of schema.org's JSON-LD context
// (https://schema.org/docs/jsonldcontext.jsonld) that changes statements:
// its @vocab and the properties whose values it coerces to IRIs (URL
// ranges). Its other terms map a name to @vocab + name, which @vocab does
// alike; its date coercions are left out, so dates stay plain literals.
//
//go:embed schemaorg.jsonld
var schemaContext []byte

// SchemaContext returns a copy of the embedded schema.org context, for
// reference processors run against the extraction (crawl/internal/corpus).
func SchemaContext() []byte { return bytes.Clone(schemaContext) }

// idTerms are the schema.org properties schemaContext coerces to IRIs.
// The loader gives the processor the context's @vocab and prefixes only,
// and JSONLD makes these properties' string values IRIs afterwards:
// processing 36 term definitions for every block made JSON-LD the
// dearest step of a page (docs/structured-data.md), and the result is the
// same but for a value written {"@value": …}, which becomes an IRI too.
var idTerms, vocabContext = func() (map[string]bool, map[string]any) {
	var doc struct {
		Context map[string]json.RawMessage `json:"@context"`
	}
	if err := json.Unmarshal(schemaContext, &doc); err != nil {
		panic(err)
	}
	ids, vocab := map[string]bool{}, map[string]any{}
	for term, raw := range doc.Context {
		var def struct {
			ID   string `json:"@id"`
			Type string `json:"@type"`
		}
		var str string
		switch {
		case json.Unmarshal(raw, &str) == nil:
			vocab[term] = str
		case json.Unmarshal(raw, &def) == nil && def.Type == "@id":
			ids[SchemaOrg+strings.TrimPrefix(def.ID, "schema:")] = true
		}
	}
	return ids, vocab
}()

// ErrRemoteContext is the error the document loader gives for every
// remote document but the schema.org context: the crawler never fetches
// what a page names.
var ErrRemoteContext = errors.New("remote json-ld context refused")

// loader is a json-gold DocumentLoader that resolves schema.org's context
// from the embedded copy (its @vocab and prefixes, see idTerms) and
// refuses every other URL.
type loader struct{}

var _ ld.DocumentLoader = loader{}

func (loader) LoadDocument(u string) (*ld.RemoteDocument, error) {
	if !isSchemaContext(u) {
		return nil, ld.NewJsonLdError(ld.LoadingDocumentFailed, fmt.Errorf("%w: %.200q", ErrRemoteContext, u))
	}
	// A fresh map each time: the processor owns what it is given.
	return &ld.RemoteDocument{DocumentURL: u, Document: map[string]any{"@context": maps.Clone(vocabContext)}}, nil
}

// isSchemaContext reports whether u names schema.org's context: the
// namespace itself (which serves the context by content negotiation) or
// the context document.
func isSchemaContext(u string) bool {
	n := NormalizeIRI(strings.TrimSpace(u))
	switch strings.TrimSuffix(n, "/") {
	case strings.TrimSuffix(SchemaOrg, "/"), SchemaOrg + "docs/jsonldcontext.json", SchemaOrg + "docs/jsonldcontext.jsonld":
		return true
	}
	return false
}

// JSONLD reads one JSON-LD block (the text of a <script
// type="application/ld+json"> element).
func (x *Extractor) JSONLD(block []byte) {
	if x.blocks >= x.lim.Blocks {
		x.res.Dropped++
		return
	}
	x.blocks++
	if !x.source() {
		return
	}
	block = trimScript(block)
	if len(block) > x.lim.JSONLD || jsonDepth(block) > x.lim.Depth {
		x.malformed()
		return
	}
	var doc any
	if err := json.Unmarshal(block, &doc); err != nil {
		x.malformed()
		return
	}
	switch doc.(type) {
	case map[string]any, []any:
	default:
		// A string would be taken as the URL of a document to load.
		x.malformed()
		return
	}
	quads, err := toRDF(doc, x.Base())
	if err != nil {
		x.malformed()
		return
	}
	labels := map[string]Term{}
	term := func(n ld.Node) (Term, bool) {
		switch n := n.(type) {
		case ld.IRI:
			return x.iri(n.Value)
		case ld.BlankNode:
			t, ok := labels[n.Attribute]
			if !ok {
				t = x.blank()
				labels[n.Attribute] = t
			}
			return t, true
		case ld.Literal:
			return x.literal(n.Value, n.Datatype, n.Language), true
		}
		return Term{}, false
	}
	for _, q := range quads {
		s, ok1 := term(q.Subject)
		p, ok2 := term(q.Predicate)
		o, ok3 := term(q.Object)
		if !ok1 || !ok2 || !ok3 {
			x.res.Dropped++
			continue
		}
		if o.Kind == Literal && o.Datatype == RDF+"JSON" && strings.HasPrefix(o.Value, "JSON Canonicalization error") {
			// json-gold writes its canonicalisation error as the value (W3C
			// toRdf js07, js08, js14, js17, js18, js22, js23).
			x.res.Dropped++
			continue
		}
		if o.Kind == Literal && o.Datatype == "" && o.Lang == "" && idTerms[p.Value] {
			if t, ok := x.iri(o.Value); ok {
				o = t
			}
		}
		x.emit(s, p, o)
	}
}

// toRDF runs json-gold's expansion and RDF conversion (JSON-LD 1.1) on doc;
// quads of named graphs are kept, their graph name dropped. A panic of the
// processor is an error.
func toRDF(doc any, base string) (quads []*ld.Quad, err error) {
	defer func() {
		if r := recover(); r != nil {
			quads, err = nil, fmt.Errorf("json-ld processor: %v", r)
		}
	}()
	opts := ld.NewJsonLdOptions(base)
	opts.DocumentLoader = loader{}
	opts.ProcessingMode = ld.JsonLd_1_1
	res, err := ld.NewJsonLdProcessor().ToRDF(doc, opts)
	if err != nil {
		return nil, err
	}
	ds, ok := res.(*ld.RDFDataset)
	if !ok {
		return nil, errors.New("json-ld processor: no dataset")
	}
	names := slices.Sorted(maps.Keys(ds.Graphs))
	for _, name := range names {
		quads = append(quads, ds.Graphs[name]...)
	}
	// The processor writes each subject's statements in order, but its
	// subjects in map order: sort them (blank nodes by their processor's
	// label number, which follows the document, then IRIs), so that a page
	// gives the same statements, labels and digest every time.
	slices.SortStableFunc(quads, func(a, b *ld.Quad) int {
		ka, na := subjectKey(a.Subject)
		kb, nb := subjectKey(b.Subject)
		if na != nb {
			return cmp.Compare(na, nb)
		}
		return strings.Compare(ka, kb)
	})
	return quads, nil
}

// subjectKey orders subjects: blank nodes _:bN by N, before IRIs by value.
func subjectKey(n ld.Node) (string, int64) {
	if b, ok := n.(ld.BlankNode); ok {
		if v, err := strconv.ParseInt(strings.TrimPrefix(b.Attribute, "_:b"), 10, 64); err == nil {
			return "", v - math.MaxInt64
		}
		return b.Attribute, math.MinInt64 + math.MaxInt32 // other labels after numbered ones, still before IRIs
	}
	return n.GetValue(), math.MaxInt64
}

// trimScript removes what pages wrap JSON in: white space, HTML comment
// markers and CDATA sections.
func trimScript(b []byte) []byte {
	b = bytes.TrimSpace(b)
	for _, w := range [][2]string{{"<!--", "-->"}, {"//<![CDATA[", "//]]>"}, {"<![CDATA[", "]]>"}} {
		if bytes.HasPrefix(b, []byte(w[0])) {
			b = bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(b[len(w[0]):]), []byte(w[1])))
		}
	}
	return b
}

// jsonDepth returns the deepest nesting of arrays and objects in b, not
// counting brackets inside strings; it stops counting past 1000.
func jsonDepth(b []byte) int {
	depth, deepest, inStr, esc := 0, 0, false, false
	for _, c := range b {
		switch {
		case inStr:
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			depth++
			if depth > deepest {
				deepest = depth
				if deepest > 1000 {
					return deepest
				}
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}
