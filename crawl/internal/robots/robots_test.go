package robots

import (
	"strings"
	"testing"
	"time"

	"github.com/jimsmart/grobotstxt"
)

// rfcExample is the example of RFC 9309 section 5.1.
const rfcExample = `User-Agent: *
Disallow: *.gif$
Disallow: /example/
Allow: /publications/

User-Agent: foobot
Disallow:/
Allow:/example/page.html
Allow:/example/allowed.gif

User-Agent: barbot
User-Agent: bazbot
Disallow: /example/page.html

User-Agent: quxbot

EOF
`

func TestRFC9309(t *testing.T) {
	tests := []struct {
		name, body, agent, path string
		want                    bool
	}{
		// RFC 9309 section 5.1.
		{"5.1 global gif", rfcExample, "micra", "/images/a.gif", false},
		{"5.1 global dir", rfcExample, "micra", "/example/x.html", false},
		{"5.1 global allow", rfcExample, "micra", "/publications/a", true},
		{"5.1 global other", rfcExample, "micra", "/other", true},
		{"5.1 foobot root", rfcExample, "foobot", "/", false},
		{"5.1 foobot page", rfcExample, "foobot", "/example/page.html", true},
		{"5.1 foobot gif", rfcExample, "foobot", "/example/allowed.gif", true},
		{"5.1 foobot other", rfcExample, "FooBot", "/x", false},
		{"5.1 barbot page", rfcExample, "barbot", "/example/page.html", false},
		{"5.1 barbot gif not global", rfcExample, "barbot", "/a.gif", true},
		{"5.1 bazbot shares group", rfcExample, "bazbot", "/example/page.html", false},
		{"5.1 quxbot empty group", rfcExample, "quxbot", "/example/x", true},
		// RFC 9309 section 5.2: longest match.
		{"5.2 longest disallow", "User-Agent: foobot\nAllow: /example/page/\nDisallow: /example/page/disallowed.gif\n", "foobot", "/example/page/disallowed.gif", false},
		{"5.2 allow", "User-Agent: foobot\nAllow: /example/page/\nDisallow: /example/page/disallowed.gif\n", "foobot", "/example/page/x", true},
		// Section 2.2.2: allow wins ties.
		{"tie allow wins", "User-agent: *\nDisallow: /a\nAllow: /a\n", "micra", "/a", true},
		{"equal length pattern tie", "User-agent: *\nDisallow: /a*\nAllow: /a$\n", "micra", "/a", true},
		// Section 2.2.3: special characters.
		{"star middle", "User-agent: *\nDisallow: /path/file-with-a-*.html\n", "micra", "/path/file-with-a-wildcard.html", false},
		{"star middle no", "User-agent: *\nDisallow: /path/file-with-a-*.html\n", "micra", "/path/file-with-a-wildcard.htm", true},
		{"dollar end", "User-agent: *\nDisallow: /path/foo-$\n", "micra", "/path/foo-", false},
		{"dollar end no", "User-agent: *\nDisallow: /path/foo-$\n", "micra", "/path/foo-bar", true},
		{"dollar not at end is literal", "User-agent: *\nDisallow: /a$b\n", "micra", "/a$b", false},
		{"query", "User-agent: *\nDisallow: /*?sid=\n", "micra", "/page?sid=1", false},
		{"percent encoded non-ascii pattern", "User-agent: *\nDisallow: /foo/bar/\u30c4\n", "micra", "/foo/bar/%E3%83%84", false},
		// Section 2.2.1: user-agent case-insensitive, product token only.
		{"ua case", "User-agent: MICRA\nDisallow: /\n", "micra", "/", false},
		{"ua with version", "User-agent: micra/1.0\nDisallow: /\n", "micra", "/", false},
		{"ua other", "User-agent: micrabot\nDisallow: /\n", "micra", "/", true},
		{"specific shadows global", "User-agent: *\nDisallow: /\n\nUser-agent: micra\nAllow: /x\n", "micra", "/y", true},
		{"groups merge", "User-agent: micra\nDisallow: /a\n\nUser-agent: other\nDisallow: /\n\nUser-agent: micra\nDisallow: /b\n", "micra", "/b", false},
		{"empty disallow", "User-agent: *\nDisallow:\n", "micra", "/", true},
		{"rule before ua ignored", "Disallow: /\nUser-agent: *\nAllow: /\n", "micra", "/x", true},
		{"key typo tolerated", "User-agent: *\nDissallow: /x\n", "micra", "/x", false},
		{"robots.txt always allowed", "User-agent: *\nDisallow: /\n", "micra", "/robots.txt", true},
		{"comments", "User-agent: * # all\nDisallow: /x # no\n", "micra", "/x", false},
		{"crlf", "User-agent: *\r\nDisallow: /x\r\n", "micra", "/x", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Parse([]byte(tt.body), tt.agent)
			if got := r.Allowed(tt.path); got != tt.want {
				t.Fatalf("Allowed(%q) = %v, want %v", tt.path, got, tt.want)
			}
			if tt.path == "/robots.txt" {
				return
			}
			if ref := grobotstxt.AgentAllowed(tt.body, tt.agent, "http://example.com"+tt.path); ref != tt.want {
				t.Fatalf("reference disagrees with the test vector: %v", ref)
			}
		})
	}
}

