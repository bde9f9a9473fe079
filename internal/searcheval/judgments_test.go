package searcheval

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestJudgmentsSphinx reads the test site's Sphinx-style general index:
// entries, their sub-entries' links, qualifiers removed, links outside the
// site and entries without a word skipped.
func TestJudgmentsSphinx(t *testing.T) {
	js, index, err := Judgments("testdata/site")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(index, []string{"genindex.html"}) {
		t.Errorf("index pages %q", index)
	}
	want := []Judgment{
		{"CACHE_DIR", []string{"config.html"}},
		{"MAX_RETRY_COUNT", []string{"config.html"}},
		{"installer", []string{"install.html"}},
		{"open_window()", []string{"ref/api.html"}},
		{"plugins", []string{"ref/api.html", "ref/plugins.html"}},
		{"retry()", []string{"ref/api.html"}},
		{"upgrading", []string{"install.html"}},
	}
	if !reflect.DeepEqual(js, want) {
		t.Errorf("judgments\n got %q\nwant %q", js, want)
	}
}

// TestJudgmentsFormats: Texinfo's printed index and DocBook XSL's
// back-of-book index.
func TestJudgmentsFormats(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("Concept-Index.html", `<html><body><table class="index-cp" border="0">
<tr><td></td><th align="left">Index Entry</th><td>&nbsp;</td><th align="left"> Section</th></tr>
<tr><td></td><td valign="top"><a href="Options.html#index-aliases_002c-defining">aliases, defining</a></td><td>&nbsp;</td><td valign="top"><a href="Options.html">16 Options</a></td></tr>
<tr><td></td><td valign="top"><a href="Shell-Grammar.html#index-aliasing"><code>aliasing</code></a></td><td></td><td><a href="Shell-Grammar.html#Aliasing">6.8 Aliasing</a></td></tr>
<tr><td></td><td valign="top"><a href="Expansion.html#index-aliasing-1"><code>aliasing</code></a></td><td></td><td><a href="Expansion.html">14 Expansion</a></td></tr>
</table></body></html>`)
	write("bookindex.html", `<html><body><div class="index"><div class="indexdiv"><h3>A</h3><dl>
<dt>abbrev, <a class="indexterm" href="functions-net.html#FUNCTIONS-NET">Network Functions</a></dt>
<dt>aggregate function, <a class="indexterm" href="tutorial-agg.html">Aggregate Functions</a></dt>
<dd><dl><dt>built-in, <a class="indexterm" href="functions-aggregate.html">Aggregate Functions</a></dt></dl></dd>
<dt>ALTER TABLE, <a class="indexterm" href="sql-altertable.html">ALTER TABLE</a>, <a class="indexterm" href="ddl-alter.html#X">Modifying Tables</a></dt>
</dl></div></div></body></html>`)
	write("Options.html", "<html><body>options</body></html>")
	js, index, err := Judgments(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []Judgment{
		{"ALTER TABLE", []string{"ddl-alter.html", "sql-altertable.html"}},
		{"abbrev", []string{"functions-net.html"}},
		{"aggregate function", []string{"functions-aggregate.html", "tutorial-agg.html"}},
		{"aliases, defining", []string{"Options.html"}},
		{"aliasing", []string{"Expansion.html", "Shell-Grammar.html"}},
	}
	if !reflect.DeepEqual(js, want) || !reflect.DeepEqual(index, []string{"Concept-Index.html", "bookindex.html"}) {
		t.Errorf("judgments\n got %q\nwant %q\nindex pages %q", js, want, index)
	}
	// Written and read back as JSON Lines.
	var b bytes.Buffer
	if err := WriteJudgments(&b, js); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJudgments(&b)
	if err != nil || !reflect.DeepEqual(back, js) {
		t.Fatalf("read back %q, %v", back, err)
	}
}

func TestReadJudgmentsRejects(t *testing.T) {
	for name, in := range map[string]string{
		"not json":        `{"query": "x"`,
		"empty query":     `{"query": " ", "relevant": ["a.html"]}`,
		"no relevant":     `{"query": "x", "relevant": []}`,
		"outside":         `{"query": "x", "relevant": ["../../etc/passwd"]}`,
		"long query":      `{"query": "` + strings.Repeat("x", maxQueryBytes+1) + `", "relevant": ["a.html"]}`,
		"too many":        `{"query": "x", "relevant": [` + strings.Repeat(`"a.html",`, maxRelevant) + `"b.html"]}`,
		"line after good": "{\"query\": \"x\", \"relevant\": [\"a.html\"]}\n{]",
	} {
		_, err := ReadJudgments(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), "line ") {
			t.Errorf("%s: err %v, want one naming the line", name, err)
		}
	}
	js, err := ReadJudgments(strings.NewReader("# comment\n\n{\"query\": \"x\", \"relevant\": [\"/a/b.html\"]}\n"))
	if err != nil || len(js) != 1 || js[0].Relevant[0] != "a/b.html" {
		t.Fatalf("%q %v", js, err)
	}
}

func FuzzReadJudgments(f *testing.F) {
	f.Add([]byte(`{"query": "x", "relevant": ["a.html", "b/c.html"]}` + "\n# c\n"))
	f.Add([]byte(`{"query": "x", "relevant": ["../a"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		js, err := ReadJudgments(bytes.NewReader(b))
		if err != nil {
			return
		}
		// What is read is inside the site and reads back the same.
		for _, j := range js {
			for _, p := range j.Relevant {
				if p == "" || strings.HasPrefix(p, "/") || strings.Contains("/"+p+"/", "/../") {
					t.Fatalf("relevant page %q", p)
				}
			}
		}
		var out bytes.Buffer
		if err := WriteJudgments(&out, js); err != nil {
			t.Fatal(err)
		}
		back, err := ReadJudgments(&out)
		if err != nil || len(back) != len(js) {
			t.Fatalf("read back: %v (%d of %d)", err, len(back), len(js))
		}
	})
}
