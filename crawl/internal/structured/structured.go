package structured

import (
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/html"
)

// Namespaces of the vocabularies the package writes.
const (
	SchemaOrg = "https://schema.org/" // the one form of schema.org IRIs
	RDF       = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
	XSD       = "http://www.w3.org/2001/XMLSchema#"
	RSS       = "http://purl.org/rss/1.0/"
	DC        = "http://purl.org/dc/elements/1.1/"

	RDFType = RDF + "type"
)

// Kind is the kind of a term. Values are stored in records: append only.
type Kind uint8

// Term kinds.
const (
	IRI     Kind = 1
	Blank   Kind = 2
	Literal Kind = 3
)

// Term is a node of a statement: an IRI, a blank node (Value is its label
// without "_:") or a literal (Value is its lexical form; Datatype is ""
// for xsd:string and for language-tagged strings, which have Lang).
type Term struct {
	Kind     Kind
	Value    string
	Datatype string
	Lang     string
}

// Statement is one triple: S is an IRI or a blank node, P an IRI.
type Statement struct {
	S, P, O Term
}

// Limits bound what one page may produce.
type Limits struct {
	Statements int // statements kept per page
	Literal    int // bytes of a literal, longer ones are clipped
	IRI        int // bytes of an IRI, longer ones are dropped with their statement
	JSONLD     int // bytes of one JSON-LD block, larger ones are skipped
	Blocks     int // JSON-LD blocks read per page (the dearest source to read)
	Depth      int // nesting of JSON values, items and XML elements followed
}

// DefaultLimits are the limits of a crawler's extraction: a product or
// event page gives tens of statements, a feed of 15 items about a hundred.
var DefaultLimits = Limits{Statements: 1000, Literal: 1024, IRI: 2048, JSONLD: 128 << 10, Blocks: 64, Depth: 32}

// Result is what extraction found on one page.
type Result struct {
	Statements []Statement
	Sources    int // JSON-LD blocks, microdata and RDFa items, feed items and RDF/XML documents read
	Malformed  int // sources skipped as malformed (bad JSON, refused contexts, ...)
	Dropped    int // statements over the limits or with an unusable term, and sources not read once the page is full
}

// Extractor collects the statements of one page. It is not safe for
// concurrent use.
type Extractor struct {
	lim    Limits
	base   *url.URL
	res    Result
	nblank int
	blocks int // JSON-LD blocks read
	full   bool
	seen   map[Statement]struct{} // statements emitted: a page's statements are a set
}

