package world

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"strconv"
	"time"
)

// SchemaTypes are the schema.org types of the structured data sites
// publish (Params.Structured), one per site.
var SchemaTypes = []string{"Event", "Recipe", "Product", "Organization", "Article"}

// Formats of a site's structured data.
const (
	FormatJSONLD    = "json-ld"
	FormatMicrodata = "microdata"
)

// malformedStructured is the fraction of a structured site's pages whose
// structured data is broken: JSON-LD that does not parse or names a
// remote context, microdata whose type is not an absolute URL.
const malformedStructured = 0.1

// initStructured draws whether a site publishes structured data, in which
// format and of which type. It hashes the site's seed instead of drawing
// from the site's stream, so that worlds of before keep every other draw.
func (w *World) initStructured(s *siteRec) {
	h := mix(s.seed, "structured")
	if !(unit(h) < w.p.Structured) {
		return
	}
	s.schemaType = SchemaTypes[splitmix(h)%uint64(len(SchemaTypes))]
	s.format = FormatJSONLD
	if splitmix(h+1)%5 < 2 {
		s.format = FormatMicrodata
	}
}

// structuredMalformed reports whether page i's structured data is broken,
// and which way (0 or 1).
func (s *siteRec) structuredMalformed(i int) (bool, uint64) {
	h := mix(s.seed, "sd-bad", uint64(i))
	return unit(h) < malformedStructured, splitmix(h) % 2
}

// schemaProps returns page i's structured data as schema.org properties
// of the site's type, from values that do not change over time (so that
// they never make a page change by themselves). url is the page's URL;
// every IRI they hold is a link the page has anyway.
func (w *World) schemaProps(s *siteRec, i int, pageURL, home string) []prop {
	h := mix(s.seed, "sd", uint64(i))
	name := s.pageTitle(i)
	org := s.title
	if s.org != nil {
		org = s.org.name
	}
	day := time.Unix(s.created, 0).UTC().AddDate(0, 0, int(h%3650))
	word := func(k uint64) string { return vocabulary[splitmix(h+k)%uint64(len(vocabulary))] }
	switch s.schemaType {
	case "Event":
		return []prop{{"name", name}, {"url", iri(pageURL)}, {"startDate", day.Add(time.Duration(18+h%4) * time.Hour).Format("2006-01-02T15:04")},
			{"location", item{"Place", []prop{{"name", s.title}, {"address", strconv.Itoa(int(h%200)+1) + " " + title(word(1)) + " Street"}}}},
			{"organizer", item{"Organization", []prop{{"name", org}, {"url", iri(home)}}}}}
	case "Recipe":
		return []prop{{"name", name}, {"url", iri(pageURL)}, {"cookTime", "PT" + strconv.Itoa(int(h%90)+10) + "M"},
			{"recipeIngredient", word(2)}, {"recipeIngredient", word(3)}, {"recipeIngredient", word(4)},
			{"author", item{"Person", []prop{{"name", title(word(5)) + " " + title(word(6))}}}}}
	case "Product":
		return []prop{{"name", name}, {"url", iri(pageURL)}, {"sku", fmt.Sprintf("%s-%04d", s.name[:min(3, len(s.name))], h%10000)},
			{"brand", item{"Organization", []prop{{"name", org}}}},
			{"offers", item{"Offer", []prop{{"price", fmt.Sprintf("%d.99", h%200)}, {"priceCurrency", "EUR"}, {"availability", iri("https://schema.org/InStock")}}}}}
	case "Organization":
		return []prop{{"name", org}, {"url", iri(home)}, {"description", name}, {"foundingDate", time.Unix(s.created, 0).UTC().Format("2006-01-02")}}
	}
	return []prop{{"headline", name}, {"url", iri(pageURL)}, {"mainEntityOfPage", iri(pageURL)}, {"datePublished", day.Format("2006-01-02")},
		{"author", item{"Person", []prop{{"name", title(word(7)) + " " + title(word(8))}}}}, {"publisher", item{"Organization", []prop{{"name", org}}}}}
}

