package index

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/micra-net/micra/crawl"
)

func structuredIndex(t *testing.T) *Index {
	t.Helper()
	x := newTestIndex(t, nil)
	res := mustPut(t, x, structuredPages(t0)...)
	if res.Added != 5 || res.Dropped != 0 {
		t.Fatalf("fixture: %+v", res)
	}
	return x
}

// searchAll returns the URLs of every hit of a query, sorted.
func searchAll(t *testing.T, x *Index, q string) []string {
	t.Helper()
	var out []string
	for off := 0; ; off += 100 {
		res, err := x.Search(t.Context(), Query{Text: q, Limit: 100, Offset: off})
		if err != nil {
			t.Fatalf("%q: %v", q, err)
		}
		out = append(out, urls(res)...)
		if off+100 >= res.Total || off+200 > 1000 {
			break
		}
	}
	slices.Sort(out)
	return out
}

func TestTypedSearch(t *testing.T) {
	x := structuredIndex(t)
	const (
		recipe  = "https://food.example/garlic-soup"
		bread   = "https://food.example/bread"
		event   = "https://events.example/concert"
		product = "https://shop.example/pan"
		plain   = "https://plain.example/garlic"
	)
	tests := []struct {
		q    string
		want []string
	}{
		{"type:Recipe", []string{bread, recipe}},
		{"type:recipe", []string{bread, recipe}},
		{"type:schema:Recipe", []string{bread, recipe}},
		{"TYPE:SCHEMA:Recipe", []string{bread, recipe}},
		{"type:https://schema.org/Recipe", []string{bread, recipe}},
		{"type:http://schema.org/Recipe", []string{bread, recipe}},
		{"type:<https://www.schema.org/Recipe>", []string{bread, recipe}},
		{"rdf:type=Recipe", []string{bread, recipe}},
		{"type:Recipe garlic", []string{bread, recipe}},
		{"type:Recipe soup", []string{recipe}},
		{"garlic -type:Recipe", []string{plain, product}},
		{"type:Event -type:Recipe", []string{event}},
		{"type:Person", []string{recipe}},
		{"type:Offer", []string{product}},
		{"type:Movie", nil},
		{"type:Movie garlic", nil},
		{"author=alice", []string{recipe}}, // the name of the author item
		{"author=Alice", []string{recipe}}, // values are matched in lower case
		{`author="alice smith"`, []string{recipe}},
		{`author="Smith Alice"`, []string{recipe}}, // words, in any order
		{"author=bob", []string{bread}},            // a literal value
		{"author=carol", nil},
		{"recipeIngredient=garlic", []string{recipe}},
		{"schema:price=10", []string{product}},
		{"price=10", []string{product}},
		{"price=11", nil},
		{"availability=schema:InStock", []string{product}},
		{"availability=https://schema.org/InStock", []string{product}},
		{"availability=instock", []string{product}}, // an IRI's local name counts as words
		{"startDate=2026-06-01", []string{event}},
		{"name=concert type:Event", []string{event}},
		{"description=soupe", []string{recipe}},
		{"garlic -author=bob", []string{recipe, plain, product}},
	}
	for _, tc := range tests {
		t.Run(tc.q, func(t *testing.T) {
			if got := searchAll(t, x, tc.q); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	res, err := x.Search(t.Context(), Query{Text: "type:Recipe soup"})
	if err != nil || len(res.Hits) != 1 {
		t.Fatalf("%v %+v", err, res)
	}
	h := res.Hits[0]
	if !slices.Equal(h.Types, []string{crawl.SchemaOrg + "Recipe", crawl.SchemaOrg + "Person"}) {
		t.Errorf("types %q", h.Types)
	}
	if len(h.Statements) == 0 || h.Statements[0].P.Value != crawl.SchemaOrg+"name" || h.Statements[0].O.Value != "Garlic soup" {
		t.Errorf("statements %+v", h.Statements)
	}
	if !slices.Equal(h.Matched, []string{"type:Recipe", "soup"}) {
		t.Errorf("matched %q", h.Matched)
	}
	// A typed query is not a keyword: no keyword of any page can be a
	// hidden term, nor can a query word become one.
	for _, q := range []string{"recipe", "t:https://schema.org/recipe", "#t:https://schema.org/recipe"} {
		if got := searchAll(t, x, q); len(got) != 0 {
			t.Errorf("%q found %q", q, got)
		}
	}
	checkInvariants(t, x)
}

func TestParseTypedErrors(t *testing.T) {
	tests := []struct{ q, want string }{
		{"type:", "a type or property is missing"},
		{"type:foo:Bar", `unknown prefix "foo"`},
		{"type:Re cipe", ""}, // two words: type:Re and cipe
		{"type:Ré$", "not a schema.org term name"},
		{"type:<https://schema.org/Recipe", "lacks its closing '>'"},
		{"=alice", "a property is missing before '='"},
		{"author=", "a value is missing after '='"},
		{`author=""`, "a value is missing after '='"},
		{"author=the", "only stop words"},
		{"nope:author=x", `unknown prefix "nope"`},
		{"<https://schema.org/author>x=alice", "write a property IRI as <IRI>=VALUE"},
		{"<https://schema.org/author>alice", ""}, // no '=': words
		{"name=" + strings.Repeat("1", 200), "not indexed whole"},
		{"https://example.com/?a=b", ""}, // a URL pasted: words
	}
	for _, tc := range tests {
		t.Run(tc.q, func(t *testing.T) {
			_, err := parseQuery(tc.q, 1024, 16)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrBadQuery) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one with %q", err, tc.want)
			}
		})
	}
	// Typed terms count against the query's term limit.
	if _, err := parseQuery("type:A type:B type:C", 1024, 2); !errors.Is(err, ErrBadQuery) {
		t.Errorf("three types under a limit of two: %v", err)
	}
	if _, err := parseQuery("type:Recipe -type:recipe", 1024, 16); err == nil || !strings.Contains(err.Error(), "both searched and excluded") {
		t.Errorf("searched and excluded: %v", err)
	}
}

func TestStatementsCleaned(t *testing.T) {
	x := newTestIndex(t, nil, MaxStatements(3))
	r := page("https://x.example/", "x", t0, "garlic", 65535)
	r.Statements = []crawl.Statement{
		st(iriT("relative/path"), iriT(schemaOrg+"name"), litT("a")),                                             // relative subject
		st(litT("lit"), iriT(schemaOrg+"name"), litT("b")),                                                       // literal subject
		st(blankT("b0"), blankT("b9"), litT("c")),                                                                // blank predicate
		st(blankT("b0"), iriT("https://x.example/a b"), litT("d")),                                               // space in an IRI
		st(blankT("b0"), iriT(schemaOrg+"name"), crawl.Term{Kind: crawl.TermLiteral, Value: "e", Lang: "en_GB"}), // bad tag
		st(blankT("b0"), iriT(rdfType), iriT(schemaOrg+"Recipe")),
		st(blankT("b0"), iriT(schemaOrg+"name"), crawl.Term{Kind: crawl.TermLiteral, Value: "f", Lang: "EN-gb", Datatype: "x"}),
		st(blankT("b0"), iriT(schemaOrg+"alternateName"), crawl.Term{Kind: crawl.TermLiteral, Value: "g", Datatype: xsdString}),
		st(blankT("b0"), iriT(schemaOrg+"headline"), litT("over the cap")),
	}
	res := mustPut(t, x, r)
	if res.Added != 1 || res.Dropped != 6 {
		t.Fatalf("%+v", res)
	}
	d, err := x.Get(t.Context(), r.URL)
	if err != nil {
		t.Fatal(err)
	}
	want := []crawl.Statement{
		st(blankT("b0"), iriT(rdfType), iriT(schemaOrg+"Recipe")),
		st(blankT("b0"), iriT(schemaOrg+"name"), crawl.Term{Kind: crawl.TermLiteral, Value: "f", Lang: "en-gb"}),
		st(blankT("b0"), iriT(schemaOrg+"alternateName"), litT("g")),
	}
	if !slices.Equal(d.Statements, want) {
		t.Errorf("stored %+v", d.Statements)
	}
	// Clean statements are kept as they are.
	if out, n := cleanStatements(want, 10); n != 0 || &out[0] != &want[0] {
		t.Errorf("clean statements copied or dropped: %d", n)
	}
	// MaxStatements(0) stores and indexes none.
	y := newTestIndex(t, nil, MaxStatements(0))
	mustPut(t, y, structuredPages(t0)...)
	if got := searchAll(t, y, "type:Recipe"); len(got) != 0 {
		t.Errorf("MaxStatements(0): %q", got)
	}
}

// TestLongTermsHashed: a type or value longer than a posting key allows is
// indexed by its hash, and found.
func TestLongTermsHashed(t *testing.T) {
	x := newTestIndex(t, nil)
	long := "https://vocab.example/" + strings.Repeat("t", 300)
	r := page("https://x.example/", "x", t0, "garlic", 65535)
	r.Statements = []crawl.Statement{st(blankT("b0"), iriT(rdfType), iriT(long))}
	mustPut(t, x, r)
	if tt := typeTerm(long); !strings.HasPrefix(tt, "#h:") || len(tt) != 35 {
		t.Errorf("term %q", tt)
	}
	if got := searchAll(t, x, "type:"+long); len(got) != 1 {
		t.Errorf("found %q", got)
	}
	checkInvariants(t, x)
}

// TestMigrateV1 opens an index written by schema 1 (the code of commit
// d4fb26a, before statements were indexed; testdata/index-v1.backup is
// its badger backup, holding structuredPages, a tombstone and a profile):
// New indexes the stored statements, writes version 2, and the index is
// consistent; a second New has nothing to do.
func TestMigrateV1(t *testing.T) {
	db := loadV1(t)
	x := newTestIndex(t, db)
	if err := x.Verify(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := searchAll(t, x, "type:Recipe garlic"); len(got) != 2 {
		t.Errorf("type:Recipe garlic after migration: %q", got)
	}
	if got := searchAll(t, x, "author=alice"); len(got) != 1 {
		t.Errorf("author=alice after migration: %q", got)
	}
	if got := searchAll(t, x, "garlic"); len(got) != 4 {
		t.Errorf("garlic after migration: %q", got)
	}
	st := x.Stats()
	if st.Docs != 5 || st.Tombstones != 1 || st.Profiles != 1 || st.Matches != 4 {
		t.Errorf("stats %+v", st)
	}
	if v := schemaOf(t, db); v != schemaVersion {
		t.Errorf("schema %d", v)
	}
	x.Close()
	// Records, postings and document frequencies as a fresh index stores
	// them, but for the encoding of the records' keywords, which schema 1
	// wrote with exact weights (now quantised: crawl.QuantiseWeight).
	y := newTestIndex(t, db)
	if a, b := dumpQuantised(t, y.db), dumpQuantised(t, structuredIndex(t).db); a != b {
		t.Errorf("migrated index differs from a fresh one:\n%s\n%s", a, b)
	}
}

// dumpQuantised lists the records, postings and document frequencies of
// db, records re-encoded and posting weights quantised as crawl's
// encoding does.
func dumpQuantised(t *testing.T, db *badger.DB) string {
	t.Helper()
	return dumpWith(t, db, func(prefix, v []byte) ([]byte, error) {
		switch {
		case bytes.Equal(prefix, prefixRecord):
			s, err := decodeStored(v)
			if err != nil {
				return nil, err
			}
			r, err := crawl.DecodeRecord(s.Record)
			if err != nil {
				return nil, err
			}
			for i := range s.Postings {
				s.Postings[i].Weight = crawl.QuantiseWeight(s.Postings[i].Weight)
			}
			s.Record = crawl.AppendRecord(nil, &r)
			return s.encode(), nil
		case bytes.Equal(prefix, prefixPosting):
			w, f, a, err := decodePostingValue(v)
			if err != nil {
				return nil, err
			}
			return encodePostingValue(crawl.QuantiseWeight(w), f, a), nil
		}
		return v, nil
	}, prefixRecord, prefixPosting, prefixDF)
}

// dumpKeys lists the keys and values under prefixes.
func dumpKeys(t *testing.T, db *badger.DB, prefixes ...[]byte) string {
	t.Helper()
	return dumpWith(t, db, nil, prefixes...)
}

// dumpWith lists the keys and values under prefixes, each value as
// transform (nil: none) gives it.
func dumpWith(t *testing.T, db *badger.DB, transform func(prefix, v []byte) ([]byte, error), prefixes ...[]byte) string {
	t.Helper()
	var b strings.Builder
	err := db.View(func(txn *badger.Txn) error {
		for _, p := range prefixes {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: p})
			for it.Seek(p); it.ValidForPrefix(p); it.Next() {
				v, err := it.Item().ValueCopy(nil)
				if err == nil && transform != nil {
					v, err = transform(p, v)
				}
				if err != nil {
					it.Close()
					return err
				}
				fmt.Fprintf(&b, "%q %x\n", it.Item().Key(), v)
			}
			it.Close()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestSchemaRefused: an index of a later schema, or of an unreadable
// version value, is refused with ErrSchema and says why.
func TestSchemaRefused(t *testing.T) {
	for _, v := range [][]byte{encodeUvarint(schemaVersion + 1), encodeUvarint(0), {0xff}} {
		db := openMemDB(t)
		newTestIndex(t, db).Close()
		if err := db.Update(func(txn *badger.Txn) error { return txn.Set(keySchema, v) }); err != nil {
			t.Fatal(err)
		}
		_, err := New(db, Logger(quietLogger()))
		if !errors.Is(err, ErrSchema) {
			t.Fatalf("version %x: %v", v, err)
		}
		if v[0] == schemaVersion+1 && !strings.Contains(err.Error(), fmt.Sprintf("reads versions 1 to %d", schemaVersion)) {
			t.Errorf("version %d: %v", schemaVersion+1, err)
		}
	}
}

func loadV1(t *testing.T) *badger.DB { return loadBackup(t, "testdata/index-v1.backup", 1) }

// loadBackup loads a badger backup of an index of the given schema into
// a new in-memory database.
func loadBackup(t *testing.T, file string, schema uint64) *badger.DB {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	db := openMemDB(t)
	if err := db.Load(f, 16); err != nil {
		t.Fatal(err)
	}
	if v := schemaOf(t, db); v != schema {
		t.Fatalf("fixture has schema %d", v)
	}
	return db
}

func schemaOf(t *testing.T, db *badger.DB) uint64 {
	t.Helper()
	var v uint64
	err := db.View(func(txn *badger.Txn) error {
		var err error
		v, err = getUvarint(txn, keySchema)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestExportNTriples(t *testing.T) {
	x := structuredIndex(t)
	var b bytes.Buffer
	ns, err := x.ExportNTriples(t.Context(), &b)
	if err != nil {
		t.Fatal(err)
	}
	if ns.Pages != 4 || ns.Triples != 17 || ns.Skipped != 0 {
		t.Errorf("stats %+v", ns)
	}
	out := b.String()
	id := idOf("https://food.example/garlic-soup")
	p := fmt.Sprintf("_:p%xb", id[:8])
	for _, want := range []string{
		p + `0 <http://www.w3.org/1999/02/22-rdf-syntax-ns#type> <https://schema.org/Recipe> .` + "\n",
		p + `0 <https://schema.org/author> ` + p + "1 .\n",
		p + `0 <https://schema.org/description> "Une soupe \"\u00e0 l'ail\"\nchaude\\"@fr .` + "\n",
		`"2026-06-01"^^<http://www.w3.org/2001/XMLSchema#date> .` + "\n",
		`<https://food.example/bread#it> <https://schema.org/author> "Bob" .` + "\n",
	} {
		want = strings.ReplaceAll(want, `\u00e0`, "à")
		if !strings.Contains(out, want) {
			t.Errorf("export lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "\n") != ns.Triples {
		t.Errorf("%d lines for %d triples", strings.Count(out, "\n"), ns.Triples)
	}
	// Blank nodes of different pages differ.
	pan := idOf("https://shop.example/pan")
	q := fmt.Sprintf("_:p%xb0", pan[:8])
	if !strings.Contains(out, q) || strings.Contains(out, "_:b0") {
		t.Errorf("blank nodes not made unique per page:\n%s", out)
	}
	rapperCount(t, out, ns.Triples)

	// Non-ASCII IRIs and literals are written as they are (UTF-8).
	r := page("https://ü.example/", "x", t0, "garlic", 65535)
	r.Statements = []crawl.Statement{
		st(iriT("https://例え.example/ü#it"), iriT(schemaOrg+"name"), litT("東京 \u2028 ünï\x01")),
		st(iriT("https://例え.example/ü#it"), iriT("urn:isbn:0451450523"), crawl.Term{Kind: crawl.TermLiteral, Value: "x", Lang: "zh-Hant-TW"}),
	}
	mustPut(t, x, r)
	b.Reset()
	if ns, err = x.ExportNTriples(t.Context(), &b); err != nil || ns.Triples != 19 {
		t.Fatalf("%+v %v", ns, err)
	}
	if want := "<https://例え.example/ü#it> <https://schema.org/name> \"東京 \u2028 ünï\\u0001\" .\n"; !strings.Contains(b.String(), want) {
		t.Errorf("export lacks %q:\n%s", want, b.String())
	}
	rapperCount(t, b.String(), ns.Triples)

	// Distrusted nodes' pages are left out.
	x.Distrust(src.Node)
	ns, err = x.ExportNTriples(t.Context(), io.Discard)
	if err != nil || ns.Triples != 0 {
		t.Errorf("distrusted: %+v %v", ns, err)
	}
}

func TestAppendNTString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", `"plain"`},
		{"q\"b\\s", `"q\"b\\s"`},
		{"t\tn\nr\rb\bf\f", `"t\tn\nr\rb\bf\f"`},
		{"c\x00\x1f\x7f", `"c\u0000\u001F\u007F"`},
		{"bad \xff utf", "\"bad \uFFFD utf\""},
		{"ünï 東京 \u2028", "\"ünï 東京 \u2028\""},
	}
	for _, tc := range tests {
		if got := string(appendNTString(nil, tc.in)); got != tc.want {
			t.Errorf("%q: got %s, want %s", tc.in, got, tc.want)
		}
	}
}

// rapperCount parses N-Triples with rapper (Debian's raptor2-utils), a
// standard RDF tool, and checks it counts want triples. Under CI it
// installs the package when missing; elsewhere it skips without it.
func rapperCount(t *testing.T, nt string, want int) {
	t.Helper()
	path, err := exec.LookPath("rapper")
	if err != nil && os.Getenv("CI") == "true" && os.Geteuid() == 0 {
		install := exec.CommandContext(t.Context(), "sh", "-c", "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq raptor2-utils")
		if out, err := install.CombinedOutput(); err != nil {
			t.Fatalf("installing raptor2-utils: %v\n%s", err, out)
		}
		path, err = exec.LookPath("rapper")
	}
	if err != nil {
		t.Logf("rapper (Debian's raptor2-utils) not installed, and not root under CI=true to install it: the export is not checked by an RDF parser")
		return
	}
	f := t.TempDir() + "/export.nt"
	if err := os.WriteFile(f, []byte(nt), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), path, "-i", "ntriples", "-c", f)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("rapper: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), fmt.Sprintf("returned %d triples", want)) {
		t.Errorf("rapper counted otherwise than %d triples:\n%s", want, stderr.String())
	}
	if strings.Contains(stderr.String(), "Warning") || strings.Contains(stderr.String(), "Error") {
		t.Errorf("rapper complained:\n%s", stderr.String())
	}
	t.Logf("rapper: %s", strings.TrimSpace(stderr.String()))
}

func TestHTTPStructured(t *testing.T) {
	x := structuredIndex(t)
	srv := httptest.NewServer(Handler(x, HTTPOptions{}))
	t.Cleanup(srv.Close)
	tests := []struct {
		name, path  string
		status      int
		contentType string
		contains    []string
	}{
		{"typed search", "/api/search?q=" + url.QueryEscape("type:Recipe soup"), 200, "application/json; charset=utf-8",
			[]string{`"total":1`, `"types":["https://schema.org/Recipe","https://schema.org/Person"]`,
				`"statements":[{"s":{"kind":"blank","value":"b0"},"p":{"kind":"iri","value":"https://schema.org/name"},"o":{"kind":"literal","value":"Garlic soup"}}`,
				`"matched":["type:Recipe","soup"]`}},
		{"untyped hit", "/api/search?q=" + url.QueryEscape("garlic -type:Product -type:Recipe"), 200, "application/json; charset=utf-8", []string{`"total":1`, `"types":[]`, `"statements":[]`}},
		{"bad typed query", "/api/search?q=type:nope:X", 400, "application/json; charset=utf-8", []string{`unknown prefix \"nope\"`}},
		{"record", "/api/record?url=" + url.QueryEscape("https://events.example/concert"), 200, "application/json; charset=utf-8",
			[]string{`"datatype":"http://www.w3.org/2001/XMLSchema#date"`}},
		{"export ntriples", "/api/export?format=ntriples", 200, "application/n-triples; charset=utf-8",
			[]string{`<https://food.example/bread#it> <https://schema.org/author> "Bob" .`}},
		{"export jsonl", "/api/export?format=jsonl", 200, "application/x-ndjson; charset=utf-8", []string{`"statements":[`}},
		{"export bad format", "/api/export?format=turtle", 400, "application/json; charset=utf-8", []string{`format: \"turtle\" is neither jsonl nor ntriples`}},
		{"page", "/?q=" + url.QueryEscape("type:Recipe soup"), 200, "text/html; charset=utf-8",
			[]string{`<a href="?q=type%3ARecipe">Recipe</a> · <a href="?q=type%3APerson">Person</a> — name: Garlic soup; recipeIngredient: garlic`}},
		{"page error", "/?q=type:", 400, "text/html; charset=utf-8", []string{`a type or property is missing`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := do(t, "GET", srv.URL+tc.path, "")
			if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != tc.contentType {
				t.Fatalf("%d %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
			}
			for _, want := range tc.contains {
				if !strings.Contains(body, want) {
					t.Errorf("lacks %s:\n%s", want, body)
				}
			}
		})
	}
}
