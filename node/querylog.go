package node

import (
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// queryLog times the searches an indexer answers: a Prometheus histogram
// and the last queryWindow durations for the status page's percentiles.
type queryLog struct {
	hist prometheus.Histogram

	mu    sync.Mutex
	count uint64
	last  []time.Duration // ring of the latest durations
	next  int
}

const queryWindow = 1000

func newQueryLog() *queryLog {
	return &queryLog{hist: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "micra_indexer_query_seconds",
		Help:    "Time to answer a search (the search page with a query, or /api/search).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 12), // 0.1 ms to about 2.4 s
	})}
}

func (q *queryLog) observe(d time.Duration) {
	q.hist.Observe(d.Seconds())
	q.mu.Lock()
	defer q.mu.Unlock()
	q.count++
	if len(q.last) < queryWindow {
		q.last = append(q.last, d)
		return
	}
	q.last[q.next] = d
	q.next = (q.next + 1) % queryWindow
}

// summary returns the searches answered and the p50 and p99 of the latest
// ones in milliseconds (0 with none).
func (q *queryLog) summary() (count uint64, p50, p99 float64) {
	q.mu.Lock()
	s := slices.Clone(q.last)
	count = q.count
	q.mu.Unlock()
	if len(s) == 0 {
		return count, 0, 0
	}
	slices.Sort(s)
	at := func(p float64) float64 { return float64(s[int(p*float64(len(s)-1))].Microseconds()) / 1000 }
	return count, at(0.50), at(0.99)
}
