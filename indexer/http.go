package indexer

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/indexer/index"
	"github.com/micra-net/micra/requests"
)

// maxCrawlBody bounds the JSON body of a crawl request.
const maxCrawlBody = 1 << 20

// Handler returns the indexer's HTTP interface: every route of the index's
// Handler (search page, /api/search, /api/record, /api/stats, /api/export,
// /api/profiles...) and
//
//	GET  /api/indexer   delivery counters (Stats as JSON)
//	GET  /api/audits    the audits of each node's records ([]NodeAudits as JSON)
//	POST /api/crawl     {"urls": ["http://..."], "depth": 2, "owners": ["me"]}
//	                    → {"sent": n, "later": [{"url": "...", "error": "..."}], "failed": [...]}
//
// "later" are the URLs not delivered now that the indexer keeps and sends
// again: within 5 minutes those the owning node would not take now, after
// its crawl patience those whose node could not be reached; "failed" are
// those it does not keep (a special-purpose address, a host the policy
// refuses).
//
// With o.ReadOnly, /api/crawl is left out as well as the profile changes.
// The handler does no authentication: whoever runs it decides who reaches
// it.
func (ix *Indexer) Handler(o index.HTTPOptions) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", index.Handler(ix.x, o))
	mux.HandleFunc("GET /api/indexer", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, ix.Stats())
	})
	mux.HandleFunc("GET /api/audits", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, ix.Audited())
	})
	if !o.ReadOnly {
		mux.HandleFunc("POST /api/crawl", ix.serveCrawl)
	}
	return mux
}

// crawlBody is what POST /api/crawl accepts.
type crawlBody struct {
	URLs   []string `json:"urls"`
	Depth  *int     `json:"depth"` // absent: the crawlers' default
	Owners []string `json:"owners"`
}

type crawlFailure struct {
	URL   string `json:"url"`
	Error string `json:"error"`
}

func (ix *Indexer) serveCrawl(w http.ResponseWriter, r *http.Request) {
	var b crawlBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxCrawlBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		status := http.StatusBadRequest
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			status = http.StatusRequestEntityTooLarge
		}
		writeJSON(w, status, map[string]string{"error": "crawl request: " + err.Error()})
		return
	}
	if len(b.URLs) == 0 || len(b.URLs) > 4*requests.MaxCrawlRequests {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("crawl request: 1 to %d urls", 4*requests.MaxCrawlRequests)})
		return
	}
	depth := crawl.DefaultDepth
	if b.Depth != nil {
		depth = *b.Depth
	}
	// Depth and owners apply to every URL: wrong, the request is; a URL
	// that is not crawlable fails alone and the others go.
	if err := requests.CheckRequest(crawl.Request{Link: "http://example.com/", Depth: depth, Owners: b.Owners}); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "crawl request: " + requestProblem(err)})
		return
	}
	out := struct {
		Sent   int            `json:"sent"`
		Later  []crawlFailure `json:"later"`
		Failed []crawlFailure `json:"failed"`
	}{Later: []crawlFailure{}, Failed: []crawlFailure{}}
	var reqs []crawl.Request
	for _, u := range b.URLs {
		req := crawl.Request{Link: u, Depth: depth, Owners: b.Owners}
		if err := requests.CheckRequest(req); err != nil {
			out.Failed = append(out.Failed, crawlFailure{u, requestProblem(err)})
			continue
		}
		reqs = append(reqs, req)
	}
	if len(reqs) == 0 {
		writeJSON(w, http.StatusOK, out)
		return
	}
	res, err := ix.Submit(r.Context(), reqs)
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	for _, n := range res.Sent {
		out.Sent += n
	}
	for _, f := range res.Failed {
		if ix.isPending(f.Link) {
			out.Later = append(out.Later, crawlFailure{f.Link, f.Err.Error()})
		} else {
			out.Failed = append(out.Failed, crawlFailure{f.Link, f.Err.Error()})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// requestProblem is what is wrong with a crawl request, without the
// protocol's "malformed" prefix (the person asking sent no message).
func requestProblem(err error) string {
	return strings.TrimPrefix(err.Error(), requests.ErrMalformed.Error()+": ")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
