package node

import (
	"context"
	"html/template"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/micra-net/micra/indexer"
	"github.com/micra-net/micra/indexer/index"
)

// IndexerStatus is what an indexer's /api/status and status page show.
type IndexerStatus struct {
	PeerStatus
	// Store is "embedded" (the indexer's own database) or "postgres".
	Store    string `json:"store"`
	ReadOnly bool   `json:"read_only"`
	// Index: pages, terms, postings and profiles in the store, and the
	// outcomes of the records given to it since start.
	Index index.Stats `json:"index"`
	// Delivery: result messages, batches, acknowledgements, audits and
	// crawl requests since start (or since the last snapshot switch).
	Delivery indexer.Stats `json:"delivery"`
	Queries  QueryStats    `json:"queries"`
}

// QueryStats counts the searches the indexer answered since start.
type QueryStats struct {
	Count uint64  `json:"count"`
	P50ms float64 `json:"p50_ms"` // over the last 1,000
	P99ms float64 `json:"p99_ms"`
}

// Status returns what the indexer's status page shows.
func (x *Indexer) Status() IndexerStatus {
	l := x.cur.Load()
	store := "embedded"
	if x.cfg.Store != "" {
		store = "postgres"
	}
	st := IndexerStatus{
		PeerStatus: x.peerStatus(time.Now()), Store: store, ReadOnly: x.cfg.ReadOnly,
		Index: x.idx.Stats(), Delivery: l.ix.Stats(),
	}
	st.Queries.Count, st.Queries.P50ms, st.Queries.P99ms = x.queries.summary()
	return st
}

// indexerHTTP serves the indexer's own routes beside the running
// indexer's: /api/status, the status page at /status and Prometheus
// metrics at /metrics; searches (/api/search, and the search page with a
// query) are counted and timed.
func (x *Indexer) indexerHTTP() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metricsHandler(x.queries.hist, &statsCollector{descs: indexerDescs(), collect: x.collect}))
	status := func(context.Context) (IndexerStatus, error) { return x.Status(), nil }
	handleStatus(mux, "GET /status", status, func(w io.Writer, st IndexerStatus) error { return indexerPage.Execute(w, st) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h := x.cur.Load().handler
		if r.URL.Path != "/api/search" && (r.URL.Path != "/" || r.URL.Query().Get("q") == "") {
			h.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		h.ServeHTTP(w, r)
		x.queries.observe(time.Since(start))
	})
	return mux
}

// indexerDescs are the indexer's own metrics.
func indexerDescs() map[string]*prometheus.Desc {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("micra_indexer_"+name, help, nil, nil)
	}
	return map[string]*prometheus.Desc{
		"pages":    desc("pages", "Searchable pages in the index."),
		"terms":    desc("terms", "Distinct terms in the index."),
		"added":    desc("records_added_total", "Records that added a page to the index since start."),
		"replaced": desc("records_replaced_total", "Records that replaced a page's older record since start."),
		"batches":  desc("batches_stored_total", "Result batches stored since start."),
		"acks":     desc("batches_acknowledged_total", "Acknowledgements of stored batches delivered since start."),
		"rejected": desc("batches_rejected_total", "Result messages or batches that failed verification since start."),
		"pending":  desc("crawl_requests_pending", "Crawl requests waiting for a record of their page."),
		"peers":    desc("peers", "Connected libp2p peers."),
	}
}

// collect reports the indexer's own metrics (indexerDescs) with put.
func (x *Indexer) collect(put putFunc) {
	is := x.idx.Stats()
	ds := x.cur.Load().ix.Stats()
	put("pages", prometheus.GaugeValue, float64(is.Docs))
	put("terms", prometheus.GaugeValue, float64(is.Terms))
	put("added", prometheus.CounterValue, float64(is.Added))
	put("replaced", prometheus.CounterValue, float64(is.Replaced))
	put("batches", prometheus.CounterValue, float64(ds.Batches))
	put("acks", prometheus.CounterValue, float64(ds.Acks))
	put("rejected", prometheus.CounterValue, float64(ds.Rejected))
	put("pending", prometheus.GaugeValue, float64(ds.Pending))
	put("peers", prometheus.GaugeValue, float64(len(x.h.Network().Peers())))
}

var indexerPage = template.Must(template.New("indexer").Funcs(template.FuncMap{
	"when": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	"up":   func(st IndexerStatus) string { return st.Now.Sub(st.Started).Round(time.Second).String() },
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>micra indexer {{.Peer}}</title>
<meta http-equiv="refresh" content="10">
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;max-width:70em;color:#222}
h1{font-size:1.3em} table{border-collapse:collapse} td,th{padding:.2em .8em .2em 0;text-align:left}
.muted{color:#777} code{font-size:12px}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(14em,1fr));gap:.5em 2em}
.n{font-size:1.4em;font-weight:600}
</style></head><body>
<h1>micra indexer</h1>
<p><code id="peer">{{.Peer}}</code><br><span class="muted">snapshot <code>{{.Snapshot}}</code> · up {{up .}} · since {{when .Started}} · store {{.Store}}{{if .ReadOnly}}, read-only{{end}} · <a href="/">search</a></span></p>
<div class="grid">
<div><div class="n" id="pages">{{.Index.Docs}}</div>pages searchable</div>
<div><div class="n" id="terms">{{.Index.Terms}}</div>distinct terms</div>
<div><div class="n" id="batches">{{.Delivery.Batches}}</div>batches stored</div>
<div><div class="n" id="acks">{{.Delivery.Acks}}</div>batches acknowledged</div>
<div><div class="n" id="rejected">{{.Delivery.Rejected}}</div>messages rejected</div>
<div><div class="n" id="pending">{{.Delivery.Pending}}</div>crawl requests waiting</div>
<div><div class="n" id="queries">{{.Queries.Count}}</div>searches answered (p50 {{printf "%.2f" .Queries.P50ms}} ms, p99 {{printf "%.2f" .Queries.P99ms}} ms)</div>
<div><div class="n" id="peers">{{.Peers}}</div>peers</div>
<div><div class="n" id="shards">{{.Shards}}</div>shards coordinated</div>
</div>
<h2>Listening on</h2>
<table>{{range .Addrs}}<tr><td><code>{{.}}</code></td></tr>{{end}}</table>
<p class="muted"><a href="/api/status">/api/status</a> · <a href="/metrics">/metrics</a></p>
</body></html>`))
