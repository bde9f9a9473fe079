package crawl

import (
	"encoding/binary"
	"math"
	"net/netip"
	"sync"
	"time"
)

// politeness keeps at most limit connections (one by default) and a minimum
// delay per server address (per host is kept by the frontier's leases and
// ready times). Its map is bounded: idle addresses whose delay has passed are
// forgotten.
type politeness struct {
	mu    sync.Mutex
	limit int
	m     map[netip.Addr]*addrState
}

type addrState struct {
	busy int // requests in flight
	next time.Time
}

const maxAddrStates = 65536

func newPoliteness(limit int) *politeness {
	return &politeness{limit: max(limit, 1), m: make(map[netip.Addr]*addrState)}
}

// acquire reserves addr at now. If it is busy or in its delay, it returns
// the time to try again and false.
func (p *politeness) acquire(a netip.Addr, now time.Time) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.m[a]
	if s == nil {
		if len(p.m) >= maxAddrStates {
			for k, v := range p.m {
				if v.busy == 0 && v.next.Before(now) {
					delete(p.m, k)
				}
			}
		}
		s = &addrState{}
		p.m[a] = s
	}
	switch {
	case s.busy >= p.limit:
		return now.Add(time.Second), false
	case s.next.After(now):
		return s.next, false
	}
	s.busy++
	return time.Time{}, true
}

// release frees addr; the next request may start at next.
func (p *politeness) release(a netip.Addr, next time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.m[a]; s != nil && s.busy > 0 {
		s.busy--
		s.next = next
	}
}

func logf(x float64) float64 { return math.Log(x) }

func appendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }
