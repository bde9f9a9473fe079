package world

import (
	"maps"
	"net/netip"
	"sync"
	"time"
)

// Counters is a snapshot of what a site served since Start or the last
// ResetCounters.
type Counters struct {
	Requests   int64 // requests answered, any status
	Bytes      int64 // response body bytes written (after content coding)
	MaxConns   int   // most connections open at once, all sources together
	Disallowed int64 // requests for URLs robots.txt forbids to RobotsAgent
	Status     map[int]int64
	Sources    map[netip.Addr]SourceCounters // by the TCP source address
}

// SourceCounters is what one source address got from a site.
type SourceCounters struct {
	Requests   int64
	Bytes      int64
	MaxConns   int           // most connections open at once from this source
	Disallowed int64         // requests for URLs robots.txt forbids to RobotsAgent
	MinGap     time.Duration // shortest time between two request arrivals, unscaled; 0 with fewer than two
}

// siteStats counts one site's traffic.
type siteStats struct {
	mu       sync.Mutex
	req      int64
	bytes    int64
	conns    int
	maxConns int
	disallow int64
	status   map[int]int64
	src      map[netip.Addr]*srcStats
}

type srcStats struct {
	req, bytes, disallow int64
	conns, maxConns      int
	last                 time.Time
	minGap               time.Duration
}

func newSiteStats() *siteStats {
	return &siteStats{status: map[int]int64{}, src: map[netip.Addr]*srcStats{}}
}

func (st *siteStats) source(a netip.Addr) *srcStats {
	s := st.src[a]
	if s == nil {
		s = &srcStats{}
		st.src[a] = s
	}
	return s
}

// request counts a request arriving at now (wall) from src; scale turns
// wall gaps into unscaled ones.
func (st *siteStats) request(src netip.Addr, now time.Time, scale float64, disallowed bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.req++
	s := st.source(src)
	s.req++
	if disallowed {
		st.disallow++
		s.disallow++
	}
	if !s.last.IsZero() {
		gap := now.Sub(s.last)
		if scale > 0 {
			gap = time.Duration(float64(gap) / scale)
		}
		if s.minGap == 0 || gap < s.minGap {
			s.minGap = max(gap, 1)
		}
	}
	s.last = now
}

func (st *siteStats) done(src netip.Addr, status int, n int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.status[status]++
	st.bytes += n
	st.source(src).bytes += n
}

func (st *siteStats) connOpen(src netip.Addr) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.conns++
	st.maxConns = max(st.maxConns, st.conns)
	s := st.source(src)
	s.conns++
	s.maxConns = max(s.maxConns, s.conns)
}

func (st *siteStats) connClose(src netip.Addr) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.conns--
	st.source(src).conns--
}

func (st *siteStats) snapshot() Counters {
	st.mu.Lock()
	defer st.mu.Unlock()
	c := Counters{Requests: st.req, Bytes: st.bytes, MaxConns: st.maxConns, Disallowed: st.disallow,
		Status: maps.Clone(st.status), Sources: make(map[netip.Addr]SourceCounters, len(st.src))}
	for a, s := range st.src {
		c.Sources[a] = SourceCounters{Requests: s.req, Bytes: s.bytes, MaxConns: s.maxConns, Disallowed: s.disallow, MinGap: s.minGap}
	}
	return c
}

// reset clears the counts; open connections stay counted as open.
func (st *siteStats) reset() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.req, st.bytes, st.disallow = 0, 0, 0
	st.maxConns = st.conns
	st.status = map[int]int64{}
	for a, s := range st.src {
		if s.conns == 0 {
			delete(st.src, a)
			continue
		}
		st.src[a] = &srcStats{conns: s.conns, maxConns: s.conns}
	}
}
