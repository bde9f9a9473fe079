package parse

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/net/html/charset"

	"github.com/micra-net/micra/crawl/internal/structured"
	"github.com/micra-net/micra/crawl/internal/textproc"
)

func TestDetect(t *testing.T) {
	rss := []byte(`<?xml version="1.0"?><rss version="2.0"><channel></channel></rss>`)
	atomFeed := []byte(`<feed xmlns="http://www.w3.org/2005/Atom"></feed>`)
	rss1 := []byte(`<?xml version="1.0"?><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns="http://purl.org/rss/1.0/"><channel/></rdf:RDF>`)
	rdf := []byte(`<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:Description rdf:about="http://a/"/></rdf:RDF>`)
	sm := []byte("\xef\xbb\xbf  <urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\"></urlset>")
	smi := []byte(`<?xml version="1.0"?><!-- c --><sitemapindex></sitemapindex>`)
	xhtml := []byte(`<?xml version="1.0"?><!DOCTYPE html><html xmlns="http://www.w3.org/1999/xhtml"><head/></html>`)
	page := []byte(`<!doctype html><html><body>x</body></html>`)
	tests := []struct {
		name, ct, path string
		body           []byte
		want           Type
	}{
		{"html header", "text/html; charset=utf-8", "/", page, HTML},
		{"feed as text/html", "text/html", "/", rss, RSS},
		{"xhtml header", "application/xhtml+xml", "/", xhtml, XHTML},
		{"rss header", "application/rss+xml", "/f", rss, RSS},
		{"atom header", "application/atom+xml", "/f", atomFeed, Atom},
		{"rdf header rss1", "application/rdf+xml", "/f", rss1, RSS},
		{"rdf header", "application/rdf+xml", "/f", rdf, RDF},
		{"xml sitemap", "application/xml", "/sitemap.xml", sm, Sitemap},
		{"xml sitemap index", "text/xml", "/s.xml", smi, SitemapIndex},
		{"xml xhtml", "text/xml", "/p", xhtml, XHTML},
		{"xml atom", "application/xml", "/p", atomFeed, Atom},
		{"xml unknown", "application/xml", "/p", []byte(`<foo/>`), Other},
		{"plain", "text/plain", "/r.txt", []byte("hello"), Text},
		{"plain sitemap", "text/plain", "/s", sm, Sitemap},
		{"no type ext html", "", "/a.HTML", []byte("x"), HTML},
		{"no type ext rdf", "", "/a.rdf", rdf, RDF},
		{"no type sniff html", "", "/a", page, HTML},
		{"no type sniff rss", "application/octet-stream", "/a", rss, RSS},
		{"no type sniff text", "", "/a", []byte("just words"), Text},
		{"image", "image/png", "/a.png", []byte("\x89PNG"), Other},
		{"pdf", "application/pdf", "/a.pdf", []byte("%PDF-1.4"), Other},
		{"no type binary", "", "/a", []byte{0, 1, 2, 3, 0xff}, Other},
		{"bad header", "text/html;;;=", "/a.txt", []byte("x"), Text},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Detect(tt.ct, tt.path, tt.body); got != tt.want {
				t.Fatalf("Detect = %v, want %v", got, tt.want)
			}
		})
	}
}

const page = `<!DOCTYPE html>
<html lang="en-GB"><head>
<title>  Cyprus   volcanoes </title>
<base href="http://example.com/docs/">
<meta name="description" content="Geology of the island">
<link rel="canonical" href="/docs/canon#x">
<link rel="alternate" type="application/rss+xml" href="feed.xml" title="Feed">
<script>var hidden = "scriptword";</script>
<style>.stylerule{}</style>
</head><body>
<h1>Troodos ophiolite</h1>
<p>Pillow lavas and gabbro. <a href="a.html">Gabbro <b>rocks</b></a>
<a href="a.html#sec">more gabbro</a>
<a href="http://other.org/x?PHPSESSID=abc&amp;q=1">elsewhere</a>
<a href="b.html" rel="nofollow">paid</a>
<a href="mailto:x@y.z">mail</a>
<a href="javascript:void(0)">js</a>
<iframe src="/frame.html"></iframe>
<area href="map.html" alt="Map region">
</body></html>`

