package node

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/micra-net/micra/subnet"
)

// Status returns what the dashboard and "micra status" show.
func (n *Node) Status(ctx context.Context) (Status, error) {
	now := time.Now()
	cs := n.cr.Stats()
	os := n.ob.Stats()
	capacity, load := n.load()
	o := n.ov()
	ovs := o.Stats()
	ds := n.del.Stats()
	st := Status{
		PeerStatus: n.peerStatus(now),
		Capacity:   int(capacity), Load: int(load),
		Crawl: Crawl{
			Fetched: cs.Fetched, Records: cs.Records, Queued: cs.Queued, Outgoing: cs.Outgoing, Forwarded: cs.Forwarded, Hosts: cs.Hosts,
			InFlight: cs.InFlight, Bytes: cs.WireBytes, Errors: cs.FetchErrors, RobotsDenied: cs.RobotsDenied, Paused: cs.Held,
			Crawling: cs.Crawling, TodayBytes: cs.TodayBytes, DailyCap: cs.DailyCap,
		},
		Outbox:          Outbox{Batches: os.Batches, Bytes: os.Bytes, Cap: os.Cap, Acked: int64(os.Removed)},
		Probes:          Probes{Run: n.probesRun.Load(), Issued: ds.Probes},
		Audits:          Audits{Judged: ovs.Audits, Refetched: ovs.Refetches, Convictions: ovs.Convictions, Convicted: []string{}},
		Trust:           Trust{ClaimsRejected: ds.ClaimsRejected, Barred: []string{}, TakenBack: ovs.TakenBack},
		Indexers:        os.Indexers,
		Adopted:         ovs.Adopted,
		RateChart:       n.rate.points(),
		ReleasesRefused: ovs.ReleasesRefused, ReleaseBadPeers: ovs.ReleaseBadPeers,
		Reachability: reachabilityName(o.Reachability()),
		Conns:        conns(n.h.Network().Conns()),
	}
	if cs.Held != "" {
		st.Warnings = append(st.Warnings, "crawling paused: "+cs.Held)
	}
	if rs, ok := o.NextRelease(); ok {
		st.Release = &Release{Snapshot: rs.Release.Snapshot.String(), Activation: rs.Release.Activation, Ready: rs.Ready, Holders: rs.Holders}
		if !rs.Ready && rs.Release.Activation.Sub(now) < 5*time.Minute {
			st.Warnings = append(st.Warnings, fmt.Sprintf("snapshot %s activates %s and its file is not fetched yet", rs.Release.Snapshot.Short(), rs.Release.Activation.Format(time.RFC3339)))
		}
	}
	for _, p := range ds.Barred {
		st.Trust.Barred = append(st.Trust.Barred, p.String())
	}
	for _, p := range o.Convicted() {
		st.Audits.Convicted = append(st.Audits.Convicted, p.String())
	}
	st.Window.Open = n.cr.OpenAt(now)
	if len(n.cfg.Windows) > 0 {
		if st.Window.Open {
			st.Window.Next = nextClose(n.cr.OpenAt, now)
		} else {
			st.Window.Next = n.cr.NextOpen(now)
		}
	}
	for _, d := range o.Owned() {
		// The probe that won the subnet, as its coordinator stored it;
		// else this node's latest probe of it.
		rtt, ok := o.WonRTT(d.Subnet)
		if !ok {
			rtt, ok = n.probeRTT.get(d.Subnet)
		}
		ms := -1.0
		if ok {
			ms = float64(rtt.Microseconds()) / 1000
		}
		st.Subnets = append(st.Subnets, Subnet{Range: d.Subnet.String(), Org: d.Org, OrgName: o.Tree().OrgName(d.Org), RTTms: ms, Since: d.Decided})
	}
	slices.SortFunc(st.Subnets, func(a, b Subnet) int {
		if (a.RTTms < 0) != (b.RTTms < 0) {
			return cmp.Compare(b.RTTms, a.RTTms) // known RTTs first
		}
		return cmp.Or(cmp.Compare(a.RTTms, b.RTTms), cmp.Compare(a.Range, b.Range))
	})
	st.Map = places(o.Tree(), n.own, st.Conns, st.Subnets)
	st.Changes = []Change{}
	for _, c := range o.Changes() {
		st.Changes = append(st.Changes, Change{At: c.At, Range: c.Subnet.String(), Gained: c.Gained, Own: c.Own, Reason: c.Reason})
	}
	if os.Full {
		st.Warnings = append(st.Warnings, fmt.Sprintf("outbox full (%d of %d bytes): crawling paused until indexers acknowledge", os.Bytes, os.Cap))
	}
	if os.Indexers == 0 {
		st.Warnings = append(st.Warnings, "no indexer known: results wait in the outbox")
	}
	if st.Peers == 0 {
		st.Warnings = append(st.Warnings, "no peers connected")
	}
	if !st.Window.Open {
		st.Warnings = append(st.Warnings, "outside the crawl windows: crawling and probing wait")
	}
	return st, nil
}

