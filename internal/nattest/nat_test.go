//go:build linux

package nattest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/micra-net/micra/indexer"
	"github.com/micra-net/micra/indexer/index"
	"github.com/micra-net/micra/node"
	"github.com/micra-net/micra/subnet/embedded"
)

// volunteer is one NATed volunteer of the scenario.
type volunteer struct {
	name   string
	region region
	wan    netip.Addr // its router's public address
	nat    natKind
	site   site // the site of its region, whose subnet it should crawl
	p      *proc
}

// Waits, each bounded in time; the test polls every pollEvery.
const (
	pollEvery    = 500 * time.Millisecond
	setupLimit   = 2 * time.Minute  // volunteers private with a relay reservation
	seedAttempts = 6                // submissions of the seeds
	crawlLimit   = 3 * time.Minute  // probes, crawl requests, hole punching, results indexed
	reportTime   = 30 * time.Second // left before go test's deadline for the report and cleanups
)

// TestNAT runs volunteers behind NAT: a public bootstrap node that relays
// and an indexer in the hosting region, the web sites of three regions
// and their DNS, and in each region a volunteer behind its own router —
// two routers with endpoint-independent mappings, as most home routers,
// and one symmetric. The volunteers join through the bootstrap node,
// learn from AutoNAT that they are private, reserve a slot on the relay;
// the indexer submits each site's home page, whose subnet's coordinator
// probes the volunteers and delegates it to the one in its region, which
// is sent the crawl request; each site links to the others, so each
// volunteer hands a page to each other volunteer: they reach each other
// through the relay, and DCUtR makes the connection direct where both
// NATs allow it. The results reach the indexer. The test asserts the
// outcome of every step and which connections ended direct; it logs how
// long each step took (docs/nat.md).
func TestNAT(t *testing.T) {
	needLab(t)
	subnets := checkSnapshot(t)
	dir := t.TempDir()
	if d := os.Getenv("MICRA_NATTEST_KEEP"); d != "" {
		// A directory of its own per run: nodes started on an earlier
		// run's data would restore its identities and subnets.
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if dir, err = os.MkdirTemp(d, "run-"); err != nil {
			t.Fatal(err)
		}
		t.Logf("data and logs kept in %s", dir)
	}
	bin := os.Getenv("MICRA_NATTEST_BIN") // a micra binary to run instead of building one
	if bin == "" {
		bin = buildMicra(t, dir)
	}

	l := newLab(t)
	l.addNamespace("pub")
	l.attach("pub", bootstrapAddr, indexerAddr)
	l.addNamespace("web")
	webAddrs := []netip.Addr{dnsAddr}
	for _, s := range sites {
		webAddrs = append(webAddrs, s.addr)
	}
	l.attach("web", webAddrs...)
	vs := []*volunteer{
		{name: "v1", region: au, wan: netip.MustParseAddr("202.12.28.2"), nat: homeNAT, site: sites[0]},
		{name: "v2", region: uy, wan: netip.MustParseAddr("200.3.12.2"), nat: homeNAT, site: sites[1]},
		{name: "v3", region: za, wan: netip.MustParseAddr("196.216.2.2"), nat: symmetricNAT, site: sites[2]},
	}
	homes := make([]string, len(vs))
	for i, v := range vs {
		homes[i] = l.addHome(i+1, v.wan, v.nat)
	}
	w := startWeb(t, l, "web")

	dnsFlag := netip.AddrPortFrom(dnsAddr, 53).String()
	boot := l.start("bootstrap", "pub", bin, dir, "node",
		"--data-dir", filepath.Join(dir, "bootstrap"),
		"--listen", fmt.Sprintf("/ip4/%s/tcp/4001,/ip4/%[1]s/udp/4001/quic-v1", bootstrapAddr),
		"--dns", dnsFlag, "--batch-wait", "2s")
	bootAddrs := strings.Join(boot.addr, ",")
	ix := l.start("indexer", "pub", bin, dir, "indexer",
		"--data-dir", filepath.Join(dir, "indexer"),
		"--listen", fmt.Sprintf("/ip4/%s/tcp/4001,/ip4/%[1]s/udp/4001/quic-v1", indexerAddr),
		"--bootstrap", bootAddrs, "--http", indexerAPI, "--dns", dnsFlag,
		"--announce", "2s", "--audit-share", "0")

	// The volunteers run with a volunteer's defaults (listen on every
	// interface, dashboard on loopback, the egress guard on) but for the
	// relay they are told of, the lab's DNS server and short result
	// batches.
	tl := newTimeline()
	for i, v := range vs {
		v.p = l.start(v.name, homes[i], bin, dir, "node",
			"--data-dir", filepath.Join(dir, v.name),
			"--bootstrap", bootAddrs, "--relays", bootAddrs,
			"--dns", dnsFlag, "--batch-wait", "2s")
	}
	ctx := t.Context()
	failed := true
	defer func() {
		if failed {
			for _, p := range append([]*proc{boot, ix}, vs[0].p, vs[1].p, vs[2].p) {
				t.Logf("log of %s:\n%s", p.name, p.logTail())
			}
		}
	}()

	pairs := [][2]*volunteer{{vs[0], vs[1]}, {vs[0], vs[2]}, {vs[1], vs[2]}}
	obs := &observer{tl: tl, boot: boot, ix: ix, vs: vs, pairs: pairs, subnets: subnets, conns: map[string]pairConns{}}
	// Waits end early enough before go test's -timeout for the report
	// and the cleanups: a timeout's panic runs no cleanup.
	if end, ok := t.Deadline(); ok {
		obs.stop = end.Add(-reportTime)
	}

	// 1. Join, AutoNAT, relay reservation.
	if !obs.until(ctx, setupLimit, func() bool {
		for _, v := range vs {
			if _, ok := tl.get(v.name + " relay"); !ok {
				return false
			}
		}
		_, ok := tl.get("bootstrap public")
		return ok
	}) {
		t.Fatalf("not every volunteer private with a relay reservation within %v:\n%s", setupLimit, obs.table())
	}

	// 2. The indexer submits the sites' home pages: each subnet's
	// coordinator probes the volunteers and delegates it, and the
	// indexer sends the crawl request to the owner.
	var seeds []string
	for _, s := range sites {
		seeds = append(seeds, s.home())
	}
	tl.mark("seeded")
	retried, err := submit(ctx, ix, seeds)
	if err != nil {
		t.Fatal(err)
	}
	tl.mark("seeds accepted")
	for _, r := range retried {
		t.Logf("seeds submitted again: %s", r)
	}

	// 3. Probes, crawl requests, hole punching, results.
	var want []string // pages each volunteer gets from the others' links
	for _, v := range vs {
		for _, o := range vs {
			if o != v {
				want = append(want, v.site.from(o.site))
			}
		}
	}
	obs.want = want
	done := obs.until(ctx, crawlLimit, func() bool {
		for _, v := range vs {
			if _, ok := tl.get(v.name + " acked"); !ok {
				return false
			}
		}
		for _, pr := range pairs {
			pc := obs.conns[pairName(pr)]
			if (punchable(pr) && pc.direct.IsZero()) || (!punchable(pr) && pc.relayed.IsZero()) {
				return false
			}
		}
		return len(obs.indexed(ctx, want)) == len(want)
	})
	report := fmt.Sprintf("NAT scenario (backbone one-way delay between regions %v; %d packets forwarded, %d dropped):\n%s",
		interRegion, l.bb.forwarded.Load(), l.bb.dropped.Load(), obs.table())
	for _, s := range sites {
		report += fmt.Sprintf("requests to %s (%s) by source address: %s\n", s.host, s.addr, w.sources(s.host))
	}
	t.Log(report)
	// CI keeps the report (the test's log shows only on failure or -v).
	if d := os.Getenv("MICRA_ARTIFACTS"); d != "" {
		if err := os.WriteFile(filepath.Join(d, "nattest.txt"), []byte(report), 0o644); err != nil {
			t.Errorf("saving the report: %v", err)
		}
	}
	if !done {
		t.Errorf("the scenario did not complete within %v (docs/nat.md, \"What stood in the way\", names what kept it from completing before)", crawlLimit)
	}

	// The outcomes.
	if st := obs.last[boot.name]; st.Reachability != "public" {
		t.Errorf("bootstrap node: reachability %q, want public", st.Reachability)
	}
	for _, v := range vs {
		st := obs.last[v.name]
		if st.Reachability != "private" {
			t.Errorf("%s: reachability %q, want private (AutoNAT)", v.name, st.Reachability)
		}
		if _, ok := tl.get(v.name + " relay"); !ok {
			t.Errorf("%s: no relay address through the bootstrap node", v.name)
		}
		if st.Probes.Run == 0 {
			t.Errorf("%s: probed by no coordinator", v.name)
		}
		if !slices.ContainsFunc(st.Subnets, func(s node.Subnet) bool { return s.Range == subnets[v.site.host] }) {
			t.Errorf("%s: not delegated %s, the subnet of its region's site %s", v.name, subnets[v.site.host], v.site.host)
		}
		if st.Crawl.Forwarded == 0 {
			t.Errorf("%s: handed no link to another volunteer", v.name)
		}
		if st.Outbox.Acked == 0 {
			t.Errorf("%s: no result batch acknowledged by the indexer", v.name)
		}
		if !strings.Contains(w.sources(v.site.host), v.wan.String()+"×") {
			t.Errorf("%s: its site %s saw no request from its router's address %s: %s", v.name, v.site.host, v.wan, w.sources(v.site.host))
		}
	}
	// Behind NATs both, a direct connection can only come from a hole
	// punch: neither volunteer has a public address to dial.
	for _, pr := range pairs {
		pc := obs.conns[pairName(pr)]
		switch {
		case punchable(pr) && pc.direct.IsZero() && pc.relayed.IsZero():
			t.Errorf("%s: never connected", pairName(pr))
		case punchable(pr) && pc.direct.IsZero():
			t.Errorf("%s: both NATs keep ports, yet the connection stayed relayed (no hole punch)", pairName(pr))
		case !punchable(pr) && !pc.direct.IsZero():
			t.Errorf("%s: direct through a symmetric NAT (%s): the NAT is not symmetric", pairName(pr), pc.directAddr)
		case !punchable(pr) && pc.relayed.IsZero():
			t.Errorf("%s: never connected through the relay", pairName(pr))
		}
	}
	indexed := obs.indexed(ctx, want)
	for _, v := range vs {
		for _, o := range vs {
			if o == v {
				continue
			}
			u := v.site.from(o.site)
			switch author, ok := indexed[u]; {
			case !ok:
				t.Errorf("%s (linked from %s's site, handed to %s) is not indexed", u, o.name, v.name)
			case author != v.p.id:
				t.Errorf("%s: indexed from %s, want %s (%s)", u, author, v.name, v.p.id)
			}
		}
	}
	failed = t.Failed()
}

