package node

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/micra-net/micra/internal/worldmap"
	"github.com/micra-net/micra/subnet"
)

// PeerStatus is what the statuses of a node and of an indexer share: the
// peer, its snapshot and its place in the network. Its fields stand
// beside the role's in the JSON.
type PeerStatus struct {
	Peer     string    `json:"peer"`     // libp2p peer id
	Addrs    []string  `json:"addrs"`    // listen multiaddrs
	Snapshot string    `json:"snapshot"` // subnet snapshot id
	Started  time.Time `json:"started"`  //
	Now      time.Time `json:"now"`      //
	Peers    int       `json:"peers"`    // connected peers
	Shards   int       `json:"shards"`   // shards of the overlay this peer coordinates
}

// Status is everything the dashboard and "micra status" show about a
// running node. The same value is served as JSON at /api/status and
// rendered at /, so the page and the API cannot disagree.
type Status struct {
	PeerStatus
	Capacity int      `json:"capacity"` // pages per day offered
	Load     int      `json:"load"`     // pages per day delegated
	Window   Window   `json:"window"`   //
	Crawl    Crawl    `json:"crawl"`    //
	Outbox   Outbox   `json:"outbox"`   //
	Probes   Probes   `json:"probes"`   //
	Audits   Audits   `json:"audits"`   //
	Trust    Trust    `json:"trust"`    // claims rejected and subnets taken back, as a coordinator
	Subnets  []Subnet `json:"subnets"`  // delegated to this node, nearest first
	// Adopted counts the subnets this node took up because a
	// coordinator's heartbeat acknowledgement listed them as its own
	// while the ASSIGN had never reached it.
	Adopted  int64    `json:"adopted"`
	Indexers int      `json:"indexers"`          // designated indexers known
	Release  *Release `json:"release,omitempty"` // the release replacing the snapshot, when known
	// ReleasesRefused counts snapshot releases refused (unsigned, signed
	// by a key not in snapshot_keys, malformed or with times out of
	// bounds), and ReleaseBadPeers peers that served a wrong snapshot file.
	ReleasesRefused int64    `json:"releases_refused"`
	ReleaseBadPeers int64    `json:"release_bad_peers"`
	Warnings        []string `json:"warnings"` // conditions an operator should see
	RateChart       []Point  `json:"rate"`     // pages fetched per minute, oldest first
	// Reachability is what AutoNAT found: "public" (peers can dial the
	// node), "private" (behind NAT or a firewall: it reserves relay slots,
	// whose p2p-circuit addresses join Addrs) or "unknown" (not yet known).
	Reachability string `json:"reachability"`
	// Conns are the open libp2p connections (at most 512), oldest first:
	// which are direct and which go through a relay, for operators behind
	// NAT and for the NAT test (internal/nattest).
	Conns []Conn `json:"conns"`
	// Map are the dots of the world map: this node, its peers and its
	// delegated subnets at their registry countries (at most 600).
	Map []Place `json:"map"`
	// Changes are the latest changes of the delegated subnets with their
	// reasons, newest first (at most 64).
	Changes []Change `json:"changes"`
}

// Change is a subnet delegated to this node, or no longer, and why.
type Change struct {
	At     time.Time `json:"at"`
	Range  string    `json:"range"`
	Gained bool      `json:"gained"`
	Own    bool      `json:"own"` // the subnet of the node's own address
	Reason string    `json:"reason"`
}

// Conn is one open libp2p connection.
type Conn struct {
	Peer    string    `json:"peer"`
	Remote  string    `json:"remote"`  // the peer's multiaddr, as dialled or accepted
	Relayed bool      `json:"relayed"` // through a circuit relay (limited); else direct
	Inbound bool      `json:"inbound"` // opened by the peer
	Opened  time.Time `json:"opened"`
}

// Release is a signed snapshot release that replaces the snapshot the node
// runs.
type Release struct {
	Snapshot   string    `json:"snapshot"`
	Activation time.Time `json:"activation"`
	Ready      bool      `json:"ready"`   // its file is fetched and checked
	Holders    int       `json:"holders"` // peers that announced holding the file
}

