package structured

import (
	"regexp"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// Microdata reads the microdata items of an HTML document, as W3C's
// Microdata to RDF (2nd edition) maps them: an item's subject is its
// itemid or a blank node, its itemtypes are rdf:type, a property name that
// is not an absolute IRI is taken in the vocabulary of the item's first
// type (up to its last '#' or '/'); a property's value is a nested item,
// an IRI (href, src, data) or a literal (content, value, datetime with
// its XSD type, text), in the element's language. itemref is followed
// once per item; cycles end there.
func (x *Extractor) Microdata(root *html.Node) { x.microdata(x.scan(root)) }

func (x *Extractor) microdata(sc *scan) {
	if len(sc.tops) == 0 {
		return
	}
	m := &microdata{x: x, ids: make(map[string]*html.Node, len(sc.ids)), done: map[*html.Node]Term{}}
	for _, n := range sc.ids {
		if id := attr(n, "id"); id != "" {
			if _, ok := m.ids[id]; !ok {
				m.ids[id] = n
			}
		}
	}
	for _, n := range sc.tops {
		if x.full {
			return
		}
		m.item(n, 0)
	}
}

// scan is what one walk over a document finds for the extractors.
type scan struct {
	root    *html.Node
	scripts []*html.Node // <script type="application/ld+json">
	tops    []*html.Node // top-level microdata items
	ids     []*html.Node // elements with an id, for itemref
	rdfa    bool         // an element has property or typeof
}

func (x *Extractor) scan(root *html.Node) *scan {
	sc := &scan{root: root}
	walk(root, x.lim.Depth*8, func(n *html.Node) {
		for _, a := range n.Attr {
			if a.Namespace != "" {
				continue
			}
			switch a.Key {
			case "id":
				sc.ids = append(sc.ids, n)
			case "itemscope":
				// An item with itemprop but no item around it is read as
				// top-level: pages write itemprop="mainContentOfPage" on
				// their Article, meaning the page's implicit WebPage.
				if !hasAttr(n, "itemprop") || !inItem(n) {
					sc.tops = append(sc.tops, n)
				}
			case "property", "typeof":
				sc.rdfa = true
			case "type":
				mt, _, _ := strings.Cut(a.Val, ";")
				if n.DataAtom == atom.Script && strings.EqualFold(strings.TrimSpace(mt), "application/ld+json") {
					sc.scripts = append(sc.scripts, n)
				}
			}
		}
	})
	return sc
}

type microdata struct {
	x    *Extractor
	ids  map[string]*html.Node
	done map[*html.Node]Term // items already given a subject
}

// item emits the statements of the item at n and returns its subject.
func (m *microdata) item(n *html.Node, depth int) Term {
	if s, ok := m.done[n]; ok {
		return s
	}
	x := m.x
	var subj Term
	if id := attr(n, "itemid"); id != "" {
		if t, ok := x.iri(id); ok {
			subj = t
		}
	}
	if subj.Kind == 0 {
		subj = x.blank()
	}
	m.done[n] = subj
	if depth == 0 && !x.source() {
		return subj
	}
	if depth > x.lim.Depth {
		x.malformed()
		return subj
	}
	vocab := ""
	for i, t := range strings.Fields(attr(n, "itemtype")) {
		ti, ok := x.iri(t)
		if !ok || !strings.Contains(t, ":") {
			continue // itemtype must be absolute
		}
		x.emit(subj, Term{Kind: IRI, Value: RDFType}, ti)
		if i == 0 || vocab == "" {
			vocab = vocabOf(ti.Value)
		}
	}
	for _, p := range m.props(n) {
		if x.full {
			break
		}
		obj, ok := m.value(p, depth)
		if !ok {
			continue
		}
		for _, name := range strings.Fields(attr(p, "itemprop")) {
			pred, ok := m.predicate(name, vocab)
			if !ok {
				x.res.Dropped++
				continue
			}
			x.emit(subj, pred, obj)
		}
	}
	return subj
}

// vocabOf returns the vocabulary of a type IRI: up to and including its
// last '#', or else its last '/'.
func vocabOf(t string) string {
	if i := strings.LastIndexByte(t, '#'); i >= 0 {
		return t[:i+1]
	}
	if i := strings.LastIndexByte(t, '/'); i >= 0 {
		return t[:i+1]
	}
	return ""
}

func (m *microdata) predicate(name, vocab string) (Term, bool) {
	if strings.Contains(name, ":") {
		return m.x.iri(name)
	}
	if vocab == "" {
		return Term{}, false
	}
	return m.x.iri(vocab + name)
}

// props returns the property elements of the item at n: its descendants
// and those of the elements its itemref names, not inside nested items,
// in tree order of each root.
func (m *microdata) props(n *html.Node) []*html.Node {
	var out []*html.Node
	seen := map[*html.Node]bool{n: true}
	var rec func(c *html.Node, depth int)
	rec = func(c *html.Node, depth int) {
		if depth > m.x.lim.Depth*8 || len(out) > m.x.lim.Statements {
			return
		}
		for ; c != nil; c = c.NextSibling {
			if c.Type != html.ElementNode || seen[c] {
				continue
			}
			seen[c] = true
			if hasAttr(c, "itemprop") {
				out = append(out, c)
			}
			if !hasAttr(c, "itemscope") {
				rec(c.FirstChild, depth+1)
			}
		}
	}
	rec(n.FirstChild, 0)
	for _, id := range strings.Fields(attr(n, "itemref")) {
		r, ok := m.ids[id]
		if !ok || seen[r] {
			continue
		}
		seen[r] = true
		if hasAttr(r, "itemprop") {
			out = append(out, r)
		}
		if !hasAttr(r, "itemscope") {
			rec(r.FirstChild, 0)
		}
	}
	return out
}

// value returns a property element's value.
func (m *microdata) value(p *html.Node, depth int) (Term, bool) {
	x := m.x
	if hasAttr(p, "itemscope") {
		// An item reached again (a cycle, or two itemrefs) gives its
		// subject; its statements were written once.
		return m.item(p, depth+1), true
	}
	lang := langOf(p)
	switch p.DataAtom {
	case atom.Meta:
		return x.literal(attr(p, "content"), "", lang), true
	case atom.Audio, atom.Embed, atom.Iframe, atom.Img, atom.Source, atom.Track, atom.Video:
		return x.iri(attr(p, "src"))
	case atom.A, atom.Area, atom.Link:
		return x.iri(attr(p, "href"))
	case atom.Object:
		return x.iri(attr(p, "data"))
	case atom.Data, atom.Meter:
		return x.literal(attr(p, "value"), "", ""), true
	case atom.Time:
		v := strings.TrimSpace(attr(p, "datetime"))
		if !hasAttr(p, "datetime") {
			v = strings.TrimSpace(textContent(p, x.lim.Literal))
		}
		return x.literal(v, dateType(v), ""), true
	}
	return x.literal(strings.TrimSpace(textContent(p, x.lim.Literal)), "", lang), true
}

// Lexical forms of the XSD date and time types, as Microdata to RDF
// types a <time> value.
var dateTypes = []struct {
	re *regexp.Regexp
	dt string
}{
	{regexp.MustCompile(`^-?\d{4,}-\d{2}-\d{2}(Z|[+-]\d{2}:\d{2})?$`), XSD + "date"},
	{regexp.MustCompile(`^\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?$`), XSD + "time"},
	{regexp.MustCompile(`^-?\d{4,}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$`), XSD + "dateTime"},
	{regexp.MustCompile(`^-?P(\d+Y)?(\d+M)?(\d+D)?(T(\d+H)?(\d+M)?(\d+(\.\d+)?S)?)?$`), XSD + "duration"},
	{regexp.MustCompile(`^-?\d{4,}-\d{2}$`), XSD + "gYearMonth"},
	{regexp.MustCompile(`^-?\d{4,}$`), XSD + "gYear"},
}

func dateType(v string) string {
	if v == "" || len(v) > 64 || v == "P" || strings.HasSuffix(v, "T") {
		return ""
	}
	for _, d := range dateTypes {
		if d.re.MatchString(v) {
			return d.dt
		}
	}
	return ""
}

// inItem reports whether an ancestor of n is an item (has itemscope).
func inItem(n *html.Node) bool {
	for p, depth := n.Parent, 0; p != nil && depth < 1024; p, depth = p.Parent, depth+1 {
		if p.Type == html.ElementNode && hasAttr(p, "itemscope") {
			return true
		}
	}
	return false
}

// ---- HTML helpers ----

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Namespace == "" && a.Key == key {
			return a.Val
		}
	}
	return ""
}