func TestHTML(t *testing.T) {
	kw := textproc.NewBuilder()
	d := Parse(HTML, "http://example.com/index.html", "text/html", []byte(page), kw, Options{Agent: "micra"})
	if d.Title != "Cyprus volcanoes" {
		t.Errorf("Title = %q", d.Title)
	}
	if d.Lang != "en-gb" {
		t.Errorf("Lang = %q", d.Lang)
	}
	if d.Canonical != "http://example.com/docs/canon" {
		t.Errorf("Canonical = %q", d.Canonical)
	}
	var urls []string
	for _, l := range d.Links {
		urls = append(urls, l.URL)
	}
	want := []string{
		"http://example.com/docs/canon",
		"http://example.com/docs/feed.xml",
		"http://example.com/docs/a.html",
		"http://other.org/x?q=1",
		"http://example.com/frame.html",
		"http://example.com/docs/map.html",
	}
	if !slices.Equal(urls, want) {
		t.Fatalf("links\n got %q\nwant %q", urls, want)
	}
	if a := d.Links[2].Anchor; a != "Gabbro rocks more gabbro" {
		t.Errorf("anchor = %q", a)
	}
	terms := map[string]bool{}
	for _, k := range kw.Top(100) {
		terms[k.Term] = true
	}
	for _, w := range []string{"cyprus", "volcano", "troodo", "ophiolit", "gabbro", "geolog"} {
		if !terms[w] {
			t.Errorf("keyword %q missing from %v", w, kw.Top(100))
		}
	}
	for _, w := range []string{"scriptword", "stylerul", "hidden"} {
		if terms[w] {
			t.Errorf("invisible text %q indexed", w)
		}
	}
}

func TestMetaRobots(t *testing.T) {
	tests := []struct {
		name, head string
		xrobots    []string
		noindex    bool
		nofollow   bool
	}{
		{"none", ``, nil, false, false},
		{"noindex", `<meta name="robots" content="noindex">`, nil, true, false},
		{"nofollow", `<meta name="ROBOTS" content="index, NOFOLLOW">`, nil, false, true},
		{"none directive", `<meta name="robots" content="none">`, nil, true, true},
		{"agent specific", `<meta name="micra" content="noindex">`, nil, true, false},
		{"other agent", `<meta name="googlebot" content="noindex">`, nil, false, false},
		{"header", ``, []string{"noindex, nofollow"}, true, true},
		{"header other agent", ``, []string{"googlebot: noindex"}, false, false},
		{"header our agent", ``, []string{"micra: nofollow"}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `<html><head>` + tt.head + `</head><body><a href="/x">x</a></body></html>`
			d := Parse(HTML, "http://e.org/", "text/html", []byte(body), nil, Options{Agent: "micra", XRobotsTag: tt.xrobots})
			if d.NoIndex != tt.noindex || d.NoFollow != tt.nofollow {
				t.Fatalf("noindex=%v nofollow=%v", d.NoIndex, d.NoFollow)
			}
			if tt.nofollow != (len(d.Links) == 0) {
				t.Fatalf("links = %v with nofollow=%v", d.Links, tt.nofollow)
			}
		})
	}
}

func TestCharset(t *testing.T) {
	body := []byte("<html><head><meta charset=\"iso-8859-1\"><title>Caf\xe9</title></head></html>")
	d := Parse(HTML, "http://e.org/", "text/html", body, nil, Options{})
	if d.Title != "Café" {
		t.Fatalf("Title = %q", d.Title)
	}
}