// checkSnapshot checks that the lab's regions are what the test assumes in
// micra's built-in snapshot — each site in a subnet of its own and of its
// own organisation, none holding the public nodes — and returns each
// site's subnet.
func checkSnapshot(t *testing.T) map[string]string {
	t.Helper()
	tree, err := embedded.Tree()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	orgs := map[string]string{}
	for _, s := range sites {
		id := tree.SmallestNonUnary(s.addr)
		r := tree.Range(id)
		org := tree.Org(id)
		for _, a := range []netip.Addr{bootstrapAddr, indexerAddr} {
			if r.Contains(a) {
				t.Fatalf("the built-in snapshot changed: %s's subnet %s holds the public node at %s", s.host, r, a)
			}
		}
		if prev, ok := orgs[org]; ok || org == "" {
			t.Fatalf("the built-in snapshot changed: %s's subnet %s has organisation %q, as %s's", s.host, r, org, prev)
		}
		orgs[org] = s.host
		out[s.host] = r.String()
	}
	return out
}

// submit posts the seeds to the indexer's crawl API, again for those that
// failed (a delegation may fail while the overlay forms), a few times. It
// returns why each attempt but the last failed.
func submit(ctx context.Context, ix *proc, seeds []string) (retried []string, err error) {
	var last string
	for attempt := range seedAttempts {
		if attempt > 0 {
			retried = append(retried, last)
			select {
			case <-ctx.Done():
				return retried, ctx.Err()
			case <-time.After(2 * time.Second):
			}
		}
		body, _ := json.Marshal(map[string]any{"urls": seeds, "depth": 2})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+indexerAPI+"/api/crawl", bytes.NewReader(body))
		if err != nil {
			return retried, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := ix.api.Do(req)
		if err != nil {
			last = err.Error()
			continue
		}
		var out struct {
			Sent   int `json:"sent"`
			Failed []struct {
				URL   string `json:"url"`
				Error string `json:"error"`
			} `json:"failed"`
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &out) != nil {
			last = fmt.Sprintf("%s: %s", resp.Status, b)
			continue
		}
		if len(out.Failed) == 0 {
			return retried, nil
		}
		seeds = seeds[:0]
		last = ""
		for _, f := range out.Failed {
			seeds = append(seeds, f.URL)
			last += fmt.Sprintf(" %s: %s;", f.URL, f.Error)
		}
	}
	return retried, fmt.Errorf("submitting the seeds to the indexer failed %d times; last:%s", seedAttempts, last)
}

