package structured

import (
	"encoding/xml"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
	"golang.org/x/net/html/charset"
)

const page = "http://example.com/page.html"

// fromHTML extracts the statements of an HTML document.
func fromHTML(t testing.TB, doc string, lim Limits) Result {
	t.Helper()
	root, err := html.Parse(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	x := New(page, lim)
	x.HTML(root)
	return x.Result()
}

// fromRDFXML extracts the statements of an RDF/XML document, decoded as
// crawl/internal/parse decodes XML.
func fromRDFXML(doc string, lim Limits) Result {
	x := New(page, lim)
	feedRDFXML(x, doc)
	return x.Result()
}

// feedRDFXML decodes an RDF/XML document as crawl/internal/parse does
// (HTML's entities and those of its DOCTYPE known) into x.
func feedRDFXML(x *Extractor, doc string) {
	r := x.RDFXML()
	d := xml.NewDecoder(strings.NewReader(doc))
	d.Strict = false
	d.Entity = xml.HTMLEntity
	d.CharsetReader = charset.NewReaderLabel
	for range 1 << 16 {
		tok, err := d.Token()
		if err != nil {
			break
		}
		r.Token(tok)
		if dir, ok := tok.(xml.Directive); ok {
			if ents := Entities(dir); ents != nil {
				m := maps.Clone(xml.HTMLEntity)
				maps.Copy(m, ents)
				d.Entity = m
			}
		}
	}
	r.Close()
}

// lines formats statements as N-Triples lines, blank node labels kept.
func lines(stmts []Statement) []string {
	var out []string
	for _, s := range stmts {
		out = append(out, s.String()+" .")
	}
	return out
}

var blankRE = regexp.MustCompile(`_:[A-Za-z0-9]+`)

// anonymous replaces blank node labels by _:?, so that statements of two
// processors compare whatever their labels.
func anonymous(ls []string) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = blankRE.ReplaceAllString(l, "_:?")
	}
	return out
}

// expected reads N-Triples lines, schema: and the others abbreviated.
func expected(nt string) []string {
	r := strings.NewReplacer("schema:", SchemaOrg, "rdf:", RDF, "xsd:", XSD, "rss:", RSS, "dc:", DC)
	var out []string
	for _, l := range strings.Split(nt, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, r.Replace(l))
		}
	}
	return out
}

// prCase is a page written from a W3C specification's example with the
// statements a conforming processor gives for it.
type prCase struct {
	name   string
	format string // html or rdfxml
	doc    string
	want   string // N-Triples, abbreviated; blank labels are ignored
}