// peerStatus returns the peer's part of its role's status, at now.
func (a *assembly) peerStatus(now time.Time) PeerStatus {
	return PeerStatus{
		Peer: a.h.ID().String(), Addrs: a.Addrs(), Snapshot: a.snapshot().ID().String(),
		Started: a.started, Now: now, Peers: len(a.h.Network().Peers()), Shards: a.ov().Coordinating(),
	}
}

// reachabilityName is the status's word for r.
func reachabilityName(r network.Reachability) string {
	switch r {
	case network.ReachabilityPublic:
		return "public"
	case network.ReachabilityPrivate:
		return "private"
	}
	return "unknown"
}

// maxStatusConns bounds the connections a status lists; the connection
// manager trims a node's above 192.
const maxStatusConns = 512

// conns describes open connections for the status: the oldest
// maxStatusConns, oldest first.
func conns(cs []network.Conn) []Conn {
	out := make([]Conn, 0, len(cs))
	for _, c := range cs {
		st := c.Stat()
		_, err := c.RemoteMultiaddr().ValueForProtocol(ma.P_CIRCUIT)
		circuit := err == nil
		out = append(out, Conn{Peer: c.RemotePeer().String(), Remote: c.RemoteMultiaddr().String(),
			Relayed: st.Limited || circuit, Inbound: st.Direction == network.DirInbound, Opened: st.Opened})
	}
	slices.SortFunc(out, func(a, b Conn) int { return a.Opened.Compare(b.Opened) })
	return out[:min(len(out), maxStatusConns)]
}

// nextClose finds when an open window closes, to the minute, within a week.
func nextClose(open func(time.Time) bool, now time.Time) time.Time {
	t := now.Truncate(time.Minute)
	for range 7 * 24 * 60 {
		t = t.Add(time.Minute)
		if !open(t) {
			return t
		}
	}
	return time.Time{}
}

// serveDashboard starts the dashboard and metrics on Config.Dashboard.
func (n *Node) serveDashboard() error {
	if n.cfg.Dashboard == "" {
		return nil
	}
	metrics := metricsHandler(n.collector())
	var err error
	if n.dash, err = serveHTTP("dashboard", n.cfg.Dashboard, &http.Server{
		Handler:           n.dashboardHandler(metrics),
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second,
		IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10,
	}); err != nil {
		return err
	}
	n.log.Info("dashboard", "url", "http://"+n.dash.addr+"/")
	return nil
}

// dashboardHandler serves the dashboard, and POST /api/release.
func (n *Node) dashboardHandler(metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	publish := func(ctx context.Context, release, file []byte) error {
		return n.ov().PublishRelease(ctx, release, file)
	}
	mux.Handle("POST /api/release", ReleaseHandler(publish, n.cfg.DashboardToken))
	mux.Handle("/", Dashboard(n.Status, n.cfg.DashboardToken, metrics))
	return mux
}

// collector exports the node's counters and gauges, read when scraped.
func (n *Node) collector() prometheus.Collector {
	c := &statsCollector{collect: n.collect}
	desc := func(name, help string) *prometheus.Desc { return prometheus.NewDesc("micra_"+name, help, nil, nil) }
	c.descs = map[string]*prometheus.Desc{
		"pages":       desc("pages_fetched_total", "Pages fetched by the crawler."),
		"errors":      desc("fetch_errors_total", "Fetches that failed."),
		"bytes":       desc("downloaded_bytes_total", "Bytes downloaded by the crawler (on the wire)."),
		"records":     desc("records_total", "Keyword records produced."),
		"forwarded":   desc("urls_forwarded_total", "URLs handed to the nodes owning their subnets."),
		"queued":      desc("frontier_urls", "URLs waiting in the crawler's host queues."),
		"outgoing":    desc("outgoing_urls", "URLs for other nodes' subnets waiting to be handed on."),
		"probesRun":   desc("probes_run_total", "Probes this node ran for coordinators."),
		"probesAsked": desc("probes_issued_total", "Probes this node asked of others as a coordinator."),
		"decisions":   desc("delegation_decisions_total", "Delegation searches run as a coordinator."),
		"delegations": desc("delegations_held", "Subnets delegated to this node."),
		"shards":      desc("shards_coordinated", "Shards this node coordinates."),
		"outbox":      desc("outbox_batches", "Result batches waiting for acknowledgement."),
		"outboxBytes": desc("outbox_bytes", "Bytes of the result batches waiting."),
		"acked":       desc("outbox_acknowledged_total", "Result batches acknowledged and removed from the outbox."),
		"peers":       desc("peers", "Connected libp2p peers."),
		"judged":      desc("audits_judged_total", "Audits of other nodes' results judged as a coordinator."),
		"refetched":   desc("audit_refetches_total", "Pages fetched afresh for coordinators' audits."),
		"convictions": desc("audit_convictions_total", "Nodes convicted by audits as a coordinator."),
		"claimsRejected": desc("probe_claims_rejected_total",
			"Winning probes found impossible by the triangle inequality, as a coordinator."),
		"adopted": desc("subnets_adopted_total",
			"Subnets taken up because a coordinator's heartbeat acknowledgement listed them while their ASSIGN never arrived."),
		"takenBack": prometheus.NewDesc("micra_subnets_taken_back_total",
			"Subnets taken from their nodes and decided again as a coordinator, by reason.", []string{"reason"}, nil),
	}
	return c
}

