package index

import (
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/micra-net/micra/crawl"
)

// The search page is rendered on the server by html/template, which
// escapes every value for its context (text, attribute, URL: a URL that is
// not http, https or relative becomes "#ZgotmplZ"); it needs no JavaScript,
// and its Content-Security-Policy allows none, nor any remote resource.

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"join": func(s []string) string { return strings.Join(s, " ") },
	"date": func(t time.Time) string { return t.UTC().Format("2 Jan 2006") },
	"add":  func(a, b int) int { return a + b },
	"score": func(f float64) string {
		return strconv.FormatFloat(f, 'g', 3, 64)
	},
	"short":    ShortName,
	"typeLink": func(iri string) string { return pageLink("type:"+ShortName(iri), false, 0) },
	"mark":     markWords,
	"stems": func(kws []crawl.Keyword) string {
		out := make([]string, len(kws))
		for i, k := range kws {
			out[i] = k.Term
		}
		return strings.Join(out, " · ")
	},
	"value": displayValue,
}).Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex">
<title>{{if .Query}}{{.Query}} – {{end}}micra search</title>
<style>
body{font:16px/1.45 system-ui,sans-serif;margin:0;color:#1b1b1b;background:#fff}
header{padding:1rem 1.5rem;border-bottom:1px solid #ddd;background:#fafafa}
form{display:flex;flex-wrap:wrap;gap:.5rem;align-items:center;max-width:52rem}
.logo{font-weight:700;font-size:1.3rem;color:#2a5d9f;text-decoration:none;margin-right:.5rem}
input[type=search]{flex:1;min-width:12rem;font-size:1rem;padding:.45rem .6rem;border:1px solid #aaa;border-radius:4px}
button{font-size:1rem;padding:.45rem 1rem}
main{padding:0 1.5rem;max-width:52rem}
.meta{color:#555;font-size:.9rem}
ol{list-style:none;padding:0}
li{margin:0 0 1.3rem}
li a{font-size:1.12rem;color:#1a0dab;text-decoration:none;overflow-wrap:anywhere}
li a:hover{text-decoration:underline}
.url{color:#006621;font-size:.88rem;overflow-wrap:anywhere}
.info{color:#555;font-size:.85rem}
.terms{color:#333;font-size:.85rem}
.types{font-size:.85rem;color:#444;overflow-wrap:anywhere}
.types a{font-size:.85rem;color:#6a3d9a;font-weight:600}
.error{color:#a00;border-left:3px solid #a00;padding-left:.6rem}
nav{display:flex;gap:1.5rem;margin:1rem 0 2rem}
footer{color:#777;font-size:.8rem;padding:1rem 1.5rem;border-top:1px solid #eee}
</style>
</head>
<body>
<header>
<form method="get" action="" role="search">
<a class="logo" href="?">micra</a>
<input type="search" name="q" value="{{.Query}}" maxlength="{{.MaxQuery}}" aria-label="Search terms" placeholder="Search the pages volunteers crawled"{{if not .Query}} autofocus{{end}}>
<label><input type="checkbox" name="any" value="1"{{if .Any}} checked{{end}}> any word</label>
<button type="submit">Search</button>
</form>
</header>
<main>
{{- if .Error}}
<p class="error" role="alert">{{.Error}}</p>
{{- end}}
{{- with .Results}}
<p class="meta">{{if .Estimated}}About {{end}}{{.Total}} result{{if ne .Total 1}}s{{end}}{{if .Words}} for <b>{{join .Words}}</b>{{end}}{{if .Without}} without <b>{{join .Without}}</b>{{end}}{{if $.Took}} ({{$.Took}}){{end}}</p>
{{- with .Split}}
<p class="meta">No page has {{range $i, $s := .}}{{if $i}}, {{end}}<b>{{$s.Word}}</b>{{end}}: searched as {{range $i, $s := .}}{{if $i}}, {{end}}<b>{{join $s.As}}</b>{{end}}.</p>
{{- end}}
{{- if .Partial}}
<p class="meta">No page has all of these words: these pages have some of them, those with the most first.</p>
{{- end}}
{{- if .Hits}}
<ol>
{{- range .Hits}}
<li><a href="{{.FinalURL}}" rel="noreferrer nofollow">{{if .Title}}{{mark .Title $.Results.Terms}}{{else}}{{.URL}}{{end}}</a>
<div class="url">{{.FinalURL}}</div>
{{- with .Keywords}}
<div class="terms">{{stems .}}</div>
{{- end}}
<div class="info">crawled {{date .Time}}{{if .Matched}} · has {{range $i, $w := .Matched}}{{if $i}}, {{end}}<b>{{$w}}</b>{{end}}{{end}} · score {{score .Score}}</div>
{{- if .Types}}
<div class="types">{{range $i, $t := .Types}}{{if $i}} · {{end}}<a href="{{typeLink $t}}">{{short $t}}</a>{{end}}{{with .Statements}} — {{range $i, $s := .}}{{if $i}}; {{end}}{{short $s.P.Value}}: {{value $s.O}}{{end}}{{end}}</div>
{{- end}}</li>
{{- end}}
</ol>
{{- else}}
<p>No page matches{{if not .Any}} all of these words; try <a href="{{$.AnyLink}}">any word</a>{{end}}.</p>
{{- end}}
<nav>{{if $.Prev}}<a href="{{$.Prev}}">← Previous</a>{{end}}{{if $.Next}}<a href="{{$.Next}}">Next →</a>{{end}}</nav>
{{- end}}
</main>
<footer>{{.Docs}} pages indexed · searches use the crawler's stemming: “running” finds “run”; stop words are ignored unless they are all a query has (“if”, “GET”, “-v” are then looked up in titles and links); “-word” excludes; structured data: “type:Recipe”, “author=alice”, “schema:price=10”</footer>
</body>
</html>
`))

// markWords returns text, escaped, with the words whose stems are among
// terms in bold: why a title matched.
func markWords(text string, terms []string) template.HTML {
	var b strings.Builder
	word := func(w string) {
		hit := false
		for _, t := range crawl.Stems(w, 4) {
			if slices.Contains(terms, t) {
				hit = true
			}
		}
		if hit {
			b.WriteString("<b>" + template.HTMLEscapeString(w) + "</b>")
		} else {
			b.WriteString(template.HTMLEscapeString(w))
		}
	}
	start := -1
	for i, r := range text {
		letter := unicode.IsLetter(r) || unicode.IsDigit(r) || r == '\''
		switch {
		case letter && start < 0:
			start = i
		case !letter && start >= 0:
			word(text[start:i])
			start = -1
		}
		if !letter {
			b.WriteString(template.HTMLEscapeString(string(r)))
		}
	}
	if start >= 0 {
		word(text[start:])
	}
	return template.HTML(b.String())
}

// displayValue is how the search page shows a statement's object: an
// IRI by ShortName, a literal clipped to 80 bytes.
func displayValue(t crawl.Term) string {
	if t.Kind == crawl.TermIRI {
		return ShortName(t.Value)
	}
	if v := clip(t.Value, 80); len(v) < len(t.Value) {
		return v + "…"
	}
	return t.Value
}

type pageData struct {
	Query    string
	Any      bool
	MaxQuery int
	Error    string
	Results  *Results
	Took     string
	Prev     string
	Next     string
	AnyLink  string
	Docs     int64
}

// pageLink is a relative link to another page of results, so that the page
// works wherever the handler is mounted.
func pageLink(q string, any bool, offset int) string {
	v := url.Values{"q": {q}}
	if any {
		v.Set("any", "1")
	}
	if offset > 0 {
		v.Set("offset", strconv.Itoa(offset))
	}
	return "?" + v.Encode()
}

func (x *server) servePage(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	d := pageData{MaxQuery: x.cfg.maxQueryBytes, Docs: x.s.Stats().Docs}
	status := http.StatusOK
	q, err := queryFrom(r, false)
	d.Query, d.Any = q.Text, q.Any
	if err == nil && strings.TrimSpace(q.Text) != "" {
		q.Limit = x.cfg.defaultLimit
		var res *Results
		res, err = x.s.Search(r.Context(), q)
		if err == nil {
			d.Results = res
			d.Took = fmt.Sprintf("%.3f s", time.Since(start).Seconds())
			if res.Offset > 0 {
				d.Prev = pageLink(q.Text, q.Any, max(res.Offset-res.Limit, 0))
			}
			if next := res.Offset + res.Limit; next < res.Total && next+res.Limit <= x.cfg.maxWindow {
				d.Next = pageLink(q.Text, q.Any, next)
			}
			d.AnyLink = pageLink(q.Text, true, 0)
		}
	}
	if err != nil {
		status, d.Error = httpStatus(err)
		if status == http.StatusInternalServerError {
			x.log.Error("search page failed", "error", err)
		}
	}
	w.WriteHeader(status)
	if err := pageTmpl.Execute(w, d); err != nil {
		x.log.Debug("search page not sent", "error", err)
	}
}