// Window is the state of the operator's crawl windows.
type Window struct {
	Open bool      `json:"open"`
	Next time.Time `json:"next"` // when it next opens or closes; zero without windows
}

// Crawl are the crawler's counters.
type Crawl struct {
	Fetched int64 `json:"fetched"`
	Records int64 `json:"records"`
	Queued  int64 `json:"queued"`
	// Outgoing counts links for other nodes' subnets waiting to be handed
	// on; Forwarded those handed on (acknowledged by their owner).
	Outgoing  int64 `json:"outgoing"`
	Forwarded int64 `json:"forwarded"`
	Hosts     int64 `json:"hosts"`
	InFlight  int64 `json:"in_flight"`
	Bytes     int64 `json:"bytes"` // downloaded
	Errors    int64 `json:"errors"`
	// RobotsDenied counts requests taken off the queues because robots.txt
	// disallows them.
	RobotsDenied int64 `json:"robots_denied"`
	// Paused says why crawling is paused by a limit of the node's (the
	// disk cap), "" when it is not.
	Paused string `json:"paused,omitempty"`
	// Crawling are the hosts being fetched or processed now (at most 32).
	Crawling []string `json:"crawling"`
	// TodayBytes were downloaded today (in the windows' time zone);
	// DailyCap is daily_transfer, 0 without one.
	TodayBytes int64 `json:"today_bytes"`
	DailyCap   int64 `json:"daily_cap"`
}

// Outbox is the state of the results outbox.
type Outbox struct {
	Batches int   `json:"batches"` // waiting for acknowledgement
	Bytes   int64 `json:"bytes"`
	Cap     int64 `json:"cap"`
	Acked   int64 `json:"acked"` // batches acknowledged since start
}

// Probes counts the probes this node ran for coordinators and asked of
// others as a coordinator.
type Probes struct {
	Run    int64 `json:"run"`
	Issued int64 `json:"issued"`
}

// Audits counts this node's part in audits of volunteers' results: as a
// coordinator judging other nodes' records, and as an auditor fetching
// pages afresh for coordinators.
type Audits struct {
	Judged      int64    `json:"judged"`      // audits judged as a coordinator
	Refetched   int64    `json:"refetched"`   // pages fetched afresh for audits
	Convictions int64    `json:"convictions"` // nodes convicted as a coordinator since start
	Convicted   []string `json:"convicted"`   // nodes convicted in the shards it coordinates now
}

// Trust counts what this node, as a coordinator, did about volunteers
// that lie or go silent.
type Trust struct {
	// ClaimsRejected counts winning probes found impossible by the
	// triangle inequality (subnet.ClaimCheck); Barred lists the nodes
	// whose claims failed and whom its decisions do not ask for now.
	ClaimsRejected int64    `json:"claims_rejected"`
	Barred         []string `json:"barred"`
	// TakenBack counts subnets taken from their nodes and decided again,
	// by reason: "orphaned" (silent past the liveness timeout),
	// "convicted" (by audits), "withheld" (crawl requests left unanswered:
	// indexers' notices, the page confirmed reachable by an auditor),
	// "refused" (crawl requests not taken, the coordinator's too).
	TakenBack map[string]int64 `json:"taken_back"`
}

// Subnet is one subnet delegated to this node.
type Subnet struct {
	Range string `json:"range"`
	Org   string `json:"org"` // the registry's handle of the organisation
	// OrgName is the organisation's name where the snapshot has it.
	OrgName string    `json:"org_name,omitempty"`
	RTTms   float64   `json:"rtt_ms"` // the probe that won it; negative when none
	Since   time.Time `json:"since"`
}

// Point is one value of a time series.
type Point struct {
	T time.Time `json:"t"`
	V float64   `json:"v"`
}

// StatusFunc returns the node's current status.
type StatusFunc func(ctx context.Context) (Status, error)

