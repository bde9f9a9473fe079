package index

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"
)

// HTTPOptions configure Handler.
type HTTPOptions struct {
	// ReadOnly leaves out the routes that change profiles, for a handler
	// exposed to people who may search but not register interests.
	ReadOnly bool
}

// maxProfileBody bounds the JSON body of a profile.
const maxProfileBody = 64 << 10

// Handler returns a store's HTTP interface: a JSON API and a small HTML
// search page that works without JavaScript. Routes (all relative to where
// the handler is mounted; errors are {"error": "..."} with status 400 for
// bad parameters, 404 unknown, 410 removed page, 409 profile limit, 503
// closed):
//
//	GET    /                                 HTML search page: q, any=1, offset
//	GET    /api/search                       q, limit, offset, mode=all|any → results; q holds
//	                                         words, -word, type:TYPE, PROP=VALUE (parseQuery);
//	                                         each hit has its types and a few statements
//	GET    /api/record                       url → the stored record (JSONRecord)
//	GET    /api/stats                        counters
//	GET    /api/export                       every record as JSON Lines (application/x-ndjson);
//	                                         format=ntriples: every page's statements as
//	                                         N-Triples (application/n-triples)
//	GET    /api/profiles                     all profiles
//	GET    /api/profiles/{name}              one profile
//	PUT    /api/profiles/{name}              register or replace: {"keywords": [{"word": "java", "weight": 4}], "threshold": 0.1}
//	DELETE /api/profiles/{name}              remove
//	GET    /api/profiles/{name}/matches      limit, offset → matching records, most relevant first
//
// The handler does no authentication: the node decides who reaches it
// (HTTPOptions.ReadOnly drops PUT and DELETE).
func Handler(s Store, o HTTPOptions) http.Handler {
	x := &server{s: s, cfg: s.settings(), log: s.settings().logger}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", x.servePage)
	mux.HandleFunc("GET /api/search", x.serveSearch)
	mux.HandleFunc("GET /api/record", x.serveRecord)
	mux.HandleFunc("GET /api/stats", x.serveStats)
	mux.HandleFunc("GET /api/export", x.serveExport)
	mux.HandleFunc("GET /api/profiles", x.serveProfiles)
	mux.HandleFunc("GET /api/profiles/{name}", x.serveProfile)
	mux.HandleFunc("GET /api/profiles/{name}/matches", x.serveMatches)
	if !o.ReadOnly {
		mux.HandleFunc("PUT /api/profiles/{name}", x.servePutProfile)
		mux.HandleFunc("DELETE /api/profiles/{name}", x.serveDeleteProfile)
	}
	return mux
}

// server is the HTTP interface of one store.
type server struct {
	s   Store
	cfg *config
	log *slog.Logger
}

// badParam is a request parameter error.
type badParam struct{ msg string }

func (e badParam) Error() string { return e.msg }

func intParam(r *http.Request, name string, def int) (int, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, badParam{fmt.Sprintf("%s: %q is not an integer", name, s)}
	}
	return n, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// httpStatus maps an error to a status and a message safe to show.
func httpStatus(err error) (int, string) {
	var bp badParam
	switch {
	case errors.As(err, &bp), errors.Is(err, ErrBadQuery), errors.Is(err, ErrBadProfile):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound, err.Error()
	case errors.Is(err, ErrGone):
		return http.StatusGone, err.Error()
	case errors.Is(err, ErrTooManyProfiles):
		return http.StatusConflict, err.Error()
	case errors.Is(err, ErrClosed):
		return http.StatusServiceUnavailable, err.Error()
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, "request cancelled"
	}
	return http.StatusInternalServerError, "internal error"
}

func (x *server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, msg := httpStatus(err)
	if status == http.StatusInternalServerError {
		x.log.Error("http request failed", "path", r.URL.Path, "error", err)
	}
	writeJSON(w, status, map[string]string{"error": msg})
}

type jsonKeywords []JSONKeyword

// jsonPage is what a hit and a match say of the page, first in both.
type jsonPage struct {
	URL      string    `json:"url"`
	FinalURL string    `json:"final_url"`
	Title    string    `json:"title"`
	Lang     string    `json:"lang"`
	Type     string    `json:"type"`
	Time     time.Time `json:"time"`
}