// New returns an Extractor for the page at base (its final URL, or its
// <base href>). Zero fields of lim take DefaultLimits' values.
func New(base string, lim Limits) *Extractor {
	d := DefaultLimits
	for _, f := range []struct{ v, def *int }{
		{&lim.Statements, &d.Statements}, {&lim.Literal, &d.Literal}, {&lim.IRI, &d.IRI},
		{&lim.JSONLD, &d.JSONLD}, {&lim.Blocks, &d.Blocks}, {&lim.Depth, &d.Depth},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	u, err := url.Parse(base)
	if err != nil || !u.IsAbs() {
		u = nil
	}
	return &Extractor{lim: lim, base: u}
}

// Result returns what was extracted so far.
func (x *Extractor) Result() Result { return x.res }

// SetBase changes the base IRI relative references resolve against, as a
// <base href> does.
func (x *Extractor) SetBase(base string) {
	if u, err := url.Parse(base); err == nil && u.IsAbs() {
		x.base = u
	}
}

// Base returns the base IRI, "" if none.
func (x *Extractor) Base() string {
	if x.base == nil {
		return ""
	}
	return x.base.String()
}

// Full reports whether the statement limit has been reached: further
// statements are dropped.
func (x *Extractor) Full() bool { return x.full }

// source counts one source read; it reports false when the page's
// statements are full.
func (x *Extractor) source() bool {
	if x.full {
		x.res.Dropped++
		return false
	}
	x.res.Sources++
	return true
}

func (x *Extractor) malformed() { x.res.Malformed++ }

// blank returns a new blank node.
func (x *Extractor) blank() Term {
	t := Term{Kind: Blank, Value: "b" + strconv.Itoa(x.nblank)}
	x.nblank++
	return t
}

// iri returns the IRI term of ref resolved against the base; ok is false
// for an unusable one.
func (x *Extractor) iri(ref string) (Term, bool) {
	v, ok := x.resolve(ref)
	return Term{Kind: IRI, Value: v}, ok
}

// resolve resolves ref against the base and normalises it.
func (x *Extractor) resolve(ref string) (string, bool) {
	ref = strings.TrimSpace(ref)
	if ref == "" || len(ref) > x.lim.IRI || !utf8.ValidString(ref) {
		return "", false
	}
	if strings.HasPrefix(ref, "_:") {
		return "", false
	}
	u, err := url.Parse(ref)
	if err != nil {
		return "", false
	}
	s := ref // an absolute IRI is kept as written: String would drop an empty fragment's '#'
	if !u.IsAbs() {
		if x.base == nil {
			return "", false
		}
		s = x.base.ResolveReference(u).String()
	}
	s = NormalizeIRI(s)
	if len(s) > x.lim.IRI || strings.ContainsFunc(s, badIRIRune) {
		return "", false
	}
	return s, true
}

// badIRIRune reports the runes an IRI may not hold (N-Triples' IRIREF):
// controls, space and <>"{}|^`\.
func badIRIRune(r rune) bool {
	return r <= ' ' || strings.ContainsRune("<>\"{}|^`\\", r) || r == utf8.RuneError
}

// literal returns a literal term, its value clipped to Limits.Literal.
func (x *Extractor) literal(v, datatype, lang string) Term {
	v = strings.ToValidUTF8(v, "\uFFFD")
	if len(v) > x.lim.Literal {
		n := x.lim.Literal
		for n > 0 && !utf8.RuneStart(v[n]) {
			n--
		}
		v = v[:n]
	}
	datatype = NormalizeIRI(datatype)
	if datatype == XSD+"string" || datatype == RDF+"langString" {
		datatype = ""
	}
	if datatype != "" {
		lang = "" // rdf:datatype wins over an inherited xml:lang
	} else {
		lang = normLang(lang)
	}
	if len(datatype) > x.lim.IRI {
		datatype = ""
	}
	return Term{Kind: Literal, Value: v, Datatype: datatype, Lang: lang}
}

// emit adds a statement, checking its terms and the page's limit; a
// statement the page already has is not added again.
func (x *Extractor) emit(s, p, o Term) {
	if x.full {
		x.res.Dropped++
		return
	}
	if !validTerm(s, x.lim.IRI) || s.Kind == Literal || p.Kind != IRI || !validTerm(p, x.lim.IRI) || !validTerm(o, x.lim.IRI) {
		x.res.Dropped++
		return
	}
	st := Statement{s, p, o}
	if _, dup := x.seen[st]; dup {
		return // an RDF graph is a set: JSON-LD's `true` and {"@value": true} are one statement
	}
	if len(x.res.Statements) >= x.lim.Statements {
		x.full = true
		x.res.Dropped++
		return
	}
	if x.seen == nil {
		x.seen = make(map[Statement]struct{})
	}
	x.seen[st] = struct{}{}
	x.res.Statements = append(x.res.Statements, st)
}

func validTerm(t Term, maxIRI int) bool {
	switch t.Kind {
	case IRI:
		return t.Value != "" && len(t.Value) <= maxIRI && utf8.ValidString(t.Value)
	case Blank:
		return t.Value != ""
	case Literal:
		return utf8.ValidString(t.Value)
	}
	return false
}

// schemaPrefixes are the forms of the schema.org namespace seen on pages.
var schemaPrefixes = []string{"http://schema.org/", "https://schema.org/", "http://www.schema.org/", "https://www.schema.org/"}

// NormalizeIRI writes schema.org IRIs in their one form (SchemaOrg); other
// IRIs are returned as they are.
func NormalizeIRI(s string) string {
	if len(s) < len("http://schema.org") || (s[4] != ':' && s[4] != 's') {
		return s
	}
	for _, p := range schemaPrefixes {
		if strings.HasPrefix(s, p) {
			return SchemaOrg + s[len(p):]
		}
		if s == p[:len(p)-1] {
			return SchemaOrg
		}
	}
	return s
}

// normLang lower-cases a language tag and drops one that is not one.
func normLang(l string) string {
	l = strings.ToLower(strings.TrimSpace(l))
	if len(l) > 35 {
		return ""
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return ""
		}
	}
	return l
}

// IsVocabulary reports whether iri names a term of a vocabulary the
// package writes (schema.org, RDF, XSD, RSS 1.0, Dublin Core): such IRIs
// are not links to follow.
func IsVocabulary(iri string) bool {
	for _, ns := range []string{SchemaOrg, RDF, XSD, RSS, DC, "http://purl.org/dc/terms/", "http://www.w3.org/2000/01/rdf-schema#", "http://ogp.me/ns", "http://www.w3.org/2002/07/owl#"} {
		if strings.HasPrefix(iri, ns) {
			return true
		}
	}
	return false
}

// Links returns the http(s) IRIs of res's statements that may be followed:
// subjects and objects that are not vocabulary terms nor the objects of
// rdf:type, each once, in order of appearance.
func Links(stmts []Statement) []string {
	var out []string
	seen := map[string]bool{}
	add := func(t Term) {
		if t.Kind != IRI || seen[t.Value] || IsVocabulary(t.Value) {
			return
		}
		if !strings.HasPrefix(t.Value, "http://") && !strings.HasPrefix(t.Value, "https://") {
			return
		}
		seen[t.Value] = true
		out = append(out, t.Value)
	}
	for _, s := range stmts {
		add(s.S)
		if s.P.Value != RDFType {
			add(s.O)
		}
	}
	return out
}

// String formats t as N-Triples writes it, for tests and logs.
func (t Term) String() string {
	switch t.Kind {
	case IRI:
		return "<" + t.Value + ">"
	case Blank:
		return "_:" + t.Value
	case Literal:
		s := strconv.Quote(t.Value)
		if t.Lang != "" {
			return s + "@" + t.Lang
		}
		if t.Datatype != "" {
			return s + "^^<" + t.Datatype + ">"
		}
		return s
	}
	return "?"
}

// String formats s as an N-Triples line without its final " .".
func (s Statement) String() string { return s.S.String() + " " + s.P.String() + " " + s.O.String() }

// HTML reads everything structured in an HTML document: its JSON-LD
// blocks, microdata and RDFa, in that order.
func (x *Extractor) HTML(root *html.Node) {
	sc := x.scan(root)
	for _, n := range sc.scripts {
		var b []byte
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			if c.Type == html.TextNode {
				b = append(b, c.Data...)
			}
		}
		x.JSONLD(b)
	}
	x.microdata(sc)
	x.rdfa(sc)
}
