package scale

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"
)

// rate is the network's traffic per hour over a span: stream bytes, and
// micra requests and DHT queries.
type rate struct {
	bytes, msgs float64
}

// counters returns the micra requests and DHT queries nodes served.
func counters(nodes []*simNode) (msgs int64) {
	for _, n := range nodes {
		st := n.o.Stats()
		msgs += st.Requests + st.DHTServed
	}
	return msgs
}

// kinds returns the messages nodes sent by kind, closest-peer lookups
// among them.
func kinds(nodes []*simNode) map[string]int64 {
	out := map[string]int64{}
	for _, n := range nodes {
		st := n.o.Stats()
		for k, v := range st.Kinds {
			out[k] += v
		}
		out["(closest-peer lookups)"] += st.Lookups
	}
	return out
}

// perKind lists the messages of each kind since k0, per unit, largest first.
func perKind(k0, k1 map[string]int64, unit float64) string {
	type kv struct {
		k string
		v float64
	}
	var all []kv
	for k, v := range k1 {
		if d := float64(v - k0[k]); d > 0 {
			all = append(all, kv{k, d / unit})
		}
	}
	slices.SortFunc(all, func(a, b kv) int { return cmp.Compare(b.v, a.v) })
	var b strings.Builder
	for _, e := range all[:min(len(all), 40)] {
		fmt.Fprintf(&b, " %s %.1f", e.k, e.v)
	}
	return b.String()
}

// bytesNow returns the stream bytes the network carried so far.
func (s *sim) bytesNow() int64 { b := s.net.Bandwidth(); return b.TotalIn }

// probesNow returns the probes the nodes answered so far.
func (s *sim) probesNow() (n int64) {
	s.probes.Range(func(_, v any) bool { n += *v.(*int64); return true })
	return n
}

// measureIdle waits cfg.Idle and returns the network's stream bytes and
// messages per hour meanwhile, logging them split by protocol and kind;
// false when the run was stopped.
func (s *sim) measureIdle(name string) (rate, bool) {
	cfg, nodes := s.cfg, s.nodes
	b0, m0, i0, pr0, k0, c0 := s.bytesNow(), counters(nodes), time.Now(), s.net.SentByProtocol(), kinds(nodes), s.opened.Load()
	a0, r0, e0 := s.rtAdded.Load(), s.rtRemoved.Load(), s.addrChanges.Load()
	if s.wait(cfg.Idle) {
		return rate{}, false
	}
	hours := time.Since(i0).Hours()
	var open, most int
	for _, n := range live(nodes) {
		c := len(n.o.Host().Network().Conns())
		open, most = open+c, max(most, c)
	}
	perNodeHour := func(n int64) float64 { return float64(n) / hours / float64(cfg.Nodes) }
	s.logf("%s connections: %.1f open per node (at most %d), %.0f opened per node per hour; routing tables: %.1f peers added and %.1f removed per node per hour; %.1f address changes per node per hour; %.0f goroutines per node",
		name, float64(open)/float64(len(live(nodes))), most, perNodeHour(s.opened.Load()-c0)/2,
		perNodeHour(s.rtAdded.Load()-a0), perNodeHour(s.rtRemoved.Load()-r0), perNodeHour(s.addrChanges.Load()-e0),
		float64(runtime.NumGoroutine())/float64(len(live(nodes))))
	s.logf("%s messages per node per hour by kind:%s", name, perKind(k0, kinds(nodes), hours*float64(cfg.Nodes)))
	var split []string
	for p, b := range s.net.SentByProtocol() {
		split = append(split, fmt.Sprintf("%s %.0f kB", p, float64(b-pr0[p])/hours/float64(cfg.Nodes)/1000))
	}
	slices.Sort(split)
	s.logf("%s bytes sent per node per hour by protocol: %v", name, split)
	r := rate{bytes: float64(s.bytesNow()-b0) / hours, msgs: float64(counters(nodes)-m0) / hours}
	s.logf("%s: %.0f kB per node per hour, %.0f messages per node per hour", name, r.bytes/float64(cfg.Nodes)/1000, r.msgs/float64(cfg.Nodes))
	return r, true
}

// logBetween logs what the coordinators' guided search knows of the RTTs
// between nodes (Overlay.Between) against the world's: each live node's
// own RTTs to the others (measured ÷ true, p10/p50/p90), and of the pairs
// between two others among at most 50 live nodes, how many it knows.
func (s *sim) logBetween() {
	var live []*simNode
	for _, n := range s.nodes {
		if n != nil && !n.gone {
			live = append(live, n)
		}
	}
	sample := live[:min(len(live), 50)]
	var ratios []float64
	known, pairs := 0, 0
	for _, n := range live {
		self := n.o.Host().ID()
		for _, m := range live {
			if m == n {
				continue
			}
			if d, ok := n.o.Between(self, m.o.Host().ID()); ok {
				if t := s.w.RTTAddr(n.addr, m.addr); t > 0 {
					ratios = append(ratios, float64(d)/float64(t))
				}
			}
		}
		for i, a := range sample {
			for _, b := range sample[i+1:] {
				if a != n && b != n {
					pairs++
					if _, ok := n.o.Between(a.o.Host().ID(), b.o.Host().ID()); ok {
						known++
					}
				}
			}
		}
	}
	if len(ratios) == 0 || pairs == 0 {
		return
	}
	slices.Sort(ratios)
	q := func(f float64) float64 { return ratios[int(f*float64(len(ratios)-1))] }
	s.logf("inter-node RTTs the overlays measured: %d of %d ordered pairs own, measured ÷ true %.2f / %.2f / %.2f (p10 / p50 / p90); of the pairs between two others, %.1f %% known from announcements",
		len(ratios), len(live)*(len(live)-1), q(0.1), q(0.5), q(0.9), 100*float64(known)/float64(pairs))
}

// finish sets res's rejected claims and logs them and how far the
// databases grew: the figures read once the run is over.
func (s *sim) finish(res *Result) {
	for _, d := range s.dels {
		res.ClaimsRejected += d.Stats().ClaimsRejected
	}
	s.logf("probe claims rejected: %d (every node answers truly: false rejections)", res.ClaimsRejected)
	s.logBetween()
	// The databases run without compaction (p2ptest.SimDB): how far
	// level 0 grew.
	var tables, most int
	var bytes int64
	for _, db := range s.dbs {
		n := len(db.Tables())
		tables, most = tables+n, max(most, n)
		lsm, _ := db.Size()
		bytes += lsm
	}
	s.logf("badger: %.1f tables and %.0f kB per node, at most %d tables", float64(tables)/float64(len(s.dbs)), float64(bytes)/float64(len(s.dbs))/1000, most)
}