type jsonHit struct {
	jsonPage
	Score    float64      `json:"score"`
	Keywords jsonKeywords `json:"keywords"`
	Matched  []string     `json:"matched"`
	// Types are the rdf:types of the page's items; Statements a few
	// statements about them. Both are empty lists for a page without
	// structured data.
	Types      []string        `json:"types"`
	Statements []JSONStatement `json:"statements"`
}

func toJSONHit(h *Hit) jsonHit {
	j := jsonHit{jsonPage: jsonPage{URL: h.URL, FinalURL: h.FinalURL, Title: h.Title, Lang: h.Lang, Type: h.Type.String(),
		Time: h.Time.UTC()}, Score: h.Score, Keywords: make(jsonKeywords, len(h.Keywords)), Matched: h.Matched,
		Types: append([]string{}, h.Types...), Statements: ToJSONStatements(h.Statements)}
	if j.Matched == nil {
		j.Matched = []string{}
	}
	for i, k := range h.Keywords {
		j.Keywords[i] = JSONKeyword(k)
	}
	return j
}

type jsonResults struct {
	Query     string      `json:"query"`
	Terms     []string    `json:"terms"`
	Excluded  []string    `json:"excluded"`
	Words     []string    `json:"words"`
	Without   []string    `json:"without"`
	Mode      string      `json:"mode"`
	Total     int         `json:"total"`
	Estimated bool        `json:"estimated"`
	Partial   bool        `json:"partial"`         // no page has all the words: hits have some of them
	Split     []jsonSplit `json:"split,omitempty"` // words no page has, searched as two words
	Offset    int         `json:"offset"`
	Limit     int         `json:"limit"`
	TookMS    float64     `json:"took_ms"`
	Hits      []jsonHit   `json:"hits"`
}

type jsonSplit struct {
	Word string   `json:"word"`
	As   []string `json:"as"`
}

// queryFrom reads a search request's parameters.
func queryFrom(r *http.Request, limitParam bool) (Query, error) {
	v := r.URL.Query()
	q := Query{Text: v.Get("q")}
	var err error
	if q.Offset, err = intParam(r, "offset", 0); err != nil {
		return q, err
	}
	if limitParam {
		if q.Limit, err = intParam(r, "limit", 0); err != nil {
			return q, err
		}
		if q.Limit == 0 && v.Get("limit") != "" {
			return q, badParam{"limit: must be positive"}
		}
	}
	switch m := v.Get("mode"); m {
	case "", "all":
	case "any":
		q.Any = true
	default:
		return q, badParam{fmt.Sprintf("mode: %q is neither all nor any", m)}
	}
	if v.Get("any") == "1" {
		q.Any = true
	}
	return q, nil
}

func (x *server) serveSearch(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	q, err := queryFrom(r, true)
	if err != nil {
		x.writeError(w, r, err)
		return
	}
	res, err := x.s.Search(r.Context(), q)
	if err != nil {
		x.writeError(w, r, err)
		return
	}
	j := jsonResults{Query: res.Query, Terms: res.Terms, Excluded: res.Excluded, Words: res.Words, Without: res.Without, Mode: "all",
		Total: res.Total, Estimated: res.Estimated, Partial: res.Partial, Offset: res.Offset, Limit: res.Limit,
		TookMS: float64(time.Since(start).Microseconds()) / 1000, Hits: make([]jsonHit, len(res.Hits))}
	if res.Any {
		j.Mode = "any"
	}
	for _, sp := range res.Split {
		j.Split = append(j.Split, jsonSplit(sp))
	}
	if j.Excluded == nil {
		j.Excluded = []string{}
	}
	if j.Without == nil {
		j.Without = []string{}
	}
	for i := range res.Hits {
		j.Hits[i] = toJSONHit(&res.Hits[i])
	}
	writeJSON(w, http.StatusOK, j)
}