func hasAttr(n *html.Node, key string) bool {
	for _, a := range n.Attr {
		if a.Namespace == "" && a.Key == key {
			return true
		}
	}
	return false
}

// langOf returns the language of n: its own lang attribute or its
// nearest ancestor's.
func langOf(n *html.Node) string {
	for depth := 0; n != nil && depth < 1024; n, depth = n.Parent, depth+1 {
		if n.Type != html.ElementNode {
			continue
		}
		for _, a := range n.Attr {
			if (a.Namespace == "" && a.Key == "lang") || a.Key == "xml:lang" {
				return a.Val
			}
		}
	}
	return ""
}

// textContent returns up to max bytes (and a little more) of the text
// inside n, scripts and styles included as the DOM's textContent does.
func textContent(n *html.Node, max int) string {
	var b strings.Builder
	var rec func(*html.Node, int)
	rec = func(n *html.Node, depth int) {
		if b.Len() > max || depth > 256 {
			return
		}
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
			return
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			rec(c, depth+1)
		}
	}
	rec(n, 0)
	return b.String()
}

// walk calls f on every element under root, in tree order, to maxDepth.
func walk(root *html.Node, maxDepth int, f func(*html.Node)) {
	var rec func(n *html.Node, depth int)
	rec = func(n *html.Node, depth int) {
		if depth > maxDepth {
			return
		}
		if n.Type == html.ElementNode {
			f(n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			rec(c, depth+1)
		}
	}
	rec(root, 0)
}