var prCases = []prCase{
	{"jsonld/spec-example-inline-context", "html", `<script type="application/ld+json">
{"@context": {"name": "http://schema.org/name", "image": {"@id": "http://schema.org/image", "@type": "@id"},
  "homepage": {"@id": "http://schema.org/url", "@type": "@id"}},
 "name": "Manu Sporny", "homepage": "http://manu.sporny.org/", "image": "http://manu.sporny.org/images/manu.png"}
</script>`, `
_:b0 <schema:name> "Manu Sporny" .
_:b0 <schema:url> <http://manu.sporny.org/> .
_:b0 <schema:image> <http://manu.sporny.org/images/manu.png> .`},
	{"jsonld/schema-org-event", "html", `<script type="application/ld+json">
{"@context": "https://schema.org", "@type": "Event", "name": "Jazz Night",
 "startDate": "2025-07-21T19:00", "url": "/events/jazz", "sameAs": ["https://en.wikipedia.org/wiki/Jazz"],
 "location": {"@type": "Place", "name": "Blue Hall", "address": "1 Main St"},
 "offers": {"@type": "Offer", "price": 30, "priceCurrency": "EUR", "availability": "https://schema.org/InStock"}}
</script>`, `
_:b0 <rdf:type> <schema:Event> .
_:b0 <schema:name> "Jazz Night" .
_:b0 <schema:startDate> "2025-07-21T19:00" .
_:b0 <schema:url> <http://example.com/events/jazz> .
_:b0 <schema:sameAs> <https://en.wikipedia.org/wiki/Jazz> .
_:b0 <schema:location> _:b1 .
_:b1 <rdf:type> <schema:Place> .
_:b1 <schema:name> "Blue Hall" .
_:b1 <schema:address> "1 Main St" .
_:b0 <schema:offers> _:b2 .
_:b2 <rdf:type> <schema:Offer> .
_:b2 <schema:price> "30"^^<xsd:integer> .
_:b2 <schema:priceCurrency> "EUR" .
_:b2 <schema:availability> <schema:InStock> .`},
	{"jsonld/graph-values", "html", `<script type="application/ld+json">
{"@context": {"@vocab": "http://schema.org/", "xsd": "http://www.w3.org/2001/XMLSchema#"},
 "@graph": [
  {"@id": "http://example.com/#recipe", "@type": "Recipe", "name": {"@value": "Tarte Tatin", "@language": "fr"},
   "datePublished": {"@value": "2020-01-01", "@type": "xsd:date"}, "recipeYield": 8, "ratingValue": 4.5, "isFamilyFriendly": true,
   "author": {"@id": "http://example.com/#chef"}},
  {"@id": "http://example.com/#chef", "@type": "Person", "name": "Chef"}]}
</script>`, `
<http://example.com/#recipe> <rdf:type> <schema:Recipe> .
<http://example.com/#recipe> <schema:name> "Tarte Tatin"@fr .
<http://example.com/#recipe> <schema:datePublished> "2020-01-01"^^<xsd:date> .
<http://example.com/#recipe> <schema:recipeYield> "8"^^<xsd:integer> .
<http://example.com/#recipe> <schema:ratingValue> "4.5E0"^^<xsd:double> .
<http://example.com/#recipe> <schema:isFamilyFriendly> "true"^^<xsd:boolean> .
<http://example.com/#recipe> <schema:author> <http://example.com/#chef> .
<http://example.com/#chef> <rdf:type> <schema:Person> .
<http://example.com/#chef> <schema:name> "Chef" .`},
	{"jsonld/http-schema-org-array", "html", `<script type="application/ld+json">
[{"@context": "http://schema.org/", "@type": "Organization", "@id": "https://acme.example/", "name": "ACME", "logo": "https://acme.example/logo.png"},
 {"@context": "http://schema.org", "@type": "WebSite", "url": "https://acme.example/"}]
</script>`, `
<https://acme.example/> <rdf:type> <schema:Organization> .
<https://acme.example/> <schema:name> "ACME" .
<https://acme.example/> <schema:logo> <https://acme.example/logo.png> .
_:b0 <rdf:type> <schema:WebSite> .
_:b0 <schema:url> <https://acme.example/> .`},
	{"microdata/spec-person", "html", `<div itemscope itemtype="http://schema.org/Person" itemid="http://example.com/#amanda" lang="en">
 <span itemprop="name">Amanda</span> <a itemprop="url" href="/amanda">home</a> <img itemprop="image" src="a.png" alt="">
 <time itemprop="birthDate" datetime="1990-02-03">Feb 3</time>
 <div itemprop="address" itemscope itemtype="http://schema.org/PostalAddress"><span itemprop="addressLocality" lang="fr">Paris</span></div>
 <meta itemprop="gender" content="female"></div>`, `
<http://example.com/#amanda> <rdf:type> <schema:Person> .
<http://example.com/#amanda> <schema:name> "Amanda"@en .
<http://example.com/#amanda> <schema:url> <http://example.com/amanda> .
<http://example.com/#amanda> <schema:image> <http://example.com/a.png> .
<http://example.com/#amanda> <schema:birthDate> "1990-02-03"^^<xsd:date> .
<http://example.com/#amanda> <schema:address> _:b0 .
_:b0 <rdf:type> <schema:PostalAddress> .
_:b0 <schema:addressLocality> "Paris"@fr .
<http://example.com/#amanda> <schema:gender> "female"@en .`},
	{"microdata/spec-itemref", "html", `<div itemscope itemtype="http://schema.org/Person" id="amanda" itemref="a b"></div>
<p id="a">Name: <span itemprop="name">Amanda</span></p>
<div id="b" itemprop="memberOf" itemscope itemtype="http://schema.org/MusicGroup" itemref="c"></div>
<div id="c"><p>Band: <span itemprop="name">Jazz Band</span></p><p>Size: <span itemprop="numberOfEmployees">12</span> players</p></div>`, `
_:b0 <rdf:type> <schema:Person> .
_:b0 <schema:name> "Amanda" .
_:b0 <schema:memberOf> _:b1 .
_:b1 <rdf:type> <schema:MusicGroup> .
_:b1 <schema:name> "Jazz Band" .
_:b1 <schema:numberOfEmployees> "12" .`},
	{"microdata/product-offer", "html", `<div itemscope itemtype="https://schema.org/Product">
 <span itemprop="name">Kenmore White 17" Microwave</span>
 <div itemprop="aggregateRating" itemscope itemtype="https://schema.org/AggregateRating">Rated <span itemprop="ratingValue">3.5</span>/5</div>
 <div itemprop="offers" itemscope itemtype="https://schema.org/Offer"><span itemprop="price">55.00</span>
  <link itemprop="availability" href="http://schema.org/InStock">In stock</div></div>`, `
_:b0 <rdf:type> <schema:Product> .
_:b0 <schema:name> "Kenmore White 17\" Microwave" .
_:b0 <schema:aggregateRating> _:b1 .
_:b1 <rdf:type> <schema:AggregateRating> .
_:b1 <schema:ratingValue> "3.5" .
_:b0 <schema:offers> _:b2 .
_:b2 <rdf:type> <schema:Offer> .
_:b2 <schema:price> "55.00" .
_:b2 <schema:availability> <schema:InStock> .`},
	{"rdfa/lite-person", "html", `<p vocab="http://schema.org/" typeof="Person">
My name is <span property="name">Manu Sporny</span> and you can give me a ring via <span property="telephone">1-800-555-0199</span>
or visit <a property="url" href="http://manu.sporny.org/">my homepage</a>.</p>`, `
_:b0 <rdf:type> <schema:Person> .
_:b0 <schema:name> "Manu Sporny" .
_:b0 <schema:telephone> "1-800-555-0199" .
_:b0 <schema:url> <http://manu.sporny.org/> .`},
	{"rdfa/lite-resource-prefix", "html", `<div vocab="http://schema.org/" prefix="ov: http://open.vocab.org/terms/" typeof="Person" resource="#manu">
<span property="name">Manu Sporny</span> likes <span property="ov:preferredAnimal">Liger</span>
<span property="knows" typeof="Person" resource="#gregg"><span property="name">Gregg Kellogg</span></span></div>`, `
<http://example.com/page.html#manu> <rdf:type> <schema:Person> .
<http://example.com/page.html#manu> <schema:name> "Manu Sporny" .
<http://example.com/page.html#manu> <http://open.vocab.org/terms/preferredAnimal> "Liger" .
<http://example.com/page.html#manu> <schema:knows> <http://example.com/page.html#gregg> .
<http://example.com/page.html#gregg> <rdf:type> <schema:Person> .
<http://example.com/page.html#gregg> <schema:name> "Gregg Kellogg" .`},
	{"rdfa/open-graph", "html", `<html prefix="og: https://ogp.me/ns#"><head><title>The Rock</title>
<meta property="og:title" content="The Rock"><meta property="og:type" content="video.movie">
<meta property="og:url" content="https://www.imdb.com/title/tt0117500/"><meta name="description" content="not RDFa">
</head><body><p>text</p></body></html>`, `
<http://example.com/page.html> <https://ogp.me/ns#title> "The Rock" .
<http://example.com/page.html> <https://ogp.me/ns#type> "video.movie" .
<http://example.com/page.html> <https://ogp.me/ns#url> "https://www.imdb.com/title/tt0117500/" .`},
	{"rdfxml/spec-example", "rdfxml", `<?xml version="1.0"?>
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:ex="http://example.org/stuff/1.0/">
  <rdf:Description rdf:about="http://www.w3.org/TR/rdf-syntax-grammar" dc:title="RDF1.1 XML Syntax">
    <ex:editor>
      <rdf:Description ex:fullName="Dave Beckett">
        <ex:homePage rdf:resource="http://purl.org/net/dajobe/" />
      </rdf:Description>
    </ex:editor>
  </rdf:Description>
</rdf:RDF>`, `
<http://www.w3.org/TR/rdf-syntax-grammar> <dc:title> "RDF1.1 XML Syntax" .
<http://www.w3.org/TR/rdf-syntax-grammar> <http://example.org/stuff/1.0/editor> _:b1 .
_:b1 <http://example.org/stuff/1.0/fullName> "Dave Beckett" .
_:b1 <http://example.org/stuff/1.0/homePage> <http://purl.org/net/dajobe/> .`},
	{"rdfxml/spec-typed-lang-datatype-li-resource", "rdfxml", `<?xml version="1.0"?>
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:dc="http://purl.org/dc/elements/1.1/"
  xmlns:ex="http://example.org/stuff/1.0/" xml:base="http://example.org/here/">
  <ex:Document rdf:ID="doc" xml:lang="en">
    <dc:title>RDF 1.1 XML Syntax</dc:title>
    <dc:title xml:lang="de">RDF 1.1 XML Syntax auf Deutsch</dc:title>
    <ex:size rdf:datatype="http://www.w3.org/2001/XMLSchema#int">123</ex:size>
    <ex:editor rdf:parseType="Resource"><ex:fullName>Dave Beckett</ex:fullName></ex:editor>
  </ex:Document>
  <rdf:Seq rdf:about="favourites"><rdf:li rdf:resource="http://example.org/banana"/><rdf:li rdf:resource="apple"/></rdf:Seq>
  <rdf:Description rdf:nodeID="abc"><ex:property>value</ex:property></rdf:Description>
</rdf:RDF>`, `
<http://example.org/here/#doc> <rdf:type> <http://example.org/stuff/1.0/Document> .
<http://example.org/here/#doc> <dc:title> "RDF 1.1 XML Syntax"@en .
<http://example.org/here/#doc> <dc:title> "RDF 1.1 XML Syntax auf Deutsch"@de .
<http://example.org/here/#doc> <http://example.org/stuff/1.0/size> "123"^^<xsd:int> .
<http://example.org/here/#doc> <http://example.org/stuff/1.0/editor> _:b0 .
_:b0 <http://example.org/stuff/1.0/fullName> "Dave Beckett"@en .
<http://example.org/here/favourites> <rdf:type> <rdf:Seq> .
<http://example.org/here/favourites> <rdf:_1> <http://example.org/banana> .
<http://example.org/here/favourites> <rdf:_2> <http://example.org/here/apple> .
_:b1 <http://example.org/stuff/1.0/property> "value" .`},
	{"rdfxml/rss-1.0", "rdfxml", `<?xml version="1.0"?>
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns="http://purl.org/rss/1.0/">
 <channel rdf:about="http://www.xml.com/xml/news.rss">
  <title>XML.com</title><link>http://xml.com/pub</link>
  <items><rdf:Seq><rdf:li resource="http://xml.com/pub/2000/08/09/xslt/xslt.html" /></rdf:Seq></items>
 </channel>
 <item rdf:about="http://xml.com/pub/2000/08/09/xslt/xslt.html"><title>Processing Inclusions with XSLT</title>
  <link>http://xml.com/pub/2000/08/09/xslt/xslt.html</link></item>
</rdf:RDF>`, `
<http://www.xml.com/xml/news.rss> <rdf:type> <rss:channel> .
<http://www.xml.com/xml/news.rss> <rss:title> "XML.com" .
<http://www.xml.com/xml/news.rss> <rss:link> "http://xml.com/pub" .
<http://www.xml.com/xml/news.rss> <rss:items> _:b0 .
_:b0 <rdf:type> <rdf:Seq> .
_:b0 <rdf:_1> <http://xml.com/pub/2000/08/09/xslt/xslt.html> .
<http://xml.com/pub/2000/08/09/xslt/xslt.html> <rdf:type> <rss:item> .
<http://xml.com/pub/2000/08/09/xslt/xslt.html> <rss:title> "Processing Inclusions with XSLT" .
<http://xml.com/pub/2000/08/09/xslt/xslt.html> <rss:link> "http://xml.com/pub/2000/08/09/xslt/xslt.html" .`},
}