func TestFeeds(t *testing.T) {
	rss2 := `<?xml version="1.0" encoding="UTF-8"?><rss version="2.0"><channel><title>Harbour news</title><link>http://e.org/</link>
<description>All about &lt;b&gt;ships&lt;/b&gt;</description>
<item><title>Ferry arrives</title><link>http://e.org/ferry</link><description>&lt;p&gt;The ferry &amp;amp; crew&lt;/p&gt;</description><pubDate>Mon, 02 Jan 2006 15:04:05 -0700</pubDate></item>
<item><title>Guid only</title><guid>http://e.org/guid</guid></item>
<item><title>Broken</title><link>http://e.org/broken
</channel></rss>`
	atomFeed := `<feed xmlns="http://www.w3.org/2005/Atom"><title>Atom news</title><link href="http://e.org/"/>
<entry><title>Entry one</title><link rel="alternate" href="/one"/><link rel="edit" href="/edit"/><updated>2024-11-22T10:00:00Z</updated><summary>Sails</summary></entry>
<entry><title>Entry two</title><id>tag:e.org,2024:2</id><link href="two"/></entry></feed>`
	rss1 := `<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns="http://purl.org/rss/1.0/">
<channel rdf:about="http://e.org/"><title>RSS one</title></channel>
<item rdf:about="http://e.org/r1"><title>R1</title></item></rdf:RDF>`
	rdfDoc := `<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:foaf="http://xmlns.com/foaf/0.1/">
<foaf:Person rdf:about="http://e.org/me"><foaf:knows rdf:resource="http://f.org/you"/></foaf:Person></rdf:RDF>`
	sitemap := `<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
<url><loc>http://e.org/a</loc><lastmod>2024-11-01</lastmod></url>
<url><loc> http://e.org/b </loc></url><url><loc>ftp://e.org/c</loc></url></urlset>`
	index := `<sitemapindex><sitemap><loc>http://e.org/s1.xml</loc><lastmod>2024-10-01T00:00:00+00:00</lastmod></sitemap></sitemapindex>`
	tests := []struct {
		name  string
		typ   Type
		body  string
		title string
		links []string
	}{
		{"rss2", RSS, rss2, "Harbour news", []string{"http://e.org/", "http://e.org/ferry", "http://e.org/guid", "http://e.org/broken"}},
		{"atom", Atom, atomFeed, "Atom news", []string{"http://e.org/", "http://e.org/one", "http://e.org/two"}},
		{"rss1", RSS, rss1, "RSS one", []string{"http://e.org/r1"}},
		{"rdf", RDF, rdfDoc, "", []string{"http://e.org/me", "http://f.org/you"}},
		{"sitemap", Sitemap, sitemap, "", []string{"http://e.org/a", "http://e.org/b"}},
		{"sitemap index", SitemapIndex, index, "", []string{"http://e.org/s1.xml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kw := textproc.NewBuilder()
			d := Parse(tt.typ, "http://e.org/feed", "", []byte(tt.body), kw, Options{})
			if d.Title != tt.title {
				t.Errorf("Title = %q", d.Title)
			}
			var got []string
			for _, l := range d.Links {
				got = append(got, l.URL)
			}
			if !slices.Equal(got, tt.links) {
				t.Fatalf("links = %q, want %q", got, tt.links)
			}
		})
	}
	d := Parse(Sitemap, "http://e.org/s", "", []byte(sitemap), nil, Options{})
	if !d.Links[0].LastMod.Equal(time.Date(2024, 11, 1, 0, 0, 0, 0, time.UTC)) || !d.Links[1].LastMod.IsZero() {
		t.Errorf("lastmod = %v, %v", d.Links[0].LastMod, d.Links[1].LastMod)
	}
	kw := textproc.NewBuilder()
	Parse(RSS, "http://e.org/f", "", []byte(rss2), kw, Options{})
	terms := map[string]bool{}
	for _, k := range kw.Top(50) {
		terms[k.Term] = true
	}
	for _, w := range []string{"harbour", "ferri", "ship", "crew"} {
		if !terms[w] {
			t.Errorf("feed keyword %q missing: %v", w, kw.Top(50))
		}
	}
}

