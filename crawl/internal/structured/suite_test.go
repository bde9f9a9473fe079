package structured

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/piprate/json-gold/ld"
	xhtml "golang.org/x/net/html"
)

// jsonGoldTestdata returns the folder of the W3C JSON-LD 1.1 test suite
// that the json-gold module ships (ld/testdata), "" if the module's files
// cannot be found.
func jsonGoldTestdata(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/piprate/json-gold").Output()
	if err != nil {
		t.Logf("go list -m github.com/piprate/json-gold: %v", err)
		return ""
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "ld", "testdata")
	if _, err := os.Stat(filepath.Join(dir, "toRdf-manifest.jsonld")); err != nil {
		t.Logf("no toRdf manifest: %v", err)
		return ""
	}
	return dir
}

// suiteTest is one test of the W3C toRdf manifest.
type suiteTest struct {
	ID     string         `json:"@id"`
	Type   []string       `json:"@type"`
	Name   string         `json:"name"`
	Input  string         `json:"input"`
	Expect string         `json:"expect"`
	Option map[string]any `json:"option"`
}

// suiteSkip says why a test of the manifest is not run against the
// crawler's extraction, "" if it is: the crawler runs JSON-LD 1.1 with
// default options and no remote documents (bar schema.org's context).
func suiteSkip(st suiteTest) string {
	if !slices.Contains(st.Type, "jld:PositiveEvaluationTest") {
		return "not a positive evaluation test"
	}
	if v, ok := st.Option["specVersion"]; ok && v != "json-ld-1.1" {
		return "JSON-LD 1.0 only"
	}
	for _, k := range slices.Sorted(maps.Keys(st.Option)) {
		switch k {
		case "specVersion", "base", "normative", "useJCS":
		default:
			return "option " + k
		}
	}
	return ""
}

// refStatements reads N-Quads a reference processor gave and writes them
// in the crawler's normal form (docs/structured-data.md): graph names
// dropped, schema.org IRIs in their one form, xsd:string and
// rdf:langString implied, language tags lower case. Blank node labels
// are kept as they are.
func refStatements(t *testing.T, nq string) []string { return lines(refTriples(t, nq)) }

// refTriples is refStatements before formatting.
func refTriples(t *testing.T, nq string) []Statement {
	t.Helper()
	ds, err := ld.ParseNQuads(nq)
	if err != nil {
		t.Fatalf("reference N-Quads: %v", err)
	}
	term := func(n ld.Node) Term {
		switch n := n.(type) {
		case ld.IRI:
			return Term{Kind: IRI, Value: NormalizeIRI(n.Value)}
		case ld.BlankNode:
			return Term{Kind: Blank, Value: strings.TrimPrefix(n.Attribute, "_:")}
		case ld.Literal:
			dt := NormalizeIRI(n.Datatype)
			if dt == XSD+"string" || dt == RDF+"langString" {
				dt = ""
			}
			return Term{Kind: Literal, Value: n.Value, Datatype: dt, Lang: strings.ToLower(n.Language)}
		}
		t.Fatalf("reference term %T", n)
		return Term{}
	}
	var out []Statement
	for _, name := range slices.Sorted(maps.Keys(ds.Graphs)) {
		for _, q := range ds.Graphs[name] {
			out = append(out, Statement{term(q.Subject), term(q.Predicate), term(q.Object)})
		}
	}
	return out
}

// compare counts the statements of got that want has, blank node labels
// abstracted (see anonymous), as multisets.
func compare(got, want []string) (correct int) {
	left := map[string]int{}
	for _, l := range anonymous(want) {
		left[l]++
	}
	for _, l := range anonymous(got) {
		if left[l] > 0 {
			left[l]--
			correct++
		}
	}
	return correct
}