func (x *server) serveRecord(w http.ResponseWriter, r *http.Request) {
	u := r.URL.Query().Get("url")
	if u == "" {
		x.writeError(w, r, badParam{"url: missing"})
		return
	}
	d, err := x.s.Get(r.Context(), u)
	if errors.Is(err, ErrGone) {
		writeJSON(w, http.StatusGone, map[string]any{
			"error": err.Error(), "url": d.URL, "time": d.Time.UTC(),
			"provenance": JSONProvenance{Node: d.Provenance.Node, Seq: d.Provenance.Seq, Received: d.Provenance.Received.UTC()},
		})
		return
	}
	if err != nil {
		x.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ToJSON(&d))
}

type jsonStats struct {
	Docs       int64      `json:"docs"`
	Tombstones int64      `json:"tombstones"`
	Terms      int64      `json:"terms"`
	Postings   int64      `json:"postings"`
	Profiles   int        `json:"profiles"`
	Matches    int64      `json:"matches"`
	Added      uint64     `json:"added"`
	Replaced   uint64     `json:"replaced"`
	Removed    uint64     `json:"removed"`
	Duplicates uint64     `json:"duplicates"`
	Stale      uint64     `json:"stale"`
	Rejected   uint64     `json:"rejected"`
	LastIngest *time.Time `json:"last_ingest"` // null before the first
}

func (x *server) serveStats(w http.ResponseWriter, r *http.Request) {
	if err := x.s.check(r.Context()); err != nil {
		x.writeError(w, r, err)
		return
	}
	s := x.s.Stats()
	j := jsonStats{Docs: s.Docs, Tombstones: s.Tombstones, Terms: s.Terms, Postings: s.Postings,
		Profiles: s.Profiles, Matches: s.Matches, Added: s.Added, Replaced: s.Replaced, Removed: s.Removed,
		Duplicates: s.Duplicates, Stale: s.Stale, Rejected: s.Rejected}
	if !s.LastIngest.IsZero() {
		t := s.LastIngest.UTC()
		j.LastIngest = &t
	}
	writeJSON(w, http.StatusOK, j)
}

// flushWriter flushes the response after each write of the buffered
// exporter, so that a long export streams.
type flushWriter struct {
	w io.Writer
	f http.Flusher
}

func (fw flushWriter) Write(p []byte) (int, error) {
	n, err := fw.w.Write(p)
	if fw.f != nil {
		fw.f.Flush()
	}
	return n, err
}

func (x *server) serveExport(w http.ResponseWriter, r *http.Request) {
	if err := x.s.check(r.Context()); err != nil {
		x.writeError(w, r, err)
		return
	}
	format := r.URL.Query().Get("format")
	h := w.Header()
	switch format {
	case "", "jsonl":
		h.Set("Content-Type", "application/x-ndjson; charset=utf-8")
		h.Set("Content-Disposition", `attachment; filename="micra-index.jsonl"`)
	case "ntriples":
		h.Set("Content-Type", "application/n-triples; charset=utf-8")
		h.Set("Content-Disposition", `attachment; filename="micra-index.nt"`)
	default:
		x.writeError(w, r, badParam{fmt.Sprintf("format: %q is neither jsonl nor ntriples", format)})
		return
	}
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	f, _ := w.(http.Flusher)
	var n int
	var err error
	if format == "ntriples" {
		var st NTriplesStats
		st, err = x.s.ExportNTriples(r.Context(), flushWriter{w, f})
		n = st.Pages
	} else {
		n, err = x.s.Export(r.Context(), flushWriter{w, f})
	}
	if err != nil {
		// The status is sent: the client sees a truncated stream.
		x.log.Warn("export interrupted", "format", format, "records", n, "error", err)
	}
}

type jsonProfileKeyword struct {
	Word   string  `json:"word"`
	Weight float64 `json:"weight"`
}

type jsonProfileTerm struct {
	Term   string  `json:"term"`
	Weight float64 `json:"weight"`
}

type jsonProfile struct {
	Name      string               `json:"name"`
	Keywords  []jsonProfileKeyword `json:"keywords"`
	Threshold float64              `json:"threshold"`
	Terms     []jsonProfileTerm    `json:"terms"`
	Updated   time.Time            `json:"updated"`
	Matches   int64                `json:"matches"`
	Pending   bool                 `json:"pending"`
}

