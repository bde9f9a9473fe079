package structured

import (
	"encoding/xml"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// nsXML is the namespace encoding/xml gives the xml: prefix.
const nsXML = "http://www.w3.org/XML/1998/namespace"

// RDFXMLReader turns the tokens of one RDF/XML document into statements.
// It is fed by the caller's xml.Decoder (Token, which resolves
// namespaces), so that a document is decoded once for links, keywords and
// statements alike.
//
// It reads the grammar of RDF 1.1 XML Syntax that documents use: rdf:RDF
// or a lone node element as the root; node elements with rdf:about,
// rdf:ID, rdf:nodeID or none, typed node elements and property
// attributes; property elements with rdf:resource, rdf:nodeID,
// rdf:datatype, xml:lang, rdf:parseType="Resource", property attributes,
// nested node elements or text; rdf:li; xml:base. Content of
// parseType="Literal" and "Collection" is skipped (counted as dropped).
type RDFXMLReader struct {
	x      *Extractor
	stack  []rxFrame
	blanks map[string]Term
	bad    bool
}

type rxKind uint8

const (
	rxRoot    rxKind = iota // rdf:RDF: children are node elements
	rxNode                  // a node element: children are property elements
	rxProp                  // a property element awaiting a node element or text
	rxPropObj               // a property element whose object is known (rdf:resource, parseType=Resource)
	rxSkip                  // skipped content
)

type rxFrame struct {
	kind     rxKind
	subj     Term // node: its subject; prop: the subject of its statement
	pred     Term // prop
	obj      Term // rxPropObj with parseType=Resource: the subject of children
	base     *url.URL
	lang     string
	datatype string
	text     []byte // rxProp: its text (a []byte, since frames move when the stack grows)
	child    bool   // rxProp: a node element was its object
	li       int    // node: rdf:li count
}

// RDFXML returns a reader for one RDF/XML document.
func (x *Extractor) RDFXML() *RDFXMLReader {
	x.source()
	return &RDFXMLReader{x: x, blanks: map[string]Term{}}
}

// Token feeds the next token of the document.
func (r *RDFXMLReader) Token(tok xml.Token) {
	switch t := tok.(type) {
	case xml.StartElement:
		r.start(t)
	case xml.EndElement:
		r.end()
	case xml.CharData:
		if n := len(r.stack); n > 0 {
			f := &r.stack[n-1]
			if f.kind == rxProp && len(f.text) <= r.x.lim.Literal {
				f.text = append(f.text, t...)
			}
		}
	}
}

// Close ends the document: an unfinished one is counted as malformed.
func (r *RDFXMLReader) Close() {
	if len(r.stack) > 0 && !r.bad {
		r.bad = true
		r.x.malformed()
	}
	r.stack = nil
}

func (r *RDFXMLReader) start(se xml.StartElement) {
	x := r.x
	if se.Name.Space == RDF {
		se.Attr = qualify(se.Attr)
	}
	var parent *rxFrame
	f := rxFrame{base: x.base}
	if n := len(r.stack); n > 0 {
		parent = &r.stack[n-1]
		f.base, f.lang = parent.base, parent.lang
	}
	if len(r.stack) >= x.lim.Depth || x.full || (parent != nil && (parent.kind == rxSkip || parent.kind == rxPropObj && parent.obj.Kind == 0)) {
		f.kind = rxSkip
		r.stack = append(r.stack, f)
		return
	}
	for _, a := range se.Attr {
		if a.Name.Space == nsXML {
			switch a.Name.Local {
			case "lang":
				f.lang = a.Value
			case "base":
				if u, err := url.Parse(strings.TrimSpace(a.Value)); err == nil {
					if f.base != nil {
						u = f.base.ResolveReference(u)
					}
					if u.IsAbs() {
						u.Fragment = ""
						f.base = u
					}
				}
			}
		}
	}
	switch {
	case parent == nil && se.Name.Space == RDF && se.Name.Local == "RDF":
		f.kind = rxRoot
	case parent == nil || parent.kind == rxRoot || parent.kind == rxProp:
		f.kind = rxNode
		f.subj = r.node(se, &f)
		if parent != nil && parent.kind == rxProp {
			if parent.child {
				r.malformed() // a second object
			} else {
				parent.child = true
				x.emit(parent.subj, parent.pred, f.subj)
			}
		}
	default: // under a node element, or a parseType=Resource property
		subj := parent.subj
		li := &parent.li
		if parent.kind == rxPropObj {
			subj = parent.obj
		}
		r.property(se, &f, subj, li)
	}
	r.stack = append(r.stack, f)
}

func (r *RDFXMLReader) end() {
	n := len(r.stack)
	if n == 0 {
		return
	}
	f := &r.stack[n-1]
	if f.kind == rxProp && !f.child {
		r.x.emit(f.subj, f.pred, r.x.literal(string(f.text), f.datatype, f.lang))
	}
	r.stack = r.stack[:n-1]
}

func (r *RDFXMLReader) malformed() {
	if !r.bad {
		r.bad = true
		r.x.malformed()
	}
}

// syntaxAttr reports whether a is an RDF/XML syntax attribute (or an XML
// one), not a property attribute. Unqualified about and resource, from
// documents older than the namespace rules, count as rdf:'s.
func syntaxAttr(a xml.Attr) (name string, ok bool) {
	switch a.Name.Space {
	case RDF:
		switch a.Name.Local {
		case "about", "ID", "nodeID", "resource", "datatype", "parseType", "aboutEach", "aboutEachPrefix", "bagID":
			return a.Name.Local, true
		}
		return "", false
	case nsXML, "xmlns":
		return "", true
	case "":
		switch a.Name.Local {
		case "about", "resource":
			return a.Name.Local, true
		}
		return "", true // unqualified attributes are not properties
	}
	if strings.HasPrefix(a.Name.Space, "xml") && !strings.Contains(a.Name.Space, ":") {
		return "", true
	}
	return "", false
}

// node reads a node element's subject, type and property attributes.
func (r *RDFXMLReader) node(se xml.StartElement, f *rxFrame) Term {
	x := r.x
	var subj Term
	for _, a := range se.Attr {
		name, _ := syntaxAttr(a)
		switch name {
		case "about":
			subj, _ = r.iri(a.Value, f.base)
		case "ID":
			subj, _ = r.iri("#"+a.Value, f.base)
		case "nodeID":
			subj = r.blank(a.Value)
		}
	}
	if subj.Kind == 0 {
		subj = x.blank()
	}
	if !(se.Name.Space == RDF && se.Name.Local == "Description") {
		if t, ok := r.name(se.Name); ok {
			x.emit(subj, Term{Kind: IRI, Value: RDFType}, t)
		}
	}
	r.propAttrs(se, subj, f)
	return subj
}

// propAttrs writes the property attributes of an element about subj.
func (r *RDFXMLReader) propAttrs(se xml.StartElement, subj Term, f *rxFrame) {
	for _, a := range se.Attr {
		if _, syn := syntaxAttr(a); syn {
			continue
		}
		p, ok := r.name(a.Name)
		if !ok {
			continue
		}
		if p.Value == RDFType {
			if o, ok := r.iri(a.Value, f.base); ok {
				r.x.emit(subj, p, o)
			}
			continue
		}
		r.x.emit(subj, p, r.x.literal(a.Value, "", f.lang))
	}
}

func hasPropAttrs(se xml.StartElement) bool {
	for _, a := range se.Attr {
		if _, syn := syntaxAttr(a); !syn {
			return true
		}
	}
	return false
}

// property reads a property element of subj.
func (r *RDFXMLReader) property(se xml.StartElement, f *rxFrame, subj Term, li *int) {
	x := r.x
	f.subj = subj
	pred, ok := r.name(se.Name)
	if se.Name.Space == RDF && se.Name.Local == "li" {
		*li++
		pred, ok = Term{Kind: IRI, Value: RDF + "_" + strconv.Itoa(*li)}, true
	}
	if !ok {
		f.kind = rxSkip
		x.res.Dropped++
		return
	}
	f.pred = pred
	var obj Term
	parseType := ""
	for _, a := range se.Attr {
		name, _ := syntaxAttr(a)
		switch name {
		case "resource":
			obj, _ = r.iri(a.Value, f.base)
			if obj.Kind == 0 {
				r.malformed()
			}
		case "nodeID":
			obj = r.blank(a.Value)
		case "datatype":
			if t, ok := r.iri(a.Value, f.base); ok {
				f.datatype = t.Value
			}
		case "parseType":
			parseType = a.Value
		}
	}
	switch {
	case parseType == "Resource":
		f.kind, f.obj = rxPropObj, x.blank()
		x.emit(subj, pred, f.obj)
	case parseType != "":
		f.kind = rxSkip // Literal, Collection and others
		x.res.Dropped++
	case obj.Kind != 0 || hasPropAttrs(se):
		if obj.Kind == 0 {
			obj = x.blank()
		}
		x.emit(subj, pred, obj)
		r.propAttrs(se, obj, f)
		f.kind = rxPropObj // an empty property element: no content expected
	default:
		f.kind = rxProp
	}
}

// name returns the IRI of an element or attribute name: its namespace IRI
// and local name. An undeclared prefix leaves no IRI.
func (r *RDFXMLReader) name(n xml.Name) (Term, bool) {
	if !strings.Contains(n.Space, ":") || n.Local == "" {
		return Term{}, false
	}
	return r.x.iri(n.Space + n.Local)
}

// hasDotSegment reports whether a path has a "." or ".." segment.
func hasDotSegment(p string) bool {
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// qualify returns the attributes of an element of the RDF namespace with
// the unqualified about, ID, resource, nodeID, parseType and datatype read
// as rdf: ones, as RDF Model and Syntax (1999) wrote them
// (<rdf:Property ID="comment">, in the RDF and RDF Schema namespace
// documents); RDF/XML parsers such as Raptor still accept them.
func qualify(attrs []xml.Attr) []xml.Attr {
	var out []xml.Attr
	for i, a := range attrs {
		if a.Name.Space != "" {
			continue
		}
		switch a.Name.Local {
		case "about", "ID", "resource", "nodeID", "parseType", "datatype":
			if out == nil {
				out = slices.Clone(attrs)
			}
			out[i].Name.Space = RDF
		}
	}
	if out == nil {
		return attrs
	}
	return out
}

// iri resolves ref against base; an empty ref (rdf:about="", the
// document itself) is the base without its fragment.
func (r *RDFXMLReader) iri(ref string, base *url.URL) (Term, bool) {
	if strings.TrimSpace(ref) == "" && base != nil {
		u := *base
		u.Fragment, u.RawFragment = "", ""
		ref = u.String()
	} else if strings.Contains(ref, "/.") {
		// RFC 3986 removes the dot segments of an absolute reference's
		// path too (&corp;../a, with an entity ending in a folder).
		if u, err := url.Parse(strings.TrimSpace(ref)); err == nil && u.IsAbs() && u.Opaque == "" && hasDotSegment(u.Path) {
			ref = u.ResolveReference(&url.URL{}).String()
		}
	}
	saved := r.x.base
	r.x.base = base
	t, ok := r.x.iri(ref)
	r.x.base = saved
	return t, ok
}

func (r *RDFXMLReader) blank(label string) Term {
	t, ok := r.blanks[label]
	if !ok {
		t = r.x.blank()
		if len(r.blanks) < r.x.lim.Statements {
			r.blanks[label] = t
		}
	}
	return t
}

// Bounds of the entities a document's DOCTYPE may declare (Entities).
const (
	maxEntities     = 64
	maxEntityLength = 1024 // bytes of an entity's value, after expansion
)

// Entities returns the general entities an XML DOCTYPE directive declares
// in its internal subset (<!ENTITY rdf "http://…#">), with references to
// entities declared before them expanded, or nil if it declares none.
// RDF/XML documents (OWL ontologies, RDF Schemas) write namespaces and
// datatypes as &rdf; and &xsd;; a decoder given these entities (with
// encoding/xml's HTMLEntity) reads them as their authors meant. Values
// are not parsed as markup and not expanded again, so no entity grows
// beyond maxEntityLength bytes.
func Entities(d xml.Directive) map[string]string {
	s := string(d)
	if !strings.HasPrefix(s, "DOCTYPE") {
		return nil
	}
	var out map[string]string
	for len(out) < maxEntities {
		i := strings.Index(s, "<!ENTITY")
		if i < 0 {
			break
		}
		s = strings.TrimLeft(s[i+len("<!ENTITY"):], " \t\r\n")
		if strings.HasPrefix(s, "%") {
			continue // a parameter entity
		}
		end := strings.IndexAny(s, " \t\r\n")
		if end <= 0 {
			break
		}
		name := s[:end]
		s = strings.TrimLeft(s[end:], " \t\r\n")
		if s == "" || (s[0] != '"' && s[0] != '\'') {
			continue // SYSTEM or PUBLIC: an external entity, not read
		}
		q := s[0]
		end = strings.IndexByte(s[1:], q)
		if end < 0 {
			break
		}
		v := s[1 : 1+end]
		s = s[end+2:]
		if strings.Contains(v, "&") {
			for k, e := range out {
				v = strings.ReplaceAll(v, "&"+k+";", e)
			}
		}
		if len(v) > maxEntityLength {
			continue
		}
		if _, ok := out[name]; ok {
			continue // the first declaration binds
		}
		if out == nil {
			out = map[string]string{}
		}
		out[name] = v
	}
	return out
}