// TestPrecisionRecall extracts every case and compares its statements
// with those of a conforming processor (blank node labels aside): the
// figures docs/structured-data.md reports.
func TestPrecisionRecall(t *testing.T) {
	var tp, got, want int
	for _, c := range prCases {
		var res Result
		if c.format == "rdfxml" {
			res = fromRDFXML(c.doc, Limits{})
		} else {
			res = fromHTML(t, c.doc, Limits{})
		}
		g, w := anonymous(lines(res.Statements)), anonymous(expected(c.want))
		left := slices.Clone(w)
		hit := 0
		for _, s := range g {
			if k := slices.Index(left, s); k >= 0 {
				left = slices.Delete(left, k, k+1)
				hit++
			} else {
				t.Errorf("%s: unexpected %s", c.name, s)
			}
		}
		for _, s := range left {
			t.Errorf("%s: missing %s", c.name, s)
		}
		if res.Malformed != 0 {
			t.Errorf("%s: %d malformed", c.name, res.Malformed)
		}
		t.Logf("%-45s expected %2d, extracted %2d, correct %2d", c.name, len(w), len(g), hit)
		tp, got, want = tp+hit, got+len(g), want+len(w)
	}
	p, r := float64(tp)/float64(got), float64(tp)/float64(want)
	t.Logf("%d cases: %d statements expected, %d extracted, %d correct: precision %.3f, recall %.3f", len(prCases), want, got, tp, p, r)
	if p < 1 || r < 1 {
		t.Errorf("precision %.3f, recall %.3f; want 1, 1", p, r)
	}
}