// pairConns is what the test saw of the connections between two
// volunteers: when the first relayed and the first direct one opened (by
// the nodes' clocks, from their statuses), and the direct one's address.
type pairConns struct {
	relayed, direct time.Time
	directAddr      string
}

func pairName(pr [2]*volunteer) string { return pr[0].name + "–" + pr[1].name }

// punchable reports whether hole punching should connect the pair: both
// NATs keep ports.
func punchable(pr [2]*volunteer) bool { return pr[0].nat == homeNAT && pr[1].nat == homeNAT }

// observer polls the nodes' statuses and the indexer, keeping the first
// time each step was seen and the last status of each node.
type observer struct {
	tl      *timeline
	boot    *proc
	ix      *proc
	vs      []*volunteer
	pairs   [][2]*volunteer
	subnets map[string]string
	want    []string // the pages linked across regions
	conns   map[string]pairConns
	last    map[string]node.Status
	ixStats indexer.Stats
	stop    time.Time // no wait goes past it (zero: none)
}

// until polls until cond holds or limit passed (or o.stop); it returns
// whether cond held.
func (o *observer) until(ctx context.Context, limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	if !o.stop.IsZero() && o.stop.Before(deadline) {
		deadline = o.stop
	}
	for {
		o.poll(ctx)
		if cond() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		select {
		case <-ctx.Done():
		case <-time.After(pollEvery):
		}
	}
}

