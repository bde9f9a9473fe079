package crawl

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/micra-net/micra/internal/codec"
)

// Window is a weekly time span during which crawling (and, at the node's
// discretion, probing) may happen: on Day, from Start to End after midnight,
// in the location given to Windows.
type Window struct {
	Day        time.Weekday
	Start, End time.Duration
}

func (w Window) validate() error {
	if w.Day < time.Sunday || w.Day > time.Saturday || w.Start < 0 || w.End > 24*time.Hour || w.Start >= w.End {
		return fmt.Errorf("invalid window %v %v-%v", w.Day, w.Start, w.End)
	}
	return nil
}

// schedule answers whether crawling may happen at a given time.
type schedule struct {
	windows []Window
	loc     *time.Location
}

// open reports whether t is inside a window (always, without windows).
func (s schedule) open(t time.Time) bool {
	if len(s.windows) == 0 {
		return true
	}
	t = t.In(s.loc)
	y, m, d := t.Date()
	off := t.Sub(time.Date(y, m, d, 0, 0, 0, 0, s.loc))
	for _, w := range s.windows {
		if w.Day == t.Weekday() && off >= w.Start && off < w.End {
			return true
		}
	}
	return false
}

// nextOpen returns the earliest time not before t inside a window. Windows
// are validated, so one is found within eight days.
func (s schedule) nextOpen(t time.Time) time.Time {
	if s.open(t) {
		return t
	}
	t = t.In(s.loc)
	best := time.Time{}
	for day := range 8 {
		y, m, d := t.Date()
		midnight := time.Date(y, m, d+day, 0, 0, 0, 0, s.loc)
		for _, w := range s.windows {
			if midnight.Weekday() != w.Day {
				continue
			}
			start := midnight.Add(w.Start)
			end := midnight.Add(w.End)
			if end.After(t) {
				if start.Before(t) {
					start = t
				}
				if best.IsZero() || start.Before(best) {
					best = start
				}
			}
		}
		if !best.IsZero() {
			return best
		}
	}
	return t.Add(time.Hour) // unreachable with valid windows
}

// OpenAt reports whether the crawler's operator windows allow work at t.
// The node uses it to hold probing outside the windows too.
func (c *Crawler) OpenAt(t time.Time) bool { return c.sched.open(t) }

// NextOpen returns the earliest time not before t inside the crawler's
// operator windows: t itself when they are open (or there are none).
func (c *Crawler) NextOpen(t time.Time) time.Time { return c.sched.nextOpen(t) }

// Schedule is a set of weekly Windows in a location, with the semantics of
// the Windows option, for work outside the crawler that must respect the
// operator's windows too: the node gives it to the overlay so that probe
// requests wait for a window. The zero Schedule is always open. It is safe
// for concurrent use.
type Schedule struct{ s schedule }

// NewSchedule returns the schedule of windows w in loc (nil: local time).
func NewSchedule(loc *time.Location, w ...Window) (Schedule, error) {
	for _, x := range w {
		if err := x.validate(); err != nil {
			return Schedule{}, err
		}
	}
	if loc == nil {
		loc = time.Local
	}
	return Schedule{schedule{windows: slices.Clone(w), loc: loc}}, nil
}

// Open reports whether t is inside a window.
func (s Schedule) Open(t time.Time) bool { return s.s.open(t) }

// NextOpen returns the earliest time not before t inside a window: t
// itself when open.
func (s Schedule) NextOpen(t time.Time) time.Time { return s.s.nextOpen(t) }

// meter enforces the bandwidth cap (bytes per second, averaged with one
// second of burst) and the daily transfer cap.
type meter struct {
	mu       sync.Mutex
	rate     float64 // bytes per second, 0 = unlimited
	daily    int64
	loc      *time.Location
	next     time.Time // virtual finish time of the bytes charged so far
	day      string    // yyyy-mm-dd of the counter
	dayBytes int64
}

// charge accounts for n downloaded bytes at time now.
func (m *meter) charge(n int64, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d := now.In(m.loc).Format(time.DateOnly); d != m.day {
		m.day, m.dayBytes = d, 0
	}
	m.dayBytes += n
	if m.rate > 0 {
		if m.next.Before(now.Add(-time.Second)) {
			m.next = now.Add(-time.Second) // one second of burst
		}
		m.next = m.next.Add(time.Duration(float64(n) / m.rate * float64(time.Second)))
	}
}

// today returns the bytes downloaded on now's day.
func (m *meter) today(now time.Time) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if now.In(m.loc).Format(time.DateOnly) != m.day {
		return 0
	}
	return m.dayBytes
}

// wait returns when the next fetch may start: zero time if now.
func (m *meter) wait(now time.Time) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	var at time.Time
	if m.rate > 0 && m.next.After(now) {
		at = m.next
	}
	if m.daily > 0 {
		if d := now.In(m.loc).Format(time.DateOnly); d == m.day && m.dayBytes >= m.daily {
			y, mo, dd := now.In(m.loc).Date()
			tomorrow := time.Date(y, mo, dd+1, 0, 0, 0, 0, m.loc)
			if tomorrow.After(at) {
				at = tomorrow
			}
		}
	}
	return at
}

// state and restore persist the daily counter across restarts.
func (m *meter) state() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	var w codec.Encoder
	w.Byte(1)
	w.Str(m.day)
	w.Uvarint(uint64(m.dayBytes))
	return w
}

func (m *meter) restore(b []byte) error {
	r := newDecoder(b)
	if v := r.Byte(); v != 1 {
		return errors.Join(ErrCorruptValue, r.Err())
	}
	day, n := r.Str(16), r.Uvarint()
	if r.Err() != nil {
		return r.Err()
	}
	m.mu.Lock()
	m.day, m.dayBytes = day, int64(min(n, 1<<62))
	m.mu.Unlock()
	return nil
}