// prop is one property of structured data: its value is a string, an iri
// or a nested item.
type prop struct {
	name  string
	value any
}

type iri string

type item struct {
	typ   string
	props []prop
}

// writeJSONLD writes a page's structured data as a JSON-LD block.
func writeJSONLD(b *bytes.Buffer, typ string, props []prop, bad bool, how uint64) {
	b.WriteString("<script type=\"application/ld+json\">\n{\"@context\": ")
	if bad && how == 1 {
		b.WriteString(`"https://context.example.invalid/schema.jsonld"`) // a remote context the crawler refuses
	} else {
		b.WriteString(`"https://schema.org"`)
	}
	b.WriteString(", ")
	writeJSONObject(b, typ, props)
	if bad && how == 0 {
		b.WriteString(",") // a trailing comma: not JSON
	}
	b.WriteString("}\n</script>\n")
}

func writeJSONObject(b *bytes.Buffer, typ string, props []prop) {
	fmt.Fprintf(b, "\"@type\": %q", typ)
	seen := map[string]bool{}
	for k, p := range props {
		if seen[p.name] {
			continue
		}
		seen[p.name] = true
		b.WriteString(", ")
		b.Write(jsonString(p.name))
		b.WriteString(": ")
		var vals []any
		for _, q := range props[k:] {
			if q.name == p.name {
				vals = append(vals, q.value)
			}
		}
		if len(vals) > 1 {
			b.WriteByte('[')
		}
		for j, v := range vals {
			if j > 0 {
				b.WriteString(", ")
			}
			switch v := v.(type) {
			case string:
				b.Write(jsonString(v))
			case iri:
				b.Write(jsonString(string(v)))
			case item:
				b.WriteByte('{')
				writeJSONObject(b, v.typ, v.props)
				b.WriteByte('}')
			}
		}
		if len(vals) > 1 {
			b.WriteByte(']')
		}
	}
}

func jsonString(s string) []byte {
	out, _ := json.Marshal(s)
	return out
}

// microdataAttrs returns the attributes that make the element they are
// written on (the page's <main>) an item of the site's type; a broken
// page's type is a relative URL, which makes no item of it.
func microdataAttrs(typ string, bad bool) string {
	if bad {
		return ` itemscope itemtype="` + typ + `"`
	}
	return ` itemscope itemtype="https://schema.org/` + typ + `"`
}

// writeMicrodata writes an item's properties as elements that show no
// text, so that a page's words are the same with and without them.
func writeMicrodata(b *bytes.Buffer, props []prop) {
	for _, p := range props {
		switch v := p.value.(type) {
		case string:
			fmt.Fprintf(b, "<meta itemprop=\"%s\" content=\"%s\">\n", p.name, html.EscapeString(v))
		case iri:
			fmt.Fprintf(b, "<link itemprop=\"%s\" href=\"%s\">\n", p.name, html.EscapeString(string(v)))
		case item:
			fmt.Fprintf(b, "<div itemprop=\"%s\" itemscope itemtype=\"https://schema.org/%s\">\n", p.name, v.typ)
			writeMicrodata(b, v.props)
			b.WriteString("</div>\n")
		}
	}
}

// RenderPage returns the HTML of page i of site s (0 being its home page,
// up to s.Pages) as the site serves it at world time now on port, without
// a counter's or clock's variation. It is for benchmarks and tests of what
// crawlers make of pages; ok is false for an unknown site or page, or a
// page that answers with an error.
func (w *World) RenderPage(s Site, i, port int, now time.Time) (body []byte, ok bool) {
	if s.ID < 0 || s.ID >= len(w.sites) || i < 0 || i >= w.sites[s.ID].pages {
		return nil, false
	}
	sr := w.sites[s.ID]
	pi := w.pageInfo(sr, i)
	if pi.status != 200 {
		return nil, false
	}
	pi.trivial = 0
	rc := renderCtx{now: now.Unix(), base: w.siteBase(sr, port, false), port: port}
	v, _ := pi.version(sr, rc.now)
	var b bytes.Buffer
	w.renderPage(&b, sr, i, rc, v, pi)
	return b.Bytes(), true
}
