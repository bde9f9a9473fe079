package crawl

import (
	"fmt"
	"net/url"
	"testing"
	"time"
)

// fillFrontier queues perHost URLs on each of hosts hosts, in pages of 64
// links as extraction adds them.
func fillFrontier(b *testing.B, f *frontier, hosts, perHost int, now time.Time, round int) {
	b.Helper()
	es := make([]entry, 0, 64)
	us := make([]*url.URL, 0, 64)
	flush := func() {
		if _, err := f.addBatch(es, us, false, now); err != nil {
			b.Fatal(err)
		}
		es, us = es[:0], us[:0]
	}
	for h := range hosts {
		for k := range perHost {
			raw := fmt.Sprintf("http://h%d.example/r%d/p%d.html", h, round, k)
			u, _ := url.Parse(raw)
			es = append(es, entry{URL: raw, Parent: "http://h0.example/", Depth: 2, Hops: 1})
			us = append(us, u)
			if len(es) == cap(es) {
				flush()
			}
		}
	}
	if len(es) > 0 {
		flush()
	}
}

// leaseBench is a frontier of 1,000 hosts with 20 URLs each, refilled
// (off the clock) whenever it runs empty.
type leaseBench struct {
	f     *frontier
	now   time.Time
	round int
}

func newLeaseBench(b *testing.B) *leaseBench {
	f, err := openFrontier(openMemDB(b), 1<<20, 3*time.Minute, 1, nil)
	if err != nil {
		b.Fatal(err)
	}
	lb := &leaseBench{f: f, now: time.Unix(1_700_000_000, 0)}
	fillFrontier(b, f, 1000, 20, lb.now, 0)
	return lb
}

// next checks out the next request, advancing the clock by a microsecond.
func (lb *leaseBench) next(b *testing.B) *lease {
	for {
		l, _, err := lb.f.next(lb.now)
		if err != nil {
			b.Fatal(err)
		}
		if l != nil {
			lb.now = lb.now.Add(time.Microsecond)
			return l
		}
		b.StopTimer()
		lb.round++
		fillFrontier(b, lb.f, 1000, 20, lb.now, lb.round)
		b.StartTimer()
	}
}

// BenchmarkFrontierLease measures the dispatch hot path: next checks a
// request out of the earliest ready host, finish ends it and sets the
// host's next ready time, over 1,000 hosts.
func BenchmarkFrontierLease(b *testing.B) {
	lb := newLeaseBench(b)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		l := lb.next(b)
		if err := lb.f.finish(l, false, lb.now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFrontierAdd measures queueing the links of a page: 64 new URLs
// on 8 hosts in one addBatch.
func BenchmarkFrontierAdd(b *testing.B) {
	db := openMemDB(b)
	f, err := openFrontier(db, 1<<22, 3*time.Minute, 1, nil)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	es := make([]entry, 64)
	us := make([]*url.URL, 64)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		for k := range es {
			raw := fmt.Sprintf("http://h%d.example/p%d.html", k%8, i)
			i++
			us[k], _ = url.Parse(raw)
			es[k] = entry{URL: raw, Parent: "http://h0.example/", Depth: 2, Hops: 1}
		}
		if _, err := f.addBatch(es, us, false, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFrontierPage measures the frontier's work for one fetched page,
// the way the crawler does it since records are kept pending (next;
// fetched when the response goes to processing; complete with the page's
// state, its revisit and a 600-byte record) and the way it did before
// (next; finish, which dequeued at the fetch; update), for comparison.
func BenchmarkFrontierPage(b *testing.B) {
	rec := make([]byte, 600)
	visit := func(p *pageState) { p.Visits++; p.Indexed = true }
	for _, mode := range []string{"fetched+complete", "finish+update"} {
		b.Run(mode, func(b *testing.B) {
			lb := newLeaseBench(b)
			f := lb.f
			var keys [][]byte
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				l := lb.next(b)
				rev := &entry{URL: l.entry.URL}
				if mode == "finish+update" {
					if err := f.finish(l, false, lb.now); err != nil {
						b.Fatal(err)
					}
					if err := f.update(l.entry.URL, visit, lb.now.Add(time.Hour), rev); err != nil {
						b.Fatal(err)
					}
					continue
				}
				if err := f.fetched(l, lb.now); err != nil {
					b.Fatal(err)
				}
				k, _, err := f.complete(l, visit, lb.now.Add(time.Hour), rev, rec, nil)
				if err != nil {
					b.Fatal(err)
				}
				// Delivered in batches of 64, as a batch of records is.
				if keys = append(keys, k); len(keys) == 64 {
					if err := f.deletePending(keys); err != nil {
						b.Fatal(err)
					}
					keys = keys[:0]
				}
			}
		})
	}
}
