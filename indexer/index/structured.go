package index

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/micra-net/micra/crawl"
)

// Statements at the indexer. A record's statements are stored with it (in
// its crawl.AppendRecord form) and indexed as hidden terms, which start
// with '#': a keyword never does (validTerm), so no word can collide with
// them, and a typed query is a posting-list intersection like any other.
//
//	#t:<type IRI>                    the page has an item of that rdf:type
//	#p:<property IRI>=<value>        a property has the value: the whole
//	                                 normalised value (at most maxExactValue
//	                                 bytes), or one of its word stems; an
//	                                 IRI's local name counts as words; an
//	                                 item's schema:name counts as its value
//	#h:<32 hex digits>               either of the above when longer than a
//	                                 term may be: the first 16 bytes of its
//	                                 SHA-256
//
// Hidden terms are lower case ("type:recipe" finds schema:Recipe), and
// an IRI in schema.org's namespace is written "~" and its local name
// ("#t:~recipe"), which no absolute IRI can be confused with.

// Vocabulary used by the indexer.
const (
	rdfTypeIRI    = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
	rdfLangString = "http://www.w3.org/1999/02/22-rdf-syntax-ns#langString"
	xsdString     = "http://www.w3.org/2001/XMLSchema#string"
	schemaName    = crawl.SchemaOrg + "name"
)

// Bounds of the statements of one stored record and of what indexing
// them adds.
const (
	// ceilStatements is the most statements a stored record keeps: what
	// crawl's record decoder accepts.
	ceilStatements = 4096
	// maxStructTerms bounds the hidden terms of one page: its types first,
	// then property values in statement order.
	maxStructTerms = 256
	// maxValueStems bounds the word stems indexed per value.
	maxValueStems = 8
	// maxExactValue bounds, in bytes, a normalised value indexed whole.
	maxExactValue = 128
	// maxNamesPerNode bounds the schema:name values that stand for one
	// item as the value of the properties pointing to it.
	maxNamesPerNode = 2
	// maxHiddenTermBytes is the longest hidden term stored as it is
	// (posting keys give a term's length in one byte).
	maxHiddenTermBytes = 255
	// maxStoredTermBytes bounds a term in stored values.
	maxStoredTermBytes = maxHiddenTermBytes
	// maxBlankLabel bounds a blank node label in bytes.
	maxBlankLabel = 128
	// maxLiteralBytes bounds a literal's lexical form: crawl's decoder
	// bound on a string.
	maxLiteralBytes = 8 << 10
)

// Hits show at most this many types and statements of a page.
const (
	hitTypes      = 8
	hitStatements = 8
)

// prefixes are the prefixes a query may use, as in the RDFa initial
// context (schema: is https, the crawler's one form).
var prefixes = map[string]string{
	"schema":  crawl.SchemaOrg,
	"rdf":     "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
	"rdfs":    "http://www.w3.org/2000/01/rdf-schema#",
	"xsd":     "http://www.w3.org/2001/XMLSchema#",
	"owl":     "http://www.w3.org/2002/07/owl#",
	"dc":      "http://purl.org/dc/terms/",
	"dcterms": "http://purl.org/dc/terms/",
	"dc11":    "http://purl.org/dc/elements/1.1/",
	"foaf":    "http://xmlns.com/foaf/0.1/",
	"og":      "http://ogp.me/ns#",
	"rss":     "http://purl.org/rss/1.0/",
	"skos":    "http://www.w3.org/2004/02/skos/core#",
	"sioc":    "http://rdfs.org/sioc/ns#",
	"vcard":   "http://www.w3.org/2006/vcard/ns#",
}