// Dashboard returns the local dashboard: the page at /, the same facts as
// JSON at /api/status and, when metrics is not nil, Prometheus metrics at
// /metrics. With a token, every request must carry it (Authorization:
// Bearer, or ?token= once, which sets a cookie).
func Dashboard(status StatusFunc, token string, metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	handleStatus(mux, "GET /{$}", status, func(w io.Writer, st Status) error { return page.Execute(w, view(st)) })
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	return secure(mux, token)
}

// handleStatus serves, on mux, a status read with status: as JSON at
// GET /api/status and as the page render writes at pattern. When status
// fails, both answer 503 with its error.
func handleStatus[S any](mux *http.ServeMux, pattern string, status func(context.Context) (S, error), render func(io.Writer, S) error) {
	read := func(w http.ResponseWriter, r *http.Request, contentType string) (S, bool) {
		st, err := status(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return st, false
		}
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Cache-Control", "no-store")
		return st, true
	}
	mux.HandleFunc("GET /api/status", func(w http.ResponseWriter, r *http.Request) {
		if st, ok := read(w, r, "application/json"); ok {
			_ = json.NewEncoder(w).Encode(st)
		}
	})
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if st, ok := read(w, r, "text/html; charset=utf-8"); ok {
			if err := render(w, st); err != nil {
				http.Error(w, "rendering failed", http.StatusInternalServerError)
			}
		}
	})
}

// ReleaseFunc hands a signed snapshot release and its snapshot file to the
// node, which checks both and spreads them (overlay.PublishRelease).
type ReleaseFunc func(ctx context.Context, release, file []byte) error

// ReleaseContentType is the content type of a POST to /api/release: the
// release's subnet.ReleaseSize bytes, then the snapshot file. A type of its
// own makes a browser ask before sending it cross-origin, so that a web
// page cannot post to a dashboard on loopback.
const ReleaseContentType = "application/x-micra-release"

// ReleaseHandler serves POST /api/release (see ReleaseContentType) with
// publish, behind the dashboard's token: 204 when the node took the
// release, 400 with the reason when it did not.
func ReleaseHandler(publish ReleaseFunc, token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/release", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") != ReleaseContentType {
			http.Error(w, "content type must be "+ReleaseContentType, http.StatusUnsupportedMediaType)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, subnet.ReleaseSize+maxReleaseUpload))
		if err != nil {
			http.Error(w, "reading the release: "+err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		if len(body) <= subnet.ReleaseSize {
			http.Error(w, fmt.Sprintf("%d bytes: a release (%d bytes) and its snapshot file are needed", len(body), subnet.ReleaseSize), http.StatusBadRequest)
			return
		}
		if err := publish(r.Context(), body[:subnet.ReleaseSize], body[subnet.ReleaseSize:]); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return secure(mux, token)
}

// maxReleaseUpload bounds the snapshot file posted with a release.
const maxReleaseUpload = 64 << 20

// secure adds headers every response needs and checks the token.
func secure(next http.Handler, token string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		if token != "" {
			got := ""
			if a := r.Header.Get("Authorization"); strings.HasPrefix(a, "Bearer ") {
				got = strings.TrimPrefix(a, "Bearer ")
			} else if q := r.URL.Query().Get("token"); q != "" {
				got = q
			} else if c, err := r.Cookie("micra_token"); err == nil {
				got = c.Value
			}
			if subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
				http.Error(w, "a dashboard token is required", http.StatusUnauthorized)
				return
			}
			if r.URL.Query().Get("token") != "" {
				http.SetCookie(w, &http.Cookie{Name: "micra_token", Value: token, HttpOnly: true, SameSite: http.SameSiteStrictMode, Path: "/"})
			}
		}
		next.ServeHTTP(w, r)
	})
}

// pageView is what the template renders.
type pageView struct {
	Status
	Uptime     string
	RateSVG    template.HTML
	LatencySVG template.HTML
	MapSVG     template.HTML
}