func (o *observer) poll(ctx context.Context) {
	if o.last == nil {
		o.last = map[string]node.Status{}
	}
	if st, err := o.boot.status(ctx); err == nil {
		o.last[o.boot.name] = st
		if st.Reachability == "public" {
			o.tl.mark("bootstrap public")
		}
	}
	var s indexer.Stats
	if err := o.ix.getJSON(ctx, "http://"+indexerAPI+"/api/indexer", &s); err == nil {
		o.ixStats = s
	}
	byID := map[string]*volunteer{}
	for _, v := range o.vs {
		byID[v.p.id] = v
	}
	for _, v := range o.vs {
		st, err := v.p.status(ctx)
		if err != nil {
			continue
		}
		o.last[v.name] = st
		if st.Peers > 0 {
			o.tl.mark(v.name + " joined")
		}
		if st.Reachability == "private" {
			o.tl.mark(v.name + " private")
		}
		for _, a := range st.Addrs {
			if strings.Contains(a, "/p2p/"+o.boot.id+"/p2p-circuit") {
				o.tl.mark(v.name + " relay")
			}
		}
		if st.Probes.Run > 0 {
			o.tl.mark(v.name + " probed")
		}
		if slices.ContainsFunc(st.Subnets, func(s node.Subnet) bool { return s.Range == o.subnets[v.site.host] }) {
			o.tl.mark(v.name + " delegated")
		}
		if st.Crawl.Fetched > 0 {
			o.tl.mark(v.name + " fetched")
		}
		if st.Crawl.Forwarded > 0 {
			o.tl.mark(v.name + " handed on")
		}
		if st.Outbox.Acked > 0 {
			o.tl.mark(v.name + " acked")
		}
		for _, c := range st.Conns {
			other, ok := byID[c.Peer]
			if !ok {
				continue
			}
			for _, pr := range o.pairs {
				if (pr[0] == v && pr[1] == other) || (pr[1] == v && pr[0] == other) {
					k := pairName(pr)
					pc := o.conns[k]
					switch {
					case c.Relayed && (pc.relayed.IsZero() || c.Opened.Before(pc.relayed)):
						pc.relayed = c.Opened
					case !c.Relayed && (pc.direct.IsZero() || c.Opened.Before(pc.direct)):
						pc.direct, pc.directAddr = c.Opened, v.name+" → "+c.Remote
					}
					o.conns[k] = pc
					if c.Relayed {
						o.tl.mark(k+" relayed", c.Opened)
					} else {
						o.tl.mark(k+" direct", c.Opened)
					}
				}
			}
		}
	}
}

