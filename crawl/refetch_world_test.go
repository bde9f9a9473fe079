package crawl_test

import (
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/internal/world/worldtest"
)

// TestFingerprintDistances measures, on an emulated Internet, what audits
// of records rest on (overlay.AuditConfig.Tolerance, 6 bits by default):
// a page fetched again agrees with its record by fingerprint — in the same
// version within a few bits (counters and clocks are trivial changes), and
// across a substantive change (a new last paragraph, 30 world days later)
// mostly within the tolerance — while two different pages, even of one
// site (shared title, navigation and footer), are almost never within it.
// Last run: same version all 0 bits; 30 days later 93 % within 6 bits (99 %
// within 8, max 13); other pages of the same site 1 % within 6 bits (5 %
// within 8, 12 % within 10); pages of other sites none within 12.
func TestFingerprintDistances(t *testing.T) {
	if raceEnabled {
		t.Skip("a measurement of the crawl's fingerprints: the plain run has it")
	}
	var clock atomic.Int64
	clock.Store(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	run := worldtest.Start(t, worldtest.Params(19, 30, 2), world.TimeScale(0),
		world.Clock(func() time.Time { return time.Unix(0, clock.Load()) }))
	w := run.World()
	node := w.Nodes()[0].Addr
	resolver, err := run.Resolver(node)
	if err != nil {
		t.Fatal(err)
	}
	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	sink := &worldSink{}
	c, err := crawl.New(db, sink, crawl.SourceAddr(node), crawl.DNS(resolver), crawl.AllowPrivateNetworks(uint16(run.Port())),
		crawl.Politeness(0, 0), crawl.MaxDepth(1), crawl.Workers(8, 2, 16), crawl.Batching(16<<10, 50*time.Millisecond),
		crawl.Logger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var seeds []crawl.Request
	for _, s := range w.Sites() {
		if s.Hostile == world.NotHostile && !s.Flaky {
			seeds = append(seeds, crawl.Request{Link: run.URL(s), Depth: 1})
		}
	}
	if err := c.Submit(t.Context(), seeds...); err != nil {
		t.Fatal(err)
	}
	var recs []crawl.Record
	idle := 0
	for range 600 { // 60 s: a bound, not a timing assertion
		time.Sleep(100 * time.Millisecond)
		// Nothing being fetched and nothing ready (a host backing off
		// after a server error may keep a request queued).
		if st := c.Stats(); st.HostsReady == 0 && st.InFlight == 0 {
			idle++
		} else {
			idle = 0
		}
		if idle == 10 { // the last batch is sealed within 50 ms
			break
		}
	}
	sink.mu.Lock()
	for _, r := range sink.records {
		if r.Fingerprint != 0 && r.Status == 200 {
			recs = append(recs, r)
		}
	}
	sink.mu.Unlock()
	if len(recs) < 100 {
		t.Fatalf("%d parsed records; want at least 100 to measure", len(recs))
	}
	refetch := func() map[string]uint64 {
		out := map[string]uint64{}
		for _, r := range recs {
			o, err := c.Refetch(t.Context(), r.URL)
			if err == nil && o.Status == 200 && o.Fingerprint != 0 {
				out[r.URL] = o.Fingerprint
			}
		}
		return out
	}
	dists := func(now map[string]uint64) []int {
		var d []int
		for _, r := range recs {
			if fp, ok := now[r.URL]; ok {
				d = append(d, crawl.FingerprintDistance(fp, r.Fingerprint))
			}
		}
		slices.Sort(d)
		return d
	}
	same := dists(refetch())
	clock.Add(int64(30 * 24 * time.Hour))
	later := dists(refetch())
	// Different pages: every pair of one site's pages (up to 20 a site),
	// and each record against the next of another site.
	var sameSite, otherSite []int
	bySite := map[string][]crawl.Record{}
	for _, r := range recs {
		if h := host(r.URL); len(bySite[h]) < 20 {
			bySite[h] = append(bySite[h], r)
		}
	}
	for _, rs := range bySite {
		for i := range rs {
			for j := i + 1; j < len(rs); j++ {
				sameSite = append(sameSite, crawl.FingerprintDistance(rs[i].Fingerprint, rs[j].Fingerprint))
			}
		}
	}
	for i := 1; i < len(recs); i++ {
		if a, b := recs[i-1], recs[i]; host(a.URL) != host(b.URL) {
			otherSite = append(otherSite, crawl.FingerprintDistance(a.Fingerprint, b.Fingerprint))
		}
	}
	slices.Sort(sameSite)
	slices.Sort(otherSite)
	const tolerance = 6 // overlay.AuditConfig's default
	within := func(d []int) float64 {
		n := 0
		for _, v := range d {
			if v <= tolerance {
				n++
			}
		}
		return float64(n) / float64(max(len(d), 1))
	}
	t.Logf("%d records: same version %s; 30 days later %s; other page, same site %s; other site %s",
		len(recs), summary(same), summary(later), summary(sameSite), summary(otherSite))
	hist := func(d []int) string {
		var b []byte
		for _, cut := range []int{0, 2, 4, 6, 8, 10, 12, 14, 16, 20} {
			n := 0
			for _, v := range d {
				if v <= cut {
					n++
				}
			}
			b = fmt.Appendf(b, " ≤%d:%.0f%%", cut, 100*float64(n)/float64(max(len(d), 1)))
		}
		return string(b)
	}
	t.Logf("30 days later:%s", hist(later))
	t.Logf("other page, same site:%s", hist(sameSite))
	t.Logf("within %d bits: same version %.1f %%, 30 days later %.1f %%, other page same site %.1f %%, other site %.1f %%",
		tolerance, 100*within(same), 100*within(later), 100*within(sameSite), 100*within(otherSite))
	if len(same) < len(recs)*9/10 || same[len(same)-1] > 3 {
		t.Errorf("the same version refetched: %s; want every one within 3 bits", summary(same))
	}
	if within(later) < 0.9 {
		t.Errorf("only %.1f %% of pages 30 days later within %d bits", 100*within(later), tolerance)
	}
	if within(sameSite) > 0.03 || within(otherSite) > 0.01 {
		t.Errorf("different pages within %d bits: %.1f %% (same site), %.1f %% (other site)", tolerance, 100*within(sameSite), 100*within(otherSite))
	}
}

func host(u string) string {
	p, _ := url.Parse(u)
	return p.Host
}

// summary gives a sorted sample's size, median, 90th percentile and
// maximum.
func summary(d []int) string {
	if len(d) == 0 {
		return "none"
	}
	return fmt.Sprintf("n=%d median %d p90 %d max %d", len(d), d[len(d)/2], d[len(d)*9/10], d[len(d)-1])
}