// takenBackReasons are the reasons micra_subnets_taken_back_total is
// exported for (overlay.Stats.TakenBack).
var takenBackReasons = []string{"orphaned", "convicted", "withheld", "refused"}

// collect reports the node's counters and gauges (collector) with put.
func (n *Node) collect(put putFunc) {
	cs := n.cr.Stats()
	os := n.ob.Stats()
	ds := n.del.Stats()
	counter := func(k string, v float64) { put(k, prometheus.CounterValue, v) }
	gauge := func(k string, v float64) { put(k, prometheus.GaugeValue, v) }
	counter("pages", float64(cs.Fetched))
	counter("errors", float64(cs.FetchErrors))
	counter("bytes", float64(cs.WireBytes))
	counter("records", float64(cs.Records))
	counter("forwarded", float64(cs.Forwarded))
	gauge("queued", float64(cs.Queued))
	gauge("outgoing", float64(cs.Outgoing))
	counter("probesRun", float64(n.probesRun.Load()))
	counter("probesAsked", float64(ds.Probes))
	counter("decisions", float64(ds.Decisions))
	gauge("delegations", float64(len(n.ov().Owned())))
	gauge("shards", float64(n.ov().Coordinating()))
	gauge("outbox", float64(os.Batches))
	gauge("outboxBytes", float64(os.Bytes))
	counter("acked", float64(os.Removed))
	gauge("peers", float64(len(n.h.Network().Peers())))
	ovs := n.ov().Stats()
	counter("judged", float64(ovs.Audits))
	counter("refetched", float64(ovs.Refetches))
	counter("convictions", float64(ovs.Convictions))
	counter("claimsRejected", float64(ds.ClaimsRejected))
	counter("adopted", float64(ovs.Adopted))
	for _, r := range takenBackReasons {
		put("takenBack", prometheus.CounterValue, float64(ovs.TakenBack[r]), r)
	}
}

// sample records the fetch rate every sampleEvery until Close.
func (n *Node) sample() {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	last := n.cr.Stats().Fetched
	for {
		select {
		case <-n.ctx.Done():
			return
		case now := <-t.C:
			f := n.cr.Stats().Fetched
			n.rate.add(now, f-last)
			last = f
		}
	}
}

const (
	sampleEvery = 10 * time.Second
	maxSamples  = 360 // an hour
)

// rateSeries is the fetch rate over the last hour, one sample per
// sampleEvery.
type rateSeries struct {
	mu      sync.Mutex
	samples []sample
}

type sample struct {
	t     time.Time
	pages int64
}

func (r *rateSeries) add(t time.Time, pages int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.samples) == maxSamples {
		r.samples = slices.Delete(r.samples, 0, 1)
	}
	r.samples = append(r.samples, sample{t, pages})
}

// points returns the samples as pages per minute.
func (r *rateSeries) points() []Point {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Point, len(r.samples))
	for i, s := range r.samples {
		out[i] = Point{T: s.t, V: float64(s.pages) * float64(time.Minute) / float64(sampleEvery)}
	}
	return out
}

// perDay extrapolates the samples' rate to a day.
func (r *rateSeries) perDay() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.samples) == 0 {
		return 0
	}
	var sum int64
	for _, s := range r.samples {
		sum += s.pages
	}
	return float64(sum) * float64(24*time.Hour) / (float64(len(r.samples)) * float64(sampleEvery))
}

// rttBook keeps the RTT of this node's latest probe per subnet, bounded.
type rttBook struct {
	mu sync.Mutex
	m  map[subnet.Range]time.Duration
}

const maxProbeRTTs = 16384

func (b *rttBook) put(r subnet.Range, d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[subnet.Range]time.Duration{}
	}
	if _, ok := b.m[r]; !ok && len(b.m) >= maxProbeRTTs {
		for k := range b.m { // drop an arbitrary entry: the bound matters, not which
			delete(b.m, k)
			break
		}
	}
	b.m[r] = d
}

func (b *rttBook) get(r subnet.Range) (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.m[r]
	return d, ok
}