func view(st Status) pageView {
	v := pageView{Status: st, Uptime: st.Now.Sub(st.Started).Round(time.Second).String()}
	v.RateSVG = lineChart(st.RateChart, "pages a minute")
	var bars []bar
	for _, s := range st.Subnets {
		if s.RTTms >= 0 {
			bars = append(bars, bar{label: s.Range, value: s.RTTms})
		}
	}
	v.LatencySVG = barChart(bars, "ms")
	v.MapSVG = worldMap(st.Map)
	return v
}

// worldMap draws the land and the places as an inline SVG: this node in
// red, peers in green, delegated subnets in blue, each with its label and
// country as a tooltip.
func worldMap(places []Place) template.HTML {
	var b strings.Builder
	b.WriteString(`<svg viewBox="0 0 360 180" width="720" height="360" role="img" aria-label="world map" id="map">`)
	b.WriteString(`<rect width="360" height="180" fill="#eef4fa"/><path fill="#d9d9d9" stroke="#bbb" stroke-width="0.2" d="`)
	b.WriteString(worldmap.Land())
	b.WriteString(`"/>`)
	style := map[string]string{"self": `r="3" fill="#c33"`, "peer": `r="2" fill="#2a6"`, "subnet": `r="1.6" fill="#36c" fill-opacity="0.7"`}
	for _, kind := range []string{"subnet", "peer", "self"} { // this node on top
		for _, p := range places {
			if p.Kind == kind {
				fmt.Fprintf(&b, `<circle class="place-%s" cx="%.1f" cy="%.1f" %s><title>%s (%s)</title></circle>`,
					kind, p.X, p.Y, style[kind], template.HTMLEscapeString(p.Label), template.HTMLEscapeString(p.Country))
			}
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

type bar struct {
	label string
	value float64
}

// lineChart draws a series as an inline SVG with its axes: the value
// axis from 0 to the series' peak (rounded up), the time axis from the
// first point to the last, and the last value written out.
func lineChart(pts []Point, unit string) template.HTML {
	const left, w, h, top = 48.0, 560.0, 140.0, 10.0
	if len(pts) < 2 {
		return template.HTML(`<p class="muted">not enough data yet</p>`)
	}
	peak := 0.0
	for _, p := range pts {
		peak = math.Max(peak, p.V)
	}
	maxV := niceCeil(peak)
	x := func(i int) float64 { return left + w*float64(i)/float64(len(pts)-1) }
	y := func(v float64) float64 { return top + h - h*v/maxV }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="%s" font-size="11">`,
		left+w+8, top+h+34, left+w+8, top+h+34, template.HTMLEscapeString(unit))
	for _, v := range []float64{0, maxV / 2, maxV} {
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.0f" y="%.1f" text-anchor="end">%s</text>`,
			left, left+w, y(v), y(v), left-4, y(v)+4, humanize.CommafWithDigits(v, 1))
	}
	b.WriteString(`<polyline fill="none" stroke="#2a6" stroke-width="2" points="`)
	for i, p := range pts {
		fmt.Fprintf(&b, "%.1f,%.1f ", x(i), y(p.V))
	}
	span := int(pts[len(pts)-1].T.Sub(pts[0].T).Round(time.Minute).Minutes())
	last := pts[len(pts)-1].V
	fmt.Fprintf(&b, `"/><text x="%.0f" y="%.0f">%d min ago</text><text x="%.0f" y="%.0f" text-anchor="end">now</text>`,
		left, top+h+16, span, left+w, top+h+16)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" id="rate-now">now: %s %s</text></svg>`,
		left, top+h+32, humanize.CommafWithDigits(last, 1), template.HTMLEscapeString(unit))
	return template.HTML(b.String())
}