// diff lists, blank node labels abstracted, up to three statements
// extracted and not expected (+) and expected and not extracted (-).
func diff(got, want []string) string {
	var b strings.Builder
	for _, d := range []struct {
		sign     string
		of, from []string
	}{{"+", got, want}, {"-", want, got}} {
		left := map[string]int{}
		for _, l := range anonymous(d.from) {
			left[l]++
		}
		n := 0
		for _, l := range anonymous(d.of) {
			if left[l] > 0 {
				left[l]--
			} else if n++; n <= 3 {
				b.WriteString("\n\t" + d.sign + " " + l)
			}
		}
	}
	return b.String()
}

// suiteCounts are the totals of a set of cases.
type suiteCounts struct {
	cases, exact, expected, extracted, correct int
}

func (c *suiteCounts) add(got, want []string) bool {
	ok := compare(got, want)
	c.cases++
	c.expected += len(want)
	c.extracted += len(got)
	c.correct += ok
	exact := ok == len(want) && ok == len(got)
	if exact {
		c.exact++
	}
	return exact
}

func (c suiteCounts) precision() float64 { return ratio(c.correct, c.extracted) }
func (c suiteCounts) recall() float64    { return ratio(c.correct, c.expected) }

func ratio(a, b int) float64 {
	if b == 0 {
		return 1
	}
	return float64(a) / float64(b)
}

func (c suiteCounts) String() string {
	return fmt.Sprintf("%d cases, %d exact; statements expected %d, extracted %d, correct %d; precision %.3f, recall %.3f",
		c.cases, c.exact, c.expected, c.extracted, c.correct, c.precision(), c.recall())
}

// TestJSONLDSuite runs the crawler's extraction over the W3C JSON-LD 1.1
// test suite's toRdf tests, as json-gold's module ships them: each test's
// input is put in a page as a <script type="application/ld+json"> block,
// the page is extracted as the crawler does (HTML, base = the test's
// IRI) and its statements are compared with the test's expected N-Quads
// in the crawler's normal form, blank node labels abstracted.
//
// Positive tests split in two: those whose input names no remote
// document, where the crawler must give what the suite expects, and
// those that load a remote context or document, which the crawler
// refuses by design (counted as malformed, no statements). Negative
// tests (the processor must fail) are counted by whether the crawler
// gave statements for them. Tests of JSON-LD 1.0 only and of options
// the crawler does not set (processingMode 1.0, rdfDirection,
// produceGeneralizedRdf, expandContext) are left out.
func TestJSONLDSuite(t *testing.T) {
	dir := jsonGoldTestdata(t)
	if dir == "" {
		t.Skip("json-gold's copy of the W3C JSON-LD test suite not found")
	}
	raw, err := os.ReadFile(filepath.Join(dir, "toRdf-manifest.jsonld"))
	if err != nil {
		t.Fatal(err)
	}
	var man struct {
		BaseIRI  string      `json:"baseIri"`
		Sequence []suiteTest `json:"sequence"`
	}
	if err := json.Unmarshal(raw, &man); err != nil {
		t.Fatal(err)
	}
	var local, remote suiteCounts
	var negative, negativeWithStatements int
	skipped := map[string]int{}
	var misses []string
	for _, st := range man.Sequence {
		if slices.Contains(st.Type, "jld:NegativeEvaluationTest") {
			if st.Option["specVersion"] == "json-ld-1.0" {
				skipped["JSON-LD 1.0 only"]++
				continue
			}
			in, err := os.ReadFile(filepath.Join(dir, st.Input))
			if err != nil {
				t.Fatal(err)
			}
			res := suitePage(t, man.BaseIRI+st.Input, in)
			negative++
			if len(res.Statements) > 0 {
				negativeWithStatements++
			}
			continue
		}
		if why := suiteSkip(st); why != "" {
			skipped[why]++
			continue
		}
		in, err := os.ReadFile(filepath.Join(dir, st.Input))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(dir, st.Expect))
		if err != nil {
			t.Fatal(err)
		}
		base := man.BaseIRI + st.Input
		if b, ok := st.Option["base"].(string); ok {
			base = b
		}
		res := suitePage(t, base, in)
		got := lines(res.Statements)
		if loadsRemote(in) {
			if !remote.add(got, refStatements(t, string(want))) && len(got) > 0 {
				t.Logf("remote, with statements: %s %s: %q", st.ID, st.Name, got)
			}
			continue
		}
		ref := refStatements(t, string(want))
		if !local.add(got, ref) {
			misses = append(misses, fmt.Sprintf("%s %s: expected %d, extracted %d, correct %d (malformed %d)%s",
				st.ID, st.Name, len(ref), len(got), compare(got, ref), res.Malformed, diff(got, ref)))
		}
	}
	t.Logf("toRdf, no remote documents: %v", local)
	t.Logf("toRdf, remote contexts or documents (refused by design): %v", remote)
	t.Logf("negative tests: %d, with statements: %d", negative, negativeWithStatements)
	t.Logf("left out: %v", skipped)
	for _, m := range misses {
		t.Logf("not exact: %s", m)
	}
	// Bounds the current extraction meets: a regression fails.
	if local.cases < 320 || local.exact < 298 || local.precision() < 0.983 || local.recall() < 0.979 {
		t.Errorf("no remote documents: %v; want ≥ 320 cases, ≥ 298 exact, precision ≥ 0.983, recall ≥ 0.979", local)
	}
	if remote.correct != remote.extracted {
		t.Errorf("remote documents: %v; want only statements that need no remote document", remote)
	}
	if negativeWithStatements > 5 {
		t.Errorf("%d of %d negative tests gave statements, want ≤ 5", negativeWithStatements, negative)
	}
}