// knownPrefixes lists prefixes' names for error messages.
func knownPrefixes() string {
	names := make([]string, 0, len(prefixes))
	for p := range prefixes {
		names = append(names, p)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// hiddenTerm makes a hidden term of kind ("#t:" or "#p:") for s, lower
// case, schema.org's namespace written "~" (an IRI starts with a letter,
// so this is unambiguous) to keep keys short.
func hiddenTerm(kind, s string) string {
	if rest, ok := strings.CutPrefix(s, crawl.SchemaOrg); ok {
		s = "~" + rest
	}
	t := kind + strings.ToLower(s)
	if len(t) <= maxHiddenTermBytes {
		return t
	}
	h := sha256.Sum256([]byte(t))
	return "#h:" + hex.EncodeToString(h[:16])
}

// typeTerm is the hidden term of pages with an item of type iri.
func typeTerm(iri string) string { return hiddenTerm("#t:", iri) }

// propTerm is the hidden term of pages whose property prop has the value
// (or the word) v, already normalised.
func propTerm(prop, v string) string { return hiddenTerm("#p:", prop+"="+v) }

// isHidden reports whether a term is a hidden (statement) term.
func isHidden(t string) bool { return strings.HasPrefix(t, "#") }

// normValue is the form values are compared in: valid UTF-8, lower case,
// white space collapsed to single spaces.
func normValue(s string) string {
	return strings.Join(strings.Fields(strings.ToLower(strings.ToValidUTF8(s, "\uFFFD"))), " ")
}

// validIRI reports whether s is an absolute IRI that N-Triples can write
// as it is: a scheme, and none of the characters it forbids (controls,
// space, <>"{}|^` and backslash).
func validIRI(s string) bool {
	if s == "" || len(s) > maxURLBytes || !utf8.ValidString(s) {
		return false
	}
	colon := strings.IndexByte(s, ':')
	if colon < 1 {
		return false
	}
	for i := 0; i < colon; i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	for _, r := range s {
		if r <= 0x20 || r >= 0x7f && r <= 0x9f || strings.ContainsRune("<>\"{}|^`\\", r) {
			return false
		}
	}
	return true
}

// validLang reports whether s is a language tag as N-Triples writes one:
// letters, then groups of letters and digits after hyphens.
func validLang(s string) bool {
	if s == "" || len(s) > maxLangBytes {
		return false
	}
	for i, part := range strings.Split(s, "-") {
		if part == "" {
			return false
		}
		for j := 0; j < len(part); j++ {
			c := part[j]
			alpha := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
			if !alpha && (i == 0 || c < '0' || c > '9') {
				return false
			}
		}
	}
	return true
}

func validNode(t crawl.Term) bool {
	switch t.Kind {
	case crawl.TermIRI:
		return validIRI(t.Value)
	case crawl.TermBlank:
		return t.Value != "" && len(t.Value) <= maxBlankLabel
	}
	return false
}

// cleanTerm returns t as the index keeps it, or false if a statement with
// it cannot be kept.
func cleanTerm(t crawl.Term, object bool) (crawl.Term, bool) {
	if t.Kind != crawl.TermLiteral {
		return crawl.Term{Kind: t.Kind, Value: t.Value}, validNode(t)
	}
	if !object {
		return t, false
	}
	t.Value = clip(t.Value, maxLiteralBytes)
	switch {
	case t.Lang != "":
		if !validLang(t.Lang) {
			return t, false
		}
		t.Lang, t.Datatype = strings.ToLower(t.Lang), ""
	case t.Datatype == xsdString || t.Datatype == rdfLangString:
		t.Datatype = ""
	case t.Datatype != "" && !validIRI(t.Datatype):
		return t, false
	}
	return t, true
}

// cleanStatements returns the statements of a record that the index keeps
// (at most max): subjects IRIs or blank nodes, predicates IRIs, absolute
// IRIs N-Triples can write, language tags well formed, literals clipped.
// The others are dropped and counted. It never changes in when all of in
// is kept.
func cleanStatements(in []crawl.Statement, max int) ([]crawl.Statement, int) {
	var out []crawl.Statement
	changed := false
	kept := 0
	for i, s := range in {
		var okS, okP, okO bool
		var c crawl.Statement
		c.S, okS = cleanTerm(s.S, false)
		c.P, okP = cleanTerm(s.P, false)
		c.O, okO = cleanTerm(s.O, true)
		keep := okS && okP && c.P.Kind == crawl.TermIRI && okO && kept < max
		if keep {
			kept++
		}
		if !changed && keep && c == s {
			continue
		}
		if !changed {
			changed = true
			out = append(make([]crawl.Statement, 0, min(len(in), max)), in[:i]...)
		}
		if keep {
			out = append(out, c)
		}
	}
	if !changed {
		return in, 0
	}
	return slices.Clip(out), len(in) - len(out)
}

// structTerms returns the distinct hidden terms of statements (see the
// top of this file), at most maxStructTerms, types first.
func structTerms(stmts []crawl.Statement) []string {
	if len(stmts) == 0 {
		return nil
	}
	var out []string
	seen := make(map[string]bool)
	add := func(t string) {
		if len(out) < maxStructTerms && !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	names := make(map[crawl.Term][]string)
	for _, s := range stmts {
		switch {
		case s.P.Value == rdfTypeIRI && s.O.Kind == crawl.TermIRI:
			add(typeTerm(s.O.Value))
		case s.P.Value == schemaName && s.O.Kind == crawl.TermLiteral && len(names[s.S]) < maxNamesPerNode:
			names[s.S] = append(names[s.S], s.O.Value)
		}
	}
	addValue := func(p, v string) {
		if nv := normValue(v); nv != "" && len(nv) <= maxExactValue {
			add(propTerm(p, nv))
		}
		for _, t := range crawl.Stems(v, maxValueStems) {
			add(propTerm(p, t))
		}
	}
	for _, s := range stmts {
		if len(out) >= maxStructTerms {
			break
		}
		p := s.P.Value
		switch s.O.Kind {
		case crawl.TermLiteral:
			addValue(p, s.O.Value)
			continue
		case crawl.TermIRI:
			if p == rdfTypeIRI {
				continue
			}
			add(propTerm(p, normValue(s.O.Value)))
			for _, t := range crawl.Stems(localName(s.O.Value), 2) {
				add(propTerm(p, t))
			}
		}
		key := crawl.Term{Kind: s.O.Kind, Value: s.O.Value}
		for _, n := range names[key] {
			addValue(p, n)
		}
	}
	return out
}

// localName is the part of an IRI after its last '#' or '/'.
func localName(iri string) string {
	return iri[strings.LastIndexAny(iri, "#/")+1:]
}

// ShortName is how the search page shows an IRI: a schema.org term without
// its namespace, another IRI whole.
func ShortName(iri string) string {
	if s, ok := strings.CutPrefix(iri, crawl.SchemaOrg); ok && s != "" {
		return s
	}
	return iri
}

// pageTypes returns the distinct rdf:types of statements, in order, at
// most max.
func pageTypes(stmts []crawl.Statement, max int) []string {
	var out []string
	for _, s := range stmts {
		if s.P.Value == rdfTypeIRI && s.O.Kind == crawl.TermIRI && !slices.Contains(out, s.O.Value) {
			if len(out) == max {
				break
			}
			out = append(out, s.O.Value)
		}
	}
	return out
}

// summary returns a few statements that describe a page's items: those
// of typed subjects whose objects are literals or IRIs, types left out,
// at most max.
func summary(stmts []crawl.Statement, max int) []crawl.Statement {
	typed := make(map[crawl.Term]bool)
	for _, s := range stmts {
		if s.P.Value == rdfTypeIRI {
			typed[s.S] = true
		}
	}
	var out []crawl.Statement
	for _, s := range stmts {
		if len(out) == max {
			break
		}
		if typed[s.S] && s.P.Value != rdfTypeIRI && s.O.Kind != crawl.TermBlank {
			out = append(out, s)
		}
	}
	return out
}

// typedQuery is one statement condition of a query.
type typedQuery struct {
	terms []string // hidden terms, all required
	word  string   // the condition as the query wrote it
}

// parseTyped parses a query token that is a statement condition:
// type:TYPE, or PROP=VALUE. ok is false for an ordinary word.
func parseTyped(tok string) (typedQuery, bool, error) {
	q := typedQuery{word: tok}
	if len(tok) >= 5 && strings.EqualFold(tok[:5], "type:") {
		iri, err := expandIRI(tok[5:])
		if err != nil {
			return q, true, fmt.Errorf("%w: %s: %v", ErrBadQuery, tok, err)
		}
		q.terms = []string{typeTerm(iri)}
		return q, true, nil
	}
	var prop, value string
	if strings.HasPrefix(tok, "<") {
		end := strings.IndexByte(tok, '>')
		if end < 0 || end+1 >= len(tok) || tok[end+1] != '=' {
			if strings.Contains(tok, "=") {
				return q, true, fmt.Errorf("%w: %s: write a property IRI as <IRI>=VALUE", ErrBadQuery, tok)
			}
			return q, false, nil
		}
		prop, value = tok[:end+1], tok[end+2:]
	} else {
		i := strings.IndexByte(tok, '=')
		if i < 0 || strings.Contains(tok[:i], "/") {
			// No condition; or a URL with a query string, pasted:
			// words, as before (a full property IRI is written <IRI>=).
			return q, false, nil
		}
		prop, value = tok[:i], tok[i+1:]
	}
	if prop == "" {
		return q, true, fmt.Errorf("%w: %s: a property is missing before '=' (as in author=alice)", ErrBadQuery, tok)
	}
	if strings.TrimSpace(value) == "" {
		return q, true, fmt.Errorf("%w: %s: a value is missing after '=' (as in author=alice)", ErrBadQuery, tok)
	}
	p, err := expandIRI(prop)
	if err != nil {
		return q, true, fmt.Errorf("%w: %s: %v", ErrBadQuery, tok, err)
	}
	if p == rdfTypeIRI {
		iri, err := expandIRI(value)
		if err != nil {
			return q, true, fmt.Errorf("%w: %s: %v", ErrBadQuery, tok, err)
		}
		q.terms = []string{typeTerm(iri)}
		return q, true, nil
	}
	if words(value) {
		for _, t := range crawl.Stems(value, maxValueStems) {
			q.terms = append(q.terms, propTerm(p, t))
		}
		if len(q.terms) == 0 {
			return q, true, fmt.Errorf("%w: %s: the value has only stop words", ErrBadQuery, tok)
		}
		return q, true, nil
	}
	v := value
	if looksLikeIRI(v) {
		if iri, err := expandIRI(v); err == nil {
			v = iri
		}
	}
	nv := normValue(v)
	if len(nv) > maxExactValue {
		return q, true, fmt.Errorf("%w: %s: a value of more than %d bytes is not indexed whole; give some of its words", ErrBadQuery, tok, maxExactValue)
	}
	q.terms = []string{propTerm(p, nv)}
	return q, true, nil
}

// words reports whether a value is words only (letters, marks, spaces,
// apostrophes and hyphens), to be matched word by word; any other value
// (numbers, dates, codes, IRIs) is matched whole.
func words(v string) bool {
	letters := false
	for _, r := range v {
		switch {
		case unicode.IsLetter(r):
			letters = true
		case unicode.IsSpace(r), unicode.Is(unicode.Mn, r), r == '\'', r == '\u2019', r == '-':
		default:
			return false
		}
	}
	return letters
}

// looksLikeIRI reports whether a value is written as an IRI: absolute or
// with a known prefix.
func looksLikeIRI(v string) bool {
	if strings.HasPrefix(v, "<") || strings.Contains(v, "://") {
		return true
	}
	p, _, ok := strings.Cut(v, ":")
	_, known := prefixes[strings.ToLower(p)]
	return ok && known
}

// expandIRI turns what a query wrote for a type or property into an IRI:
// a bare name is a schema.org term (Recipe, author), prefix:name uses one
// of prefixes, <IRI> or an absolute IRI is taken as it is, but for
// schema.org's other spellings, written https://schema.org/ as the
// crawler does.
func expandIRI(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("a type or property is missing (as in type:Recipe)")
	}
	angled := strings.HasPrefix(s, "<")
	if angled {
		if !strings.HasSuffix(s, ">") || len(s) < 3 {
			return "", fmt.Errorf("%q: an IRI in <> lacks its closing '>'", s)
		}
		s = s[1 : len(s)-1]
	}
	var iri string
	switch prefix, local, ok := strings.Cut(s, ":"); {
	case angled || strings.Contains(s, "://"):
		iri = s
		for _, alt := range []string{"http://schema.org/", "http://www.schema.org/", "https://www.schema.org/"} {
			if rest, ok := strings.CutPrefix(iri, alt); ok {
				iri = crawl.SchemaOrg + rest
			}
		}
	case ok:
		ns, known := prefixes[strings.ToLower(prefix)]
		if !known {
			return "", fmt.Errorf("unknown prefix %q (known: %s; or write a full IRI)", prefix, knownPrefixes())
		}
		if !validLocal(local) {
			return "", fmt.Errorf("%q is not a term name", local)
		}
		iri = ns + local
	default:
		if !validLocal(s) {
			return "", fmt.Errorf("%q is not a schema.org term name", s)
		}
		iri = crawl.SchemaOrg + s
	}
	if !validIRI(iri) {
		return "", fmt.Errorf("%q is not an absolute IRI", iri)
	}
	return iri, nil
}

// validLocal reports whether s is a term's local name: letters, digits,
// '_', '-' and '.', starting with a letter or '_'.
func validLocal(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case unicode.IsLetter(r), r == '_':
		case i > 0 && (unicode.IsDigit(r) || r == '-' || r == '.'):
		default:
			return false
		}
	}
	return true
}