// niceCeil rounds v up to a round number (1, 1.5, 2, 3, 4, 5, 6 or 8
// times a power of ten; 1 at least), for an axis' end.
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.5, 2, 3, 4, 5, 6, 8, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// barChart draws horizontal bars, one per label, as an inline SVG.
func barChart(bars []bar, unit string) template.HTML {
	if len(bars) == 0 {
		return template.HTML(`<p class="muted">no delegated subnet has a known RTT (own claims and subnets decided from other subnets' probes have none)</p>`)
	}
	sort.SliceStable(bars, func(i, j int) bool { return bars[i].value < bars[j].value })
	if len(bars) > 40 {
		bars = bars[:40]
	}
	maxV := 1.0
	for _, x := range bars {
		maxV = math.Max(maxV, x.value)
	}
	const w, rowH = 600.0, 16.0
	var b strings.Builder
	fmt.Fprintf(&b, `<svg viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="latency">`, w, rowH*float64(len(bars)), w, rowH*float64(len(bars)))
	for i, x := range bars {
		y := rowH * float64(i)
		bw := (w - 260) * x.value / maxV
		fmt.Fprintf(&b, `<text x="0" y="%.0f" font-size="11">%s</text><rect x="200" y="%.0f" width="%.1f" height="%.0f" fill="#48c"/><text x="%.1f" y="%.0f" font-size="11">%.1f %s</text>`,
			y+12, template.HTMLEscapeString(x.label), y+2, bw, rowH-4, 204+bw, y+12, x.value, template.HTMLEscapeString(unit))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

var page = template.Must(template.New("dashboard").Funcs(template.FuncMap{
	"ms": func(v float64) string {
		if v < 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", v)
	},
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"mib":   func(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) },
	"num":   func(n any) string { return humanize.Comma(toInt64(n)) },
	"bytes": func(n int64) string { return humanize.IBytes(uint64(max(n, 0))) },
	"pct": func(part, whole int) string {
		if whole <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f %%", 100*float64(part)/float64(whole))
	},
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>micra node {{.Peer}}</title>
<meta http-equiv="refresh" content="10">
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;max-width:70em;color:#222}
h1{font-size:1.3em} h2{font-size:1.05em;margin-top:1.5em}
table{border-collapse:collapse} td,th{padding:.2em .8em .2em 0;text-align:left;vertical-align:top}
.muted{color:#777} .warn{color:#a40} code{font-size:12px}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(14em,1fr));gap:.5em 2em}
.n{font-size:1.4em;font-weight:600}
</style></head><body>
<h1>micra node</h1>
<p><code id="peer">{{.Peer}}</code><br><span class="muted">snapshot <code id="snapshot">{{.Snapshot}}</code> · up {{.Uptime}} · since {{when .Started}}</span>
{{with .Release}}<br><span class="muted" id="release">next snapshot <code>{{.Snapshot}}</code> from {{when .Activation}} · {{if .Ready}}file ready{{else}}fetching its file ({{.Holders}} peers hold it){{end}}</span>{{end}}</p>
{{range .Warnings}}<p class="warn">{{.}}</p>{{end}}
<div class="grid">
<div><div class="n" id="peers">{{.Peers}}</div>peers</div>
<div><div class="n" id="subnets">{{len .Subnets}}</div>delegated subnets</div>
<div><div class="n" id="adopted">{{.Adopted}}</div>subnets taken up from coordinators' lists</div>
<div><div class="n" id="shards">{{.Shards}}</div>shards coordinated</div>
<div><div class="n" id="fetched">{{num .Crawl.Fetched}}</div>pages fetched</div>
<div><div class="n" id="queued">{{num .Crawl.Queued}}</div>URLs queued</div>
<div><div class="n" id="outgoing">{{num .Crawl.Outgoing}}</div>URLs for other nodes</div>
<div><div class="n" id="outbox">{{.Outbox.Batches}}</div>batches in the outbox ({{mib .Outbox.Bytes}} of {{mib .Outbox.Cap}})</div>
<div><div class="n" id="probes-run">{{.Probes.Run}}</div>probes run</div>
<div><div class="n" id="probes-issued">{{.Probes.Issued}}</div>probes issued</div>
<div><div class="n" id="audits">{{.Audits.Judged}}/{{.Audits.Refetched}}</div>audits judged / pages refetched for audits</div>
<div><div class="n" id="claims-rejected">{{.Trust.ClaimsRejected}}</div>probe claims rejected</div>
<div><div class="n" id="taken-back">{{range $r, $n := .Trust.TakenBack}}{{$n}} {{$r}} {{else}}0{{end}}</div>subnets taken back, by reason</div>
<div><div class="n" id="window">{{if .Window.Open}}open{{else}}closed{{end}}</div>crawl window (next change {{when .Window.Next}})</div>
<div><div class="n" id="load">{{pct .Load .Capacity}}</div>of the capacity delegated: {{num .Load}} of {{num .Capacity}} pages a day</div>
<div><div class="n" id="today">{{bytes .Crawl.TodayBytes}}</div>downloaded today{{if .Crawl.DailyCap}} of the {{bytes .Crawl.DailyCap}} daily cap{{else}} (no daily cap){{end}}</div>
</div>
<h2>Crawling now</h2>
{{if .Crawl.Crawling}}<p id="crawling">{{range $i, $h := .Crawl.Crawling}}{{if $i}}, {{end}}<code>{{$h}}</code>{{end}}</p>{{else}}<p class="muted" id="crawling">no page being fetched</p>{{end}}
<h2>Where its subnets and peers are</h2>
{{.MapSVG}}
<p class="muted"><span style="color:#c33">●</span> this node · <span style="color:#2a6">●</span> peers · <span style="color:#36c">●</span> servers of its delegated subnets; each at its address's registry country. Land: Natural Earth (public domain); country positions from <a href="https://db-ip.com">IP Geolocation by DB-IP</a> (CC BY 4.0).</p>
<h2>Crawl rate</h2>
{{.RateSVG}}
<h2>Latency to the subnets this node crawls</h2>
{{.LatencySVG}}
<h2>Delegated subnets</h2>
<table id="subnet-table"><tr><th>range</th><th>organisation</th><th>RTT ms</th><th>since</th></tr>
{{range .Subnets}}<tr><td><code>{{.Range}}</code></td><td>{{if .OrgName}}{{.OrgName}} <span class="muted">{{.Org}}</span>{{else}}{{.Org}}{{end}}</td><td>{{ms .RTTms}}</td><td>{{when .Since}}</td></tr>
{{end}}</table>
<h2>Changes of its subnets</h2>
{{if .Changes}}<table id="changes"><tr><th>when</th><th>range</th><th></th><th>why</th></tr>
{{range .Changes}}<tr><td>{{when .At}}</td><td><code>{{.Range}}</code>{{if .Own}} (own){{end}}</td><td>{{if .Gained}}gained{{else}}lost{{end}}</td><td>{{.Reason}}</td></tr>
{{end}}</table>{{else}}<p class="muted" id="changes">none since the node started</p>{{end}}
{{if .Audits.Convicted}}<h2>Nodes convicted by audits</h2>
<p class="muted">Their results disagreed with other nodes' fetches of the same pages; they get no subnets of the shards this node coordinates.</p>
<ul id="convicted">{{range .Audits.Convicted}}<li><code>{{.}}</code></li>{{end}}</ul>
{{end}}{{if .Trust.Barred}}<h2>Nodes whose probe claims failed</h2>
<p class="muted">Their probes were impossible by other nodes' measurements; this node's decisions do not ask them for now.</p>
<ul id="barred">{{range .Trust.Barred}}<li><code>{{.}}</code></li>{{end}}</ul>
{{end}}<h2>Addresses</h2>
<ul>{{range .Addrs}}<li><code>{{.}}</code></li>{{end}}</ul>
<p class="muted">facts as JSON: <a href="/api/status">/api/status</a> · metrics: <a href="/metrics">/metrics</a></p>
<p class="muted">Organisation names of routed ranges: <a href="https://db-ip.com">IP Geolocation by DB-IP</a>, Route Views, NRO; CC BY 4.0.</p>
</body></html>
`))

// toInt64 converts the integers the template passes to num.
func toInt64(v any) int64 {
	switch n := v.(type) {
	case int:
		return int64(n)
	case int64:
		return n
	case uint64:
		return int64(min(n, math.MaxInt64))
	}
	return 0
}