func TestBlankLabels(t *testing.T) {
	doc := `<script type="application/ld+json">{"@context":"https://schema.org","@type":"Thing","subjectOf":{"@type":"Thing"}}</script>
<script type="application/ld+json">{"@context":"https://schema.org","@type":"Thing"}</script>
<div itemscope itemtype="https://schema.org/Thing"></div>`
	got := lines(fromHTML(t, doc, Limits{}).Statements)
	want := expected(`
_:b0 <rdf:type> <schema:Thing> .
_:b0 <schema:subjectOf> _:b1 .
_:b1 <rdf:type> <schema:Thing> .
_:b2 <rdf:type> <schema:Thing> .
_:b3 <rdf:type> <schema:Thing> .`)
	if !slices.Equal(got, want) {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestMalformed: bad input is skipped and counted, and what is good on
// the same page is kept.
func TestMalformed(t *testing.T) {
	good := `<script type="application/ld+json">{"@context":"https://schema.org","@type":"Thing","name":"ok"}</script>`
	deep := strings.Repeat("[", 40) + strings.Repeat("]", 40)
	tests := []struct {
		name      string
		block     string
		malformed int
	}{
		{"bad json", `{"@context": "https://schema.org", "name": }`, 1},
		{"trailing comma", `{"@context": "https://schema.org", "name": "x",}`, 1},
		{"remote context", `{"@context": "https://evil.example/context.jsonld", "name": "x"}`, 1},
		{"import", `{"@context": {"@import": "https://evil.example/c.jsonld"}, "name": "x"}`, 1},
		{"string document", `"https://evil.example/doc.jsonld"`, 1},
		{"too deep", deep, 1},
		{"too large", `{"@context":"https://schema.org","name":"` + strings.Repeat("x", 200<<10) + `"}`, 1},
		{"no context", `{"@type": "Thing", "name": "x"}`, 0},
		{"commented", `<!-- {"@context":"https://schema.org","@type":"Thing"} -->`, 0},
		{"bad @id", `{"@context":"https://schema.org","@id":"_:x y","name":"x"}`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := `<script type="application/ld+json">` + tt.block + `</script>` + good
			res := fromHTML(t, doc, Limits{})
			if res.Malformed != tt.malformed {
				t.Errorf("malformed %d, want %d", res.Malformed, tt.malformed)
			}
			if !slices.Contains(lines(res.Statements), `_:`+lastBlank(res)+` <`+SchemaOrg+`name> "ok" .`) {
				t.Errorf("the good block was lost: %q", lines(res.Statements))
			}
		})
	}
}

func lastBlank(r Result) string {
	s := r.Statements[len(r.Statements)-1].S
	return s.Value
}

func TestLimits(t *testing.T) {
	var b strings.Builder
	for range 50 {
		b.WriteString(`<script type="application/ld+json">{"@context":"https://schema.org","@type":"Thing","name":"` + strings.Repeat("é", 100) + `"}</script>`)
	}
	tests := []struct {
		name             string
		lim              Limits
		stmts, maxLit    int
		dropped, sources int
	}{
		{"statements", Limits{Statements: 25}, 25, 200, 38, 13},
		{"literal", Limits{Literal: 11}, 100, 11, 0, 50},
		{"blocks", Limits{Blocks: 3}, 6, 200, 47, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := fromHTML(t, b.String(), tt.lim)
			if len(res.Statements) != tt.stmts || res.Dropped != tt.dropped || res.Sources != tt.sources {
				t.Errorf("%d statements, %d dropped, %d sources; want %d, %d, %d", len(res.Statements), res.Dropped, res.Sources, tt.stmts, tt.dropped, tt.sources)
			}
			for _, s := range res.Statements {
				if s.O.Kind == Literal && len(s.O.Value) > tt.maxLit {
					t.Fatalf("literal of %d bytes", len(s.O.Value))
				}
			}
		})
	}
}