func TestLimits(t *testing.T) {
	var b strings.Builder
	b.WriteString("<html><head><title>" + strings.Repeat("t", 2*MaxTitle) + "</title></head><body>")
	for i := range 500 {
		b.WriteString(`<a href="/p` + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + `">` + strings.Repeat("anchor ", 100) + `</a>`)
		b.WriteString(`<a href="/q` + string(rune('0'+i%10)) + strings.Repeat("y", i) + `">z</a>`)
	}
	flat := b.String()
	// Nesting deeper than x/net/html accepts takes the streaming path.
	deep := flat + strings.Repeat("<div>", 5000) + "deep" + strings.Repeat("</div>", 5000)
	for name, body := range map[string]string{"tree": flat, "stream": deep} {
		t.Run(name, func(t *testing.T) {
			kw := textproc.NewBuilder()
			d := Parse(HTML, "http://e.org/", "text/html", []byte(body), kw, Options{MaxLinks: 100})
			if d.Title == "" || len(d.Title) > MaxTitle || len(d.Links) != 100 || !d.Truncated {
				t.Fatalf("title %d links %d truncated %v", len(d.Title), len(d.Links), d.Truncated)
			}
			for _, l := range d.Links {
				if len(l.Anchor) > MaxAnchor {
					t.Fatalf("anchor of %d bytes", len(l.Anchor))
				}
			}
			if top := kw.Top(5); len(top) == 0 || top[0].Term != "anchor" {
				t.Fatalf("keywords = %v", top)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add(uint8(HTML), page)
	f.Add(uint8(RSS), `<rss><channel><item><link>http://a/</link></item></channel></rss>`)
	f.Add(uint8(Sitemap), `<urlset><url><loc>/x</loc><lastmod>2024-01-01</lastmod></url></urlset>`)
	f.Add(uint8(RDF), `<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><x rdf:about="/a"/></rdf:RDF>`)
	f.Add(uint8(HTML)|0x80, structuredPage)
	f.Add(uint8(Atom)|0x80, `<feed xmlns="http://www.w3.org/2005/Atom"><title>F</title><entry><link href="/e"/><title>E</title></entry></feed>`)
	f.Add(uint8(RDF)|0x80, `<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:ex="http://e/"><ex:T rdf:about="/a"><ex:p rdf:resource="/b"/></ex:T></rdf:RDF>`)
	f.Fuzz(func(t *testing.T, typ uint8, body string) {
		tt := Type(typ % 9)
		Detect("", "/x", []byte(body))
		d := Parse(tt, "http://e.org/dir/page", "", []byte(body), textproc.NewBuilder(), Options{MaxLinks: 50, Agent: "micra", Structured: typ&0x80 != 0})
		if n := len(d.Structured.Statements); n > structured.DefaultLimits.Statements {
			t.Fatalf("%d statements", n)
		}
		if len(d.Links) > 50 || len(d.Title) > MaxTitle {
			t.Fatalf("limits exceeded: %d links, title %d", len(d.Links), len(d.Title))
		}
		for _, l := range d.Links {
			if !strings.HasPrefix(l.URL, "http://") && !strings.HasPrefix(l.URL, "https://") {
				t.Fatalf("bad link %q", l.URL)
			}
		}
		// Whatever the bytes, the texts that go into records are UTF-8.
		texts := []string{d.Title, d.Lang, d.Canonical}
		for _, l := range d.Links {
			texts = append(texts, l.URL, l.Anchor)
		}
		for _, s := range texts {
			if !utf8.ValidString(s) {
				t.Fatalf("%v: text %q is not UTF-8", tt, s)
			}
		}
	})
}

func BenchmarkParseHTML(b *testing.B) {
	body := []byte(strings.Repeat(page, 20))
	kw := textproc.NewBuilder()
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		kw.Reset()
		Parse(HTML, "http://example.com/index.html", "text/html", body, kw, Options{})
	}
}

// TestHTMLReader checks that skipping the decoder for valid UTF-8 yields the
// bytes the decoder would have produced, and that other input still goes
// through it.
func TestHTMLReader(t *testing.T) {
	tests := []struct{ name, ct, body string }{
		{"utf-8 header", "text/html; charset=utf-8", "<title>Café ☕</title>"},
		{"no header", "text/html", "<html><title>Ünïcödé</title></html>"},
		{"bom", "", "\xef\xbb\xbf<title>bom</title>"},
		{"meta utf-8", "", `<meta charset="utf-8"><title>Ελληνικά</title>`},
		{"invalid utf-8", "text/html; charset=utf-8", "<title>bad \xff\xfe bytes</title>"},
		{"latin-1 header", "text/html; charset=iso-8859-1", "<title>Caf\xe9</title>"},
		{"latin-1 meta", "text/html", `<meta charset="iso-8859-1"><title>Caf` + "\xe9</title>"},
		{"windows-1252 sniffed", "", "<title>ascii only</title>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := io.ReadAll(htmlReader([]byte(tt.body), tt.ct))
			if err != nil {
				t.Fatal(err)
			}
			r, err := charset.NewReader(strings.NewReader(tt.body), tt.ct)
			if err != nil {
				t.Fatal(err)
			}
			want, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("got %q, want %q", got, want)
			}
		})
	}
}

// TestHTMLReaderLyingCharset: pages whose bytes are not the UTF-8 they
// claim, where x/net/html/charset settles on UTF-8 without decoding (a
// meta charset of utf-16, an unknown header charset, a valid first KiB),
// still come out as valid UTF-8 with U+FFFD for the invalid bytes, and
// so do the title and keywords parsed from them.
func TestHTMLReaderLyingCharset(t *testing.T) {
	bad := "caf\xe9 \xff\xfe \xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80 \xe2\x82"
	tests := []struct{ name, ct, body string }{
		{"meta utf-16", "text/html", `<meta charset="utf-16"><title>` + bad + `</title>`},
		{"unknown header charset, meta utf-16", "text/html; charset=x-klingon", `<meta charset="utf-16"><title>` + bad + `</title>`},
		{"meta utf-8", "text/html", `<meta charset="utf-8"><title>` + bad + `</title>`},
		{"header utf-8", "text/html; charset=utf-8", `<title>` + bad + `</title>`},
		{"valid first KiB", "", "<p>caf\xc3\xa9</p>" + strings.Repeat(" ", 1100) + "<title>" + bad + "</title>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := io.ReadAll(htmlReader([]byte(tt.body), tt.ct))
			if err != nil {
				t.Fatal(err)
			}
			if !utf8.Valid(got) {
				t.Fatalf("not UTF-8: %q", got)
			}
			kw := textproc.NewBuilder()
			d := Parse(HTML, "http://e.org/", tt.ct, []byte(tt.body), kw, Options{})
			if !utf8.ValidString(d.Title) || !strings.HasPrefix(d.Title, "caf") {
				t.Fatalf("title %q", d.Title)
			}
			for _, k := range kw.Top(100) {
				if !utf8.ValidString(k.Term) {
					t.Fatalf("keyword %q", k.Term)
				}
			}
		})
	}
}