// suitePage extracts a page holding block as its one JSON-LD script.
func suitePage(t *testing.T, base string, block []byte) Result {
	t.Helper()
	// "</script" ends the element: pages write it "<\/script" in their
	// JSON strings, an escape JSON allows (toRdf js13).
	b := strings.ReplaceAll(string(block), "</script", "<\\/script")
	doc := "<!DOCTYPE html><html><head><script type=\"application/ld+json\">" + b + "</script></head><body></body></html>"
	root, err := xhtml.Parse(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	x := New(base, Limits{Statements: 1 << 20})
	x.HTML(root)
	return x.Result()
}

// loadsRemote reports whether a JSON-LD document names a remote
// document: a context given as a string (a URL) or an @import.
func loadsRemote(doc []byte) bool {
	var v any
	if json.Unmarshal(doc, &v) != nil {
		return false
	}
	if _, ok := v.(string); ok {
		return true
	}
	var walk func(v any, inContext bool) bool
	walk = func(v any, inContext bool) bool {
		switch v := v.(type) {
		case string:
			return inContext && !isSchemaContext(v)
		case []any:
			for _, e := range v {
				if walk(e, inContext) {
					return true
				}
			}
		case map[string]any:
			for k, e := range v {
				switch {
				case k == "@context":
					if walk(e, true) {
						return true
					}
				case k == "@import" && inContext:
					return true
				case inContext:
					// Term definitions: only their own @context is a context.
					if m, ok := e.(map[string]any); ok {
						if c, ok := m["@context"]; ok && walk(c, true) {
							return true
						}
					}
				default:
					if walk(e, false) {
						return true
					}
				}
			}
		}
		return false
	}
	return walk(v, false)
}

// rdfxmlBases are the base IRIs Raptor's tests give the namespace
// documents (tests/rdfxml/Makefile.am); the others have
// http://librdf.org/raptor/tests/NAME.rdf.
var rdfxmlBases = map[string]string{
	"22-rdf-syntax-ns.rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns",
	"rdfs-namespace.rdf":   "http://www.w3.org/2000/01/rdf-schema",
	"rdf-schema.rdf":       "http://www.w3.org/2000/01/rdf-schema",
	"owl-schema.rdf":       "http://www.w3.org/2002/07/owl",
}

// TestRDFXMLSuite runs the crawler's RDF/XML extraction over Raptor's
// RDF/XML tests (testdata/raptor-rdfxml, see its README): syntax tests and
// four W3C namespace documents, each with the N-Triples Raptor's parser
// gives, compared as TestJSONLDSuite compares.
func TestRDFXMLSuite(t *testing.T) {
	const base = "http://librdf.org/raptor/tests/"
	files, err := filepath.Glob(filepath.Join("testdata", "raptor-rdfxml", "*.rdf"))
	if err != nil {
		t.Fatal(err)
	}
	var tests, docs suiteCounts
	for _, f := range files {
		name := filepath.Base(f)
		in, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(strings.TrimSuffix(f, ".rdf") + ".out")
		if err != nil {
			t.Fatal(err)
		}
		b := base + name
		if nsBase, ok := rdfxmlBases[name]; ok {
			b = nsBase
		}
		x := New(b, Limits{Statements: 1 << 20, Literal: 1 << 20})
		feedRDFXML(x, string(in))
		res := x.Result()
		got, ref := lines(res.Statements), refStatements(t, string(want))
		c := &tests
		if !strings.HasPrefix(name, "ex-") {
			c = &docs
		}
		if !c.add(got, ref) {
			t.Logf("not exact: %s: expected %d, extracted %d, correct %d (malformed %d, dropped %d)%s",
				name, len(ref), len(got), compare(got, ref), res.Malformed, res.Dropped, diff(got, ref))
		}
	}
	t.Logf("Raptor's RDF/XML syntax tests: %v", tests)
	t.Logf("W3C namespace documents: %v", docs)
	// Bounds the current extraction meets: a regression fails. What is
	// missed is parseType="Literal" and "Collection" (and daml:collection),
	// which the reader skips.
	if tests.exact < 38 || tests.precision() < 1 || tests.recall() < 0.754 {
		t.Errorf("syntax tests: %v; want ≥ 38 exact, precision 1, recall ≥ 0.754", tests)
	}
	if docs.exact < 3 || docs.precision() < 1 || docs.recall() < 0.983 {
		t.Errorf("namespace documents: %v; want ≥ 3 exact, precision 1, recall ≥ 0.983", docs)
	}
}

func TestEntities(t *testing.T) {
	tests := []struct {
		name, doctype string
		want          map[string]string
	}{
		{"none", `DOCTYPE html`, nil},
		{"two, one using the other", `DOCTYPE rdf:RDF [
	<!ENTITY rdf 'http://www.w3.org/1999/02/22-rdf-syntax-ns#'>
	<!ENTITY base "http://example.org/"> <!ENTITY a "&base;a#">
]`, map[string]string{"rdf": RDF, "base": "http://example.org/", "a": "http://example.org/a#"}},
		{"parameter and external entities skipped, first declaration binds", `DOCTYPE x [
	<!ENTITY % p "x"> <!ENTITY ext SYSTEM "http://example.org/ext"> <!ENTITY a "1"> <!ENTITY a "2">
]`, map[string]string{"a": "1"}},
		{"not a DOCTYPE", `ENTITY a "1"`, nil},
		{"unterminated", `DOCTYPE x [<!ENTITY a "1`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Entities(xml.Directive(tt.doctype)); !maps.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
	var b strings.Builder
	b.WriteString("DOCTYPE x [")
	for i := range 100 {
		fmt.Fprintf(&b, `<!ENTITY e%d "&e%d;&e%d;">`, i, i-1, i-1)
	}
	if got := Entities(xml.Directive(b.String() + "]")); len(got) > maxEntities {
		t.Errorf("%d entities, want ≤ %d", len(got), maxEntities)
	} else {
		for k, v := range got {
			if len(v) > maxEntityLength {
				t.Errorf("entity %s of %d bytes", k, len(v))
			}
		}
	}
}
