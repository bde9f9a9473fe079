package structured

import (
	"maps"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// initialPrefixes is the part of RDFa 1.1's initial context
// (https://www.w3.org/2011/rdfa-context/rdfa-1.1) that pages use.
var initialPrefixes = map[string]string{
	"as": "https://www.w3.org/ns/activitystreams#", "cc": "http://creativecommons.org/ns#",
	"dc": "http://purl.org/dc/terms/", "dc11": DC, "dcat": "http://www.w3.org/ns/dcat#",
	"dcterms": "http://purl.org/dc/terms/", "foaf": "http://xmlns.com/foaf/0.1/",
	"gr": "http://purl.org/goodrelations/v1#", "og": "http://ogp.me/ns#", "owl": "http://www.w3.org/2002/07/owl#",
	"prov": "http://www.w3.org/ns/prov#", "rdf": RDF, "rdfs": "http://www.w3.org/2000/01/rdf-schema#",
	"schema": "http://schema.org/", "sioc": "http://rdfs.org/sioc/ns#", "skos": "http://www.w3.org/2004/02/skos/core#",
	"v": "http://rdf.data-vocabulary.org/#", "vcard": "http://www.w3.org/2006/vcard/ns#",
	"void": "http://rdfs.org/ns/void#", "xhv": "http://www.w3.org/1999/xhtml/vocab#", "xsd": XSD,
}

// rdfaCtx is the evaluation context an element passes to its children.
type rdfaCtx struct {
	obj      Term // parent object: the subject of the children's statements
	vocab    string
	prefixes map[string]string // shared until an element declares its own
	lang     string
}

// RDFa reads the RDFa of an HTML document: RDFa Lite 1.1 (vocab, typeof,
// property, resource, prefix) and the attributes of RDFa 1.1 Core that
// pages combine with it (about, content, datatype, href and src as
// objects, datetime), with RDFa 1.1's initial context of prefixes (og:,
// schema:, dc:, foaf: …) and those pages declare with prefix or, as
// RDFa 1.0 did, xmlns:NAME. rel and rev are not read: on ordinary pages
// they are link types, not statements.
func (x *Extractor) RDFa(root *html.Node) { x.rdfa(x.scan(root)) }

func (x *Extractor) rdfa(sc *scan) {
	if !sc.rdfa {
		return // the common page: no RDFa, no walk resolving every href
	}
	base, ok := x.iri(x.Base())
	if !ok {
		return
	}
	r := &rdfa{x: x, blanks: map[string]Term{}, base: base}
	r.walk(sc.root, rdfaCtx{obj: base, prefixes: initialPrefixes}, 0)
}

type rdfa struct {
	x      *Extractor
	base   Term            // the document
	blanks map[string]Term // _:labels of the page
}

func (r *rdfa) walk(n *html.Node, ctx rdfaCtx, depth int) {
	if depth > r.x.lim.Depth*8 || r.x.full {
		return
	}
	if n.Type == html.ElementNode {
		ctx = r.element(n, ctx)
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		r.walk(c, ctx, depth+1)
	}
}

// element processes one element and returns its children's context.
func (r *rdfa) element(n *html.Node, ctx rdfaCtx) rdfaCtx {
	x := r.x
	ctx = r.declarations(n, ctx)
	property, hasProp := attrOK(n, "property")
	typeof, hasType := attrOK(n, "typeof")
	_, hasAbout := attrOK(n, "about")
	content, hasContent := attrOK(n, "content")
	datatype, hasDatatype := attrOK(n, "datatype")
	about := r.resource(n, ctx, "about")
	if !hasProp && !hasType && !hasAbout && !hasAttr(n, "resource") && !hasAttr(n, "href") && !hasAttr(n, "src") {
		return ctx // nothing here changes subjects
	}
	var subj, typed, cur Term
	ref := r.firstResource(n, ctx, "resource", "href", "src")
	if hasType && about.Kind == 0 && isDocumentElement(n) {
		about = r.base // the root, head and body act as if about="" (HTML+RDFa 1.1, 3.1)
	}
	if hasProp && !hasContent && !hasDatatype {
		subj = ctx.obj
		if about.Kind != 0 {
			subj = about
		}
		if hasType {
			switch {
			case about.Kind != 0:
				typed = about
			case ref.Kind != 0:
				typed = ref
			default:
				typed = x.blank()
			}
			cur = typed
		}
	} else {
		switch {
		case about.Kind != 0:
			subj = about
		case ref.Kind != 0:
			subj = ref
		case hasType:
			subj = x.blank()
		default:
			subj = ctx.obj
		}
		if hasType {
			typed = subj
		}
	}
	if hasType {
		x.source()
		for _, t := range strings.Fields(typeof) {
			if ti, ok := r.term(t, ctx); ok {
				x.emit(typed, Term{Kind: IRI, Value: RDFType}, ti)
			}
		}
	}
	if hasProp {
		obj := r.object(n, ctx, datatype, hasDatatype, content, hasContent, ref, hasType && about.Kind == 0 && cur.Kind != 0, typed)
		for _, p := range strings.Fields(property) {
			if pi, ok := r.term(p, ctx); ok {
				x.emit(subj, pi, obj)
			} else {
				x.res.Dropped++
			}
		}
	}
	ctx.obj = subj
	if cur.Kind != 0 {
		ctx.obj = cur
	}
	return ctx
}

// declarations applies the vocabulary, prefixes and language n declares
// to ctx.
func (r *rdfa) declarations(n *html.Node, ctx rdfaCtx) rdfaCtx {
	x := r.x
	if v, ok := attrOK(n, "vocab"); ok {
		ctx.vocab = ""
		if t, ok := x.iri(v); ok {
			ctx.vocab = t.Value
		}
	}
	// Prefixes declared the RDFa 1.0 way, xmlns:og="…", which RDFa 1.1
	// still reads (Core §7.5, step 3), before those of prefix.
	cloned := false
	for _, a := range n.Attr {
		name, ok := strings.CutPrefix(a.Key, "xmlns:")
		if !ok || a.Namespace != "" || name == "" || name == "_" || strings.Contains(name, ":") {
			continue
		}
		if t, ok := x.iri(a.Val); ok {
			if !cloned {
				ctx.prefixes, cloned = maps.Clone(ctx.prefixes), true
			}
			ctx.prefixes[strings.ToLower(name)] = t.Value
		}
	}
	if p, ok := attrOK(n, "prefix"); ok {
		if !cloned {
			ctx.prefixes = maps.Clone(ctx.prefixes)
		}
		f := strings.Fields(p)
		for i := 0; i+1 < len(f); i += 2 {
			name, ok := strings.CutSuffix(f[i], ":")
			if !ok || name == "_" || strings.Contains(name, ":") {
				continue
			}
			if t, ok := x.iri(f[i+1]); ok {
				ctx.prefixes[strings.ToLower(name)] = t.Value
			}
		}
	}
	if l, ok := attrOK(n, "lang"); ok {
		ctx.lang = l
	}
	if l, ok := attrOK(n, "xml:lang"); ok {
		ctx.lang = l // XHTML+RDFa pages write xml:lang; it wins over lang, as in XHTML
	}
	return ctx
}

// object is the object of the properties of n: the typed resource n
// creates (asTyped), else by HTML+RDFa 1.1's order its datetime, content,
// typed text, resource, a time element's text or its plain text.
func (r *rdfa) object(n *html.Node, ctx rdfaCtx, datatype string, hasDatatype bool, content string, hasContent bool, ref Term, asTyped bool, typed Term) Term {
	x := r.x
	dt := ""
	if hasDatatype {
		if t, ok := r.term(datatype, ctx); ok {
			dt = t.Value
		}
	}
	datetime, hasDatetime := attrOK(n, "datetime")
	switch {
	case asTyped:
		return typed
	case hasDatetime:
		// HTML+RDFa 1.1: datetime wins over content, and its lexical
		// form gives the XSD type unless datatype does.
		v := strings.TrimSpace(datetime)
		if !hasDatatype {
			dt = dateType(v)
		}
		return x.literal(v, dt, langIf(ctx.lang, dt))
	case hasContent:
		return x.literal(content, dt, langIf(ctx.lang, dt))
	case hasDatatype && dt != RDF+"XMLLiteral":
		return x.literal(textContent(n, x.lim.Literal), dt, langIf(ctx.lang, dt))
	case ref.Kind != 0:
		return ref
	case n.DataAtom == atom.Time:
		v := textContent(n, x.lim.Literal)
		dt = dateType(v)
		return x.literal(v, dt, langIf(ctx.lang, dt))
	default:
		return x.literal(textContent(n, x.lim.Literal), "", ctx.lang)
	}
}

// isDocumentElement reports whether n is the root element, head or body.
func isDocumentElement(n *html.Node) bool {
	return n.DataAtom == atom.Head || n.DataAtom == atom.Body || n.Parent != nil && n.Parent.Type == html.DocumentNode
}

func langIf(lang, dt string) string {
	if dt != "" {
		return ""
	}
	return lang
}

// term expands a term, CURIE or absolute IRI of property, typeof or
// datatype. A term needs a vocabulary; a CURIE's prefix must be known; an
// IRI with an unknown scheme is refused (it is most often a CURIE whose
// prefix the page forgot to declare).
func (r *rdfa) term(v string, ctx rdfaCtx) (Term, bool) {
	prefix, rest, isCURIE := strings.Cut(v, ":")
	if !isCURIE {
		if ctx.vocab == "" {
			return Term{}, false
		}
		return r.x.iri(ctx.vocab + v)
	}
	if ns, ok := ctx.prefixes[strings.ToLower(prefix)]; ok && !strings.HasPrefix(rest, "//") {
		return r.x.iri(ns + rest)
	}
	if strings.HasPrefix(rest, "//") || strings.EqualFold(prefix, "urn") {
		return r.x.iri(v)
	}
	return Term{}, false
}

// resource reads an about or resource attribute: a safe CURIE [p:x], a
// blank node _:x, or an IRI relative to the base.
func (r *rdfa) resource(n *html.Node, ctx rdfaCtx, key string) Term {
	v, ok := attrOK(n, key)
	if !ok {
		return Term{}
	}
	v = strings.TrimSpace(v)
	if inner, ok := strings.CutPrefix(v, "["); ok {
		inner, ok = strings.CutSuffix(inner, "]")
		if !ok {
			return Term{}
		}
		v = inner
		if !strings.HasPrefix(v, "_:") {
			t, _ := r.term(v, ctx)
			return t
		}
	}
	if label, ok := strings.CutPrefix(v, "_:"); ok {
		t, ok := r.blanks[label]
		if !ok {
			t = r.x.blank()
			r.blanks[label] = t
		}
		return t
	}
	t, _ := r.x.iri(v)
	return t
}

func (r *rdfa) firstResource(n *html.Node, ctx rdfaCtx, keys ...string) Term {
	for _, k := range keys {
		if t := r.resource(n, ctx, k); t.Kind != 0 {
			return t
		}
	}
	return Term{}
}

func attrOK(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Namespace == "" && a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}