// TestResolveCache checks that repeated and unusable references resolve as
// without the cache, and that <base href> applies to the links after it.
func TestResolveCache(t *testing.T) {
	body := `<html><head><base href="/docs/"></head><body>
<a href="a.html">one</a><a href="a.html">two</a><a href="javascript:x()">js</a><a href="javascript:x()">js</a>
<a href="../up.html">up</a><a href="a.html#frag">three</a></body></html>`
	d := Parse(HTML, "http://e.org/index.html", "text/html", []byte(body), nil, Options{})
	var got []string
	for _, l := range d.Links {
		got = append(got, l.URL+" "+l.Anchor)
	}
	want := []string{"http://e.org/docs/a.html one two three", "http://e.org/up.html up"}
	if !slices.Equal(got, want) {
		t.Fatalf("links %q, want %q", got, want)
	}
}

const structuredPage = `<html><head><title>Jazz</title>
<script type="application/ld+json">{"@context": "https://schema.org", "@type": "Event", "name": "Jazz Night",
 "url": "/events/jazz", "sameAs": "https://other.example/jazz", "location": {"@type": "Place", "name": "Blue Hall"}}</script>
<script type="application/ld+json">{"@context": "https://schema.org", "name": }</script>
</head><body><a href="/events/jazz">the night</a>
<div itemscope itemtype="http://schema.org/Organization"><span itemprop="name">Hall Ltd</span>
<a itemprop="sameAs" href="https://org.example/">site</a></div></body></html>`