func TestSizeLimit(t *testing.T) {
	// A disallow placed beyond 500 KiB must be ignored.
	body := "User-agent: *\nDisallow: /a\n" + strings.Repeat("# padding line\n", MaxSize/15+1) + "Disallow: /b\n"
	r := Parse([]byte(body), "micra")
	if r.Allowed("/a") {
		t.Fatal("rule inside the limit ignored")
	}
	if !r.Allowed("/b") {
		t.Fatal("rule past the 500 KiB limit applied")
	}
	if Parse([]byte(body[:MaxSize-100]+"\nDisallow: /b\n"), "micra").Allowed("/b") {
		t.Fatal("rule inside the limit ignored")
	}
}

func TestCrawlDelayAndSitemaps(t *testing.T) {
	body := "Sitemap: http://example.com/s.xml\nUser-agent: *\nCrawl-delay: 10\nDisallow: /cgi\n\nUser-agent: micra\nCrawl-delay: 2.5\nDisallow: /x\n"
	r := Parse([]byte(body), "micra")
	if r.CrawlDelay != 2500*time.Millisecond {
		t.Fatalf("CrawlDelay = %v", r.CrawlDelay)
	}
	if o := Parse([]byte(body), "other"); o.CrawlDelay != 10*time.Second {
		t.Fatalf("global CrawlDelay = %v", o.CrawlDelay)
	}
	if len(r.Sitemaps) != 1 || r.Sitemaps[0] != "http://example.com/s.xml" {
		t.Fatalf("Sitemaps = %q", r.Sitemaps)
	}
	if bad := Parse([]byte("User-agent: *\nCrawl-delay: -3\n"), "micra"); bad.CrawlDelay != 0 {
		t.Fatalf("negative delay accepted: %v", bad.CrawlDelay)
	}
}

func TestAllowDisallowAll(t *testing.T) {
	if !AllowAll().Allowed("/x") || DisallowAll().Allowed("/x") {
		t.Fatal("AllowAll/DisallowAll wrong")
	}
}

// FuzzRules checks that the compiled rules decide exactly as the reference
// matcher on arbitrary files and paths, and never panic.
func FuzzRules(f *testing.F) {
	f.Add(rfcExample, "/example/page.html", "foobot")
	f.Add("User-agent: *\nDisallow: /a*b$\nAllow: /a\n", "/axb", "micra")
	f.Add("user-agent: micra\nallow: /index.html\ndisallow: /\n", "/", "micra")
	f.Fuzz(func(t *testing.T, body, path, agent string) {
		r := Parse([]byte(body), agent)
		got := r.Allowed(path)
		// The reference normalises through net/url; compare only on paths
		// that survive that unchanged and on valid agents.
		if agent == "" || productToken(agent) != agent || !strings.HasPrefix(path, "/") || path == "/robots.txt" {
			return
		}
		if strings.ContainsFunc(path, func(r rune) bool { return r < 0x21 || r > 0x7e || strings.ContainsRune("%#\"<>\\^`{|}", r) }) {
			return
		}
		if want := grobotstxt.AgentAllowed(body, agent, "http://example.com"+path); got != want {
			t.Fatalf("Allowed(%q) = %v, reference %v", path, got, want)
		}
	})
}

func BenchmarkAllowed(b *testing.B) {
	r := Parse([]byte(rfcExample), "micra")
	b.ReportAllocs()
	for b.Loop() {
		r.Allowed("/publications/2024/some/long/path/file.html?x=1")
	}
}