// TestDuplicates checks that a page's statements are a set, as the W3C
// JSON-LD suite expects (toRdf tn02, e036): a statement given twice is
// kept once.
func TestDuplicates(t *testing.T) {
	doc := `<script type="application/ld+json">{"@context":{"notype":{"@id":"http://example.com/notype","@type":"@none"},
"xsd":"http://www.w3.org/2001/XMLSchema#"},"@id":"http://example.com/s","notype":[true,{"@value":true,"@type":"xsd:boolean"}]}</script>
<div itemscope itemtype="https://schema.org/Thing" itemid="http://example.com/t"><span itemprop="name">A</span><span itemprop="name">A</span></div>`
	res := fromHTML(t, doc, Limits{})
	want := expected(`<http://example.com/s> <http://example.com/notype> "true"^^<xsd:boolean> .
<http://example.com/t> <rdf:type> <schema:Thing> .
<http://example.com/t> <schema:name> "A" .`)
	if got := lines(res.Statements); !slices.Equal(got, want) || res.Dropped != 0 {
		t.Errorf("got %q (%d dropped), want %q", got, res.Dropped, want)
	}
}

// TestRealPageForms checks forms the real corpus showed (TestRealCorpus):
// prefixes declared with xmlns:NAME and a language given by xml:lang in
// RDFa, and an item with itemprop but no item around it in microdata.
func TestRealPageForms(t *testing.T) {
	tests := []struct{ name, doc, want string }{
		{"xmlns prefix, xml:lang", `<html xml:lang="en" xmlns:og="http://opengraphprotocol.org/schema/"><head>
<meta property="og:title" content="T"></head><body><p xmlns:og="http://ogp.me/ns#" lang="fr" property="og:description">D</p></body></html>`,
			`<http://example.com/page.html> <http://opengraphprotocol.org/schema/title> "T"@en .
<http://example.com/page.html> <http://ogp.me/ns#description> "D"@fr .`},
		{"itemprop without an item", `<article itemscope itemtype="http://schema.org/Article" itemprop="mainContentOfPage">
<h1 itemprop="headline">H</h1><span itemprop="author" itemscope itemtype="http://schema.org/Person"><span itemprop="name">N</span></span></article>`,
			`_:b0 <rdf:type> <schema:Article> .
_:b0 <schema:headline> "H" .
_:b1 <rdf:type> <schema:Person> .
_:b1 <schema:name> "N" .
_:b0 <schema:author> _:b1 .`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := lines(fromHTML(t, tt.doc, Limits{}).Statements)
			if want := expected(tt.want); !slices.Equal(got, want) {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// TestRDFXMLForms checks forms Raptor's tests and the W3C namespace
// documents showed (TestRDFXMLSuite): DOCTYPE entities, an empty
// rdf:about, dot segments of an absolute IRI and RDF M&S's unqualified ID.
func TestRDFXMLForms(t *testing.T) {
	doc := `<?xml version="1.0"?>
<!DOCTYPE rdf:RDF [<!ENTITY rdf "http://www.w3.org/1999/02/22-rdf-syntax-ns#"> <!ENTITY d "http://example.org/a/b/">]>
<rdf:RDF xmlns:rdf="&rdf;" xmlns:e="http://example.org/ns#">
<rdf:Description rdf:about=""><e:p rdf:resource="&d;../c/./x#frag"/></rdf:Description>
<rdf:Property ID="q"/>
</rdf:RDF>`
	got := lines(fromRDFXML(doc, Limits{}).Statements)
	want := expected(`<http://example.com/page.html> <http://example.org/ns#p> <http://example.org/a/c/x#frag> .
<http://example.com/page.html#q> <rdf:type> <rdf:Property> .`)
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRDFaHTMLRules checks rules of HTML+RDFa 1.1 that cases of the W3C
// RDFa 1.1 test suite (Raptor's tests/rdfa11 0214, 0256, 0275–0279,
// 0285) exercise.
func TestRDFaHTMLRules(t *testing.T) {
	tests := []struct{ name, doc, want string }{
		{"typeof on the root element types the document", `<html prefix="foaf: http://xmlns.com/foaf/0.1/" typeof="foaf:Document"><body></body></html>`,
			`<http://example.com/page.html> <rdf:type> <http://xmlns.com/foaf/0.1/Document> .`},
		{"xml:lang wins over lang", `<p property="dc:title" lang="hu" xml:lang="fr">chat</p>`,
			`<http://example.com/page.html> <http://purl.org/dc/terms/title> "chat"@fr .`},
		{"datetime wins over content, typed by its form", `<time property="dc:date" datetime="2012-03-18" content="not this">18 March</time>`,
			`<http://example.com/page.html> <http://purl.org/dc/terms/date> "2012-03-18"^^<xsd:date> .`},
		{"time text typed by its form", `<time property="dc:date">2012-03-18T00:00:00Z</time>`,
			`<http://example.com/page.html> <http://purl.org/dc/terms/date> "2012-03-18T00:00:00Z"^^<xsd:dateTime> .`},
		{"datetime of no date form: a plain literal", `<time property="dc:date" lang="en" datetime="D-Day">then</time>`,
			`<http://example.com/page.html> <http://purl.org/dc/terms/date> "D-Day"@en .`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := lines(fromHTML(t, tt.doc, Limits{}).Statements)
			if want := expected(tt.want); !slices.Equal(got, want) {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

func TestMicrodataCycle(t *testing.T) {
	doc := `<div itemscope itemtype="https://schema.org/Person" id="a" itemref="b">
<span itemprop="name">A</span></div>
<div id="b" itemprop="knows" itemscope itemtype="https://schema.org/Person" itemref="a b"><span itemprop="name">B</span></div>`
	res := fromHTML(t, doc, Limits{})
	if len(res.Statements) == 0 || len(res.Statements) > 10 {
		t.Fatalf("%d statements: %q", len(res.Statements), lines(res.Statements))
	}
}

func TestFeed(t *testing.T) {
	x := New("http://example.com/feed.xml", Limits{})
	w := x.Feed()
	w.Item(FeedItem{Link: "/a.html", Title: "A", Description: "about a", Date: time.Date(2024, 5, 6, 7, 8, 9, 0, time.FixedZone("x", 3600))})
	w.Item(FeedItem{Title: "no link"})
	w.Close("Feed", "http://example.com/")
	got := lines(x.Result().Statements)
	want := expected(`
<http://example.com/feed.xml> <rdf:type> <rss:channel> .
<http://example.com/feed.xml> <rss:items> _:b0 .
_:b0 <rdf:type> <rdf:Seq> .
_:b0 <rdf:_1> <http://example.com/a.html> .
<http://example.com/a.html> <rdf:type> <rss:item> .
<http://example.com/a.html> <rss:title> "A" .
<http://example.com/a.html> <rss:link> "http://example.com/a.html" .
<http://example.com/a.html> <rss:description> "about a" .
<http://example.com/a.html> <dc:date> "2024-05-06T06:08:09Z"^^<xsd:dateTime> .
_:b0 <rdf:_2> _:b1 .
_:b1 <rdf:type> <rss:item> .
_:b1 <rss:title> "no link" .
<http://example.com/feed.xml> <rss:title> "Feed" .
<http://example.com/feed.xml> <rss:link> "http://example.com/" .`)
	if !slices.Equal(got, want) {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestLinks(t *testing.T) {
	res := fromHTML(t, prCases[1].doc, Limits{})
	got := Links(res.Statements)
	slices.Sort(got)
	want := []string{"http://example.com/events/jazz", "https://en.wikipedia.org/wiki/Jazz"}
	if !slices.Equal(got, want) {
		t.Fatalf("links %q, want %q", got, want)
	}
}

func TestNormalizeIRI(t *testing.T) {
	for in, want := range map[string]string{
		"http://schema.org/Event":      SchemaOrg + "Event",
		"https://www.schema.org/name":  SchemaOrg + "name",
		"http://schema.org":            SchemaOrg,
		"http://schema.organic/x":      "http://schema.organic/x",
		"https://example.com/":         "https://example.com/",
		"http:":                        "http:",
		"http://www.schema.org/Recipe": SchemaOrg + "Recipe",
	} {
		if got := NormalizeIRI(in); got != want {
			t.Errorf("NormalizeIRI(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzHTML: no HTML page makes extraction panic, hang or break its
// limits or the normal form.
func FuzzHTML(f *testing.F) {
	for _, c := range prCases {
		if c.format == "html" {
			f.Add(c.doc)
		}
	}
	f.Add(`<script type="application/ld+json">{"@context":{"@vocab":"http://schema.org/","x":{"@id":"url","@type":"@id","@context":{"@vocab":"http://e/"}}},"x":{"y":[{"@list":[1,2]}]}}</script>`)
	f.Fuzz(func(t *testing.T, doc string) {
		res := fromHTML(t, doc, Limits{Statements: 200})
		checkResult(t, res, 200)
	})
}

// FuzzRDFXML: likewise for RDF/XML documents.
func FuzzRDFXML(f *testing.F) {
	for _, c := range prCases {
		if c.format == "rdfxml" {
			f.Add(c.doc)
		}
	}
	f.Fuzz(func(t *testing.T, doc string) {
		res := fromRDFXML(doc, Limits{Statements: 200})
		checkResult(t, res, 200)
	})
}

// FuzzJSONLD feeds a block straight to the JSON-LD processor.
func FuzzJSONLD(f *testing.F) {
	f.Add([]byte(`{"@context":"https://schema.org","@type":"Event","name":"x","url":"/y"}`))
	f.Add([]byte(`{"@context":{"@vocab":"http://schema.org/","@base":"http://b/"},"@graph":[{"@id":"a","@reverse":{"knows":{"@id":"b"}}}]}`))
	f.Add([]byte(`[{"@context":{"p":{"@id":"http://e/p","@container":"@list"}},"p":[[1,[2]],{"@value":"x","@language":"en"}]}]`))
	f.Add([]byte(`{"@context":{"@version":1.1,"p":{"@id":"http://e/p","@type":"@json"}},"p":{"a":[1,2]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		x := New(page, Limits{Statements: 200})
		x.JSONLD(b)
		checkResult(t, x.Result(), 200)
	})
}

func checkResult(t *testing.T, res Result, max int) {
	t.Helper()
	if len(res.Statements) > max {
		t.Fatalf("%d statements", len(res.Statements))
	}
	for _, s := range res.Statements {
		if s.S.Kind != IRI && s.S.Kind != Blank || s.P.Kind != IRI || s.O.Kind < IRI || s.O.Kind > Literal {
			t.Fatalf("bad statement %v", s)
		}
		for _, term := range []Term{s.S, s.P, s.O} {
			if term.Value == "" && term.Kind != Literal {
				t.Fatalf("empty term in %v", s)
			}
			if term.Kind == IRI && (NormalizeIRI(term.Value) != term.Value || len(term.Value) > DefaultLimits.IRI) {
				t.Fatalf("IRI not normal: %q", term.Value)
			}
		}
		if len(s.O.Value) > DefaultLimits.Literal && s.O.Kind == Literal {
			t.Fatalf("literal of %d bytes", len(s.O.Value))
		}
	}
}

// TestDeterministic: a page gives the same statements in the same order
// with the same labels every time (records and change digests depend on
// it; the JSON-LD processor's output follows Go's map order).
func TestDeterministic(t *testing.T) {
	for _, c := range prCases {
		if c.format != "html" {
			continue
		}
		first := lines(fromHTML(t, c.doc, Limits{}).Statements)
		for range 20 {
			if got := lines(fromHTML(t, c.doc, Limits{}).Statements); !slices.Equal(got, first) {
				t.Fatalf("%s: got\n%s\nthen\n%s", c.name, strings.Join(first, "\n"), strings.Join(got, "\n"))
			}
		}
	}
}
