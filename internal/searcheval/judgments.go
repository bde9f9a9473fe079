package searcheval

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/PuerkitoBio/goquery"
	"golang.org/x/net/html"
)

// Judgment is a known-item query and the pages its authors linked it to,
// as paths relative to the site's root, without fragments.
type Judgment struct {
	Query    string   `json:"query"`
	Relevant []string `json:"relevant"`
}

// Limits on what a corpus and a judgment file may hold.
const (
	maxPages        = 100000   // HTML files read from a corpus
	maxIndexPage    = 64 << 20 // bytes of one index page parsed for judgments
	maxQueryBytes   = 200
	maxRelevant     = 64 // pages one judgment lists
	maxJudgments    = 200000
	maxJudgmentLine = 64 << 10
)

// Judgments reads the site's own indexes under root and returns one
// judgment per index entry, with the index pages themselves (slash paths
// relative to root), which the evaluation leaves out of the crawl so that
// no engine reads the answers.
//
// Three index formats are read, each the way its generator writes it:
// Sphinx's general index (table.genindextable, or table.indextable on
// the pages of one letter: an entry, its links and
// those of its sub-entries, which are qualifiers such as "(class in x)"),
// Texinfo's printed indexes (table.index-cp, index-fn, … or
// table.printindex: one row per entry and link) and DocBook XSL's
// back-of-book index (div.index: dt entries whose text precedes their
// links, sub-entries in the dd that follows). The query is the entry's
// text without a trailing parenthesised qualifier; its relevant pages are
// every page the entry or its sub-entries link to. Entries of the same
// text are merged; entries without a letter or digit, or linking nowhere
// inside the site, are skipped. The result is sorted by query.
func Judgments(root string) ([]Judgment, []string, error) {
	byQuery := map[string]map[string]bool{}
	var indexPages []string
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(strings.ToLower(p), ".html") {
			return nil
		}
		if n++; n > maxPages {
			return fmt.Errorf("%s: more than %d HTML files", root, maxPages)
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		found, err := judgmentsOf(p, rel)
		if err != nil {
			return err
		}
		if len(found) == 0 {
			return nil
		}
		indexPages = append(indexPages, rel)
		for _, j := range found {
			set := byQuery[j.Query]
			if set == nil {
				set = map[string]bool{}
				byQuery[j.Query] = set
			}
			for _, r := range j.Relevant {
				set[r] = true
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	out := make([]Judgment, 0, len(byQuery))
	for q, set := range byQuery {
		rel := make([]string, 0, len(set))
		for r := range set {
			if !slices.Contains(indexPages, r) {
				rel = append(rel, r)
			}
		}
		if len(rel) == 0 {
			continue
		}
		slices.Sort(rel)
		out = append(out, Judgment{Query: q, Relevant: rel[:min(len(rel), maxRelevant)]})
	}
	slices.SortFunc(out, func(a, b Judgment) int { return strings.Compare(a.Query, b.Query) })
	slices.Sort(indexPages)
	return out, indexPages, nil
}

// judgmentsOf returns the index entries of one page at rel (its path
// relative to the root), none when it is not an index page.
func judgmentsOf(file, rel string) ([]Judgment, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	body, err := io.ReadAll(io.LimitReader(f, maxIndexPage+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(body) > maxIndexPage {
		return nil, nil // no index page is that large; not worth parsing
	}
	// Cheap test before parsing: every format names its class.
	if !bytes.Contains(body, []byte("indextable")) && !bytes.Contains(body, []byte(`class="index-`)) &&
		!bytes.Contains(body, []byte("printindex")) && !bytes.Contains(body, []byte(`class="index"`)) {
		return nil, nil
	}
	doc, err := goquery.NewDocumentFromReader(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	base := &url.URL{Path: "/" + rel}
	var out []Judgment
	add := func(text string, hrefs []string) {
		q := cleanEntry(text)
		if q == "" {
			return
		}
		var pages []string
		for _, h := range hrefs {
			if p, ok := sitePath(base, h); ok && !slices.Contains(pages, p) {
				pages = append(pages, p)
			}
		}
		if len(pages) > 0 {
			out = append(out, Judgment{Query: q, Relevant: pages})
		}
	}
	// Sphinx: ul > li entries; an entry's own text is its text nodes, or
	// its first link's text when the entry is itself a link.
	doc.Find("table.genindextable, table.indextable").Each(func(_ int, t *goquery.Selection) {
		t.Find("td > ul > li, td > dl > dt").Each(func(_ int, li *goquery.Selection) {
			text := ownText(li)
			if strings.TrimSpace(text) == "" {
				text = li.Children().Filter("a").First().Text()
			}
			add(text, hrefs(li.Find("a")))
		})
	})
	// Texinfo: a row per (entry, link); the entry is the first cell's link.
	doc.Find(`table[class^="index-"], table.printindex`).Each(func(_ int, t *goquery.Selection) {
		t.Find("tr").Each(func(_ int, tr *goquery.Selection) {
			a := tr.Find("td a").First()
			if a.Length() == 0 {
				return
			}
			add(a.Text(), hrefs(a))
		})
	})
	// DocBook XSL: div.index dl > dt, the entry's text before its links;
	// sub-entries in the following dd.
	doc.Find("div.index").Not("div.index div.index").Find("dl").Not("dd dl").Children().Filter("dt").Each(func(_ int, dt *goquery.Selection) {
		links := hrefs(dt.Find("a"))
		if dd := dt.Next(); dd.Is("dd") {
			links = append(links, hrefs(dd.Find("a"))...)
		}
		add(ownText(dt), links)
	})
	return out, nil
}

func hrefs(s *goquery.Selection) []string {
	var out []string
	s.Each(func(_ int, a *goquery.Selection) {
		if h, ok := a.Attr("href"); ok {
			out = append(out, h)
		}
	})
	return out
}

// ownText is the text of s outside its links and nested lists.
func ownText(s *goquery.Selection) string {
	var b strings.Builder
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			switch {
			case c.Type == html.TextNode:
				b.WriteString(c.Data)
			case c.Type == html.ElementNode && (c.Data == "a" || c.Data == "ul" || c.Data == "dl" || c.Data == "dd"):
			case c.Type == html.ElementNode:
				walk(c)
			}
		}
	}
	for _, n := range s.Nodes {
		walk(n)
	}
	return b.String()
}

var qualifier = regexp.MustCompile(`\s*\([^()]*\)\s*$`)

// cleanEntry turns an index entry's text into a query: spaces collapsed,
// DocBook's trailing ", " and a trailing parenthesised qualifier removed;
// "" when no letter or digit is left.
func cleanEntry(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	s = strings.TrimRight(s, ", ")
	if q := qualifier.ReplaceAllString(s, ""); q != "" {
		s = q
	}
	s = strings.TrimRight(s, ", ")
	if len(s) > maxQueryBytes {
		return ""
	}
	if !strings.ContainsFunc(s, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) {
		return ""
	}
	return s
}

// sitePath resolves href against base and returns the site path it names
// (no leading slash, no fragment or query), or false for a link that
// leaves the site.
func sitePath(base *url.URL, href string) (string, bool) {
	u, err := base.Parse(href)
	if err != nil || u.Scheme != "" || u.Host != "" {
		return "", false
	}
	p := strings.TrimPrefix(path.Clean(u.Path), "/")
	if p == "" || p == "." || strings.HasPrefix(p, "..") {
		return "", false
	}
	return p, true
}

// ReadJudgments reads judgments as JSON Lines ({"query": …, "relevant":
// [paths]}), the form WriteJudgments writes. A bad line is an error naming
// it.
func ReadJudgments(r io.Reader) ([]Judgment, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxJudgmentLine)
	var out []Judgment
	for line := 1; sc.Scan(); line++ {
		t := bytes.TrimSpace(sc.Bytes())
		if len(t) == 0 || t[0] == '#' {
			continue
		}
		var j Judgment
		if err := json.Unmarshal(t, &j); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if q := strings.TrimSpace(j.Query); q == "" || len(q) > maxQueryBytes {
			return nil, fmt.Errorf("line %d: query empty or over %d bytes", line, maxQueryBytes)
		}
		if len(j.Relevant) == 0 || len(j.Relevant) > maxRelevant {
			return nil, fmt.Errorf("line %d: %d relevant pages, want 1..%d", line, len(j.Relevant), maxRelevant)
		}
		for i, p := range j.Relevant {
			sp, ok := sitePath(&url.URL{Path: "/"}, "/"+strings.TrimPrefix(p, "/"))
			if !ok || strings.Contains("/"+p+"/", "/../") {
				return nil, fmt.Errorf("line %d: relevant page %q is not a path inside the site", line, p)
			}
			j.Relevant[i] = sp
		}
		if len(out) == maxJudgments {
			return nil, fmt.Errorf("line %d: more than %d judgments", line, maxJudgments)
		}
		out = append(out, j)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", len(out)+1, err)
	}
	return out, nil
}

// WriteJudgments writes judgments as JSON Lines.
func WriteJudgments(w io.Writer, js []Judgment) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, j := range js {
		if err := enc.Encode(j); err != nil {
			return err
		}
	}
	return nil
}