// indexed returns, of the pages in urls, those the indexer holds, with
// the peer id of the node that published each.
func (o *observer) indexed(ctx context.Context, urls []string) map[string]string {
	out := map[string]string{}
	for _, u := range urls {
		var rec index.JSONRecord
		if err := o.ix.getJSON(ctx, "http://"+indexerAPI+"/api/record?url="+url.QueryEscape(u), &rec); err == nil {
			out[u] = rec.Provenance.Node
			o.tl.mark("indexed " + u)
		}
	}
	return out
}

// table is the report: per volunteer when each step was first seen
// (seconds since the volunteers started; the test polls every half
// second), per pair of volunteers how their connection ended, and the
// coordinators' side.
func (o *observer) table() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "volunteer\tNAT\tjoined\tprivate\trelay slot\tprobed\tdelegated\tfetched\thanded on\tresults acked\t")
	for _, v := range o.vs {
		fmt.Fprintf(tw, "%s (%s, %s)\t%s\t", v.name, v.region.name, v.wan, v.nat)
		for _, e := range []string{"joined", "private", "relay", "probed", "delegated", "fetched", "handed on", "acked"} {
			fmt.Fprintf(tw, "%s\t", o.tl.show(v.name+" "+e))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	indexed, last := 0, time.Duration(0)
	for _, u := range o.want {
		if d, ok := o.tl.get("indexed " + u); ok {
			indexed, last = indexed+1, max(last, d)
		}
	}
	fmt.Fprintf(&b, "bootstrap public at %s; seeds submitted at %s, accepted at %s; %d of the %d pages linked across regions indexed, the last seen at %.1f s\n",
		o.tl.show("bootstrap public"), o.tl.show("seeded"), o.tl.show("seeds accepted"), indexed, len(o.want), last.Seconds())
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "pair\trelayed at\tdirect at\thole punch took\toutcome\t")
	for _, pr := range o.pairs {
		k := pairName(pr)
		pc := o.conns[k]
		outcome, took := "no connection seen", "-"
		switch {
		case !pc.direct.IsZero():
			outcome = "direct (" + pc.directAddr + ")"
			if !pc.relayed.IsZero() {
				took = fmt.Sprintf("%.2f s", pc.direct.Sub(pc.relayed).Seconds())
			}
		case !pc.relayed.IsZero():
			outcome = "relayed"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", k, o.tl.show(k+" relayed"), o.tl.show(k+" direct"), took, outcome)
	}
	tw.Flush()
	for _, v := range o.vs {
		st := o.last[v.name]
		var conns []string
		for _, c := range st.Conns {
			who := c.Peer
			switch c.Peer {
			case o.boot.id:
				who = "bootstrap"
			case o.ix.id:
				who = "indexer"
			}
			for _, x := range o.vs {
				if x.p.id == c.Peer {
					who = x.name
				}
			}
			kind, dir := "direct", "out"
			if c.Relayed {
				kind = "relayed"
			}
			if c.Inbound {
				dir = "in"
			}
			conns = append(conns, fmt.Sprintf("%s %s %s", who, kind, dir))
		}
		fmt.Fprintf(&b, "%s: reachability %s, %d probes run, %d pages fetched, %d links handed on, %d batches acked; connections: %s\n",
			v.name, st.Reachability, st.Probes.Run, st.Crawl.Fetched, st.Crawl.Forwarded, st.Outbox.Acked, strings.Join(conns, ", "))
	}
	bs := o.last[o.boot.name]
	fmt.Fprintf(&b, "bootstrap: reachability %s, %d probes issued as coordinator, %d shards; indexer: %d batches, %d records, %d acks\n",
		bs.Reachability, bs.Probes.Issued, bs.Shards, o.ixStats.Batches, o.ixStats.Records, o.ixStats.Acks)
	return b.String()
}