func toJSONProfile(p *Profile) jsonProfile {
	j := jsonProfile{Name: p.Name, Threshold: p.Threshold, Updated: p.Updated.UTC(), Matches: p.Matches, Pending: p.Pending,
		Keywords: make([]jsonProfileKeyword, len(p.Keywords)), Terms: make([]jsonProfileTerm, len(p.Terms))}
	for i, k := range p.Keywords {
		j.Keywords[i] = jsonProfileKeyword(k)
	}
	for i, t := range p.Terms {
		j.Terms[i] = jsonProfileTerm(t)
	}
	return j
}

func (x *server) serveProfiles(w http.ResponseWriter, r *http.Request) {
	if err := x.s.check(r.Context()); err != nil {
		x.writeError(w, r, err)
		return
	}
	ps, err := x.s.Profiles(r.Context())
	if err != nil {
		x.writeError(w, r, err)
		return
	}
	out := make([]jsonProfile, len(ps))
	for i := range ps {
		out[i] = toJSONProfile(&ps[i])
	}
	writeJSON(w, http.StatusOK, map[string]any{"profiles": out})
}

func (x *server) serveProfile(w http.ResponseWriter, r *http.Request) {
	p, err := x.s.Profile(r.Context(), r.PathValue("name"))
	if err != nil {
		x.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toJSONProfile(&p))
}

// profileBody is what PUT /api/profiles/{name} accepts.
type profileBody struct {
	Name      string               `json:"name"` // optional; must equal the path's
	Keywords  []jsonProfileKeyword `json:"keywords"`
	Threshold float64              `json:"threshold"`
}

func (x *server) servePutProfile(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var b profileBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxProfileBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": fmt.Sprintf("profile larger than %d bytes", maxProfileBody)})
			return
		}
		x.writeError(w, r, badParam{"profile: " + err.Error()})
		return
	}
	if dec.More() {
		x.writeError(w, r, badParam{"profile: data after the JSON object"})
		return
	}
	if b.Name != "" && b.Name != name {
		x.writeError(w, r, badParam{fmt.Sprintf("profile: name %q differs from the path's %q", b.Name, name)})
		return
	}
	p := Profile{Name: name, Threshold: b.Threshold, Keywords: make([]ProfileKeyword, len(b.Keywords))}
	for i, k := range b.Keywords {
		p.Keywords[i] = ProfileKeyword(k)
	}
	got, err := x.s.PutProfile(r.Context(), p)
	if err != nil {
		x.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toJSONProfile(&got))
}

func (x *server) serveDeleteProfile(w http.ResponseWriter, r *http.Request) {
	if err := x.s.DeleteProfile(r.Context(), r.PathValue("name")); err != nil {
		x.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type jsonMatch struct {
	jsonPage
	Keywords  jsonKeywords `json:"keywords"`
	Relevance float64      `json:"relevance"`
	Terms     []string     `json:"terms"` // the profile's terms the record has
}

func (x *server) serveMatches(w http.ResponseWriter, r *http.Request) {
	limit, err := intParam(r, "limit", 0)
	if err == nil && limit == 0 && r.URL.Query().Get("limit") != "" {
		err = badParam{"limit: must be positive"}
	}
	var offset int
	if err == nil {
		offset, err = intParam(r, "offset", 0)
	}
	if err != nil {
		x.writeError(w, r, err)
		return
	}
	page, err := x.s.Matches(r.Context(), r.PathValue("name"), limit, offset)
	if err != nil {
		x.writeError(w, r, err)
		return
	}
	ms := make([]jsonMatch, len(page.Matches))
	for i := range page.Matches {
		m := &page.Matches[i]
		h := toJSONHit(&m.Hit)
		ms[i] = jsonMatch{jsonPage: h.jsonPage, Keywords: h.Keywords, Relevance: m.Relevance, Terms: m.Terms}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"profile": page.Profile, "total": page.Total, "offset": page.Offset, "limit": page.Limit, "matches": ms,
	})
}