// TestStructured: with Options.Structured, an HTML page's JSON-LD and
// microdata, a feed's items and an RDF/XML document become statements,
// and the IRIs they name become links FromStructured, after the page's
// own (an anchor keeps its source); without it, nothing changes.
func TestStructured(t *testing.T) {
	rss := `<rss version="2.0"><channel><title>News</title><link>http://e.org/</link>
<item><title>One</title><link>http://e.org/one</link><pubDate>Mon, 06 May 2024 07:08:09 +0000</pubDate><description>&lt;b&gt;first&lt;/b&gt; item</description></item>
<item><title>Two</title><guid>http://e.org/two</guid></item></channel></rss>`
	rdf := `<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:foaf="http://xmlns.com/foaf/0.1/">
<foaf:Person rdf:about="#me"><foaf:name>Me</foaf:name><foaf:knows rdf:resource="http://other.example/you"/></foaf:Person></rdf:RDF>`
	tests := []struct {
		name      string
		typ       Type
		url, body string
		stmts     int
		malformed int
		links     []string // FromStructured
	}{
		{"html", HTML, "http://e.org/dir/page", structuredPage, 10, 1, []string{"https://other.example/jazz"}}, // org.example is an anchor,
		{"rss 2.0", RSS, "http://e.org/feed.xml", rss, 15, 0, nil},
		{"rdf/xml", RDF, "http://e.org/me.rdf", rdf, 3, 0, nil}, // its resources are links FromRDF already
		// Entities of the DOCTYPE, as RDF Schemas and OWL ontologies write them.
		{"rdf/xml, entities", RDF, "http://e.org/me.rdf", `<?xml version="1.0"?>
<!DOCTYPE rdf:RDF [<!ENTITY rdf "http://www.w3.org/1999/02/22-rdf-syntax-ns#"> <!ENTITY foaf "http://xmlns.com/foaf/0.1/">]>
<rdf:RDF xmlns:rdf="&rdf;" xmlns:foaf="&foaf;"><rdf:Description rdf:about=""><rdf:type rdf:resource="&foaf;Person"/><foaf:name>Me &amp; I</foaf:name></rdf:Description></rdf:RDF>`, 2, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			off := Parse(tt.typ, tt.url, "", []byte(tt.body), nil, Options{})
			if len(off.Structured.Statements) != 0 {
				t.Fatalf("statements without Options.Structured")
			}
			d := Parse(tt.typ, tt.url, "", []byte(tt.body), nil, Options{Structured: true})
			if n := len(d.Structured.Statements); n != tt.stmts || d.Structured.Malformed != tt.malformed {
				for _, s := range d.Structured.Statements {
					t.Log(s)
				}
				t.Fatalf("%d statements, %d malformed; want %d, %d", n, d.Structured.Malformed, tt.stmts, tt.malformed)
			}
			var got []string
			for _, l := range d.Links {
				if l.Source == FromStructured {
					got = append(got, l.URL)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.links) {
				t.Fatalf("structured links %q, want %q", got, tt.links)
			}
			if len(d.Links) < len(off.Links) || !slices.Equal(d.Links[:len(off.Links)], off.Links) {
				t.Fatalf("the page's own links changed: %v, was %v", d.Links, off.Links)
			}
		})
	}
}

// TestDefinitionTerms: a definition list's term weighs as a minor heading
// (an API's name in a manual), in the tree walk and in the token
// fallback alike; its description as body text.
func TestDefinitionTerms(t *testing.T) {
	var filler strings.Builder // 300 distinct words first, so that position weighs little
	for i := range 300 {
		fmt.Fprintf(&filler, "q%c%c ", 'a'+i/26, 'a'+i%26)
	}
	doc := `<html><body><p>` + filler.String() + `</p><dl><dt>frobnicate(x)</dt><dd>Turns gizmo into widget.</dd></dl></body></html>`
	weights := func(body string) map[string]uint16 {
		kw := textproc.NewBuilder()
		Parse(HTML, "http://example.com/", "text/html", []byte(body), kw, Options{})
		out := map[string]uint16{}
		for _, k := range kw.Top(100) {
			out[k.Term] = k.Weight
		}
		return out
	}
	w := weights(doc)
	if w["frobnic"] == 0 || float64(w["frobnic"]) < 1.2*float64(w["gizmo"]) {
		t.Errorf("the definition's term weighs %d, its description %d", w["frobnic"], w["gizmo"])
	}
	// Nested past the tree builder's depth: the token fallback.
	deep := strings.Repeat("<div>", 600) + doc + strings.Repeat("</div>", 600)
	if w := weights(deep); w["frobnic"] == 0 || float64(w["frobnic"]) < 1.2*float64(w["gizmo"]) {
		t.Errorf("token fallback: the definition's term weighs %d, its description %d", w["frobnic"], w["gizmo"])
	}
}
