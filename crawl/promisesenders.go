package crawl

import "time"

// Shares of a host's room by sender. A host's room (Promise) is shared by
// everyone who sends the node requests for it, so one sender that keeps
// it full — real pages of the host, sent as fast as the node crawls them
// — would have the node refuse every other sender's requests for the
// host. So a sender may hold at most three quarters of a host's room, and
// a newcomer may take one beyond it (roomFor). A sender is named by its
// caller (micra's node names the place of the peer: its AS or its /24 or
// /48, so that one operator's peer IDs, which are free, count as one).
// The requests each sender had taken are kept in memory, for the horizon
// at most, and count while their pages are queued: after a restart none
// count.

// roomFor reports whether a host's room of limit requests, ahead of them
// queued, takes one more from a sender that has mine of them (counted:
// whether the sender is counted at all). A sender may hold three quarters
// of the room, so that a lone sender's queue still outlasts the few
// minutes before it sends the refused requests again, and a quarter is
// left for the others. A sender with none queued may take one beyond the
// room, within a reserve of a quarter of it: two places that fill the
// room between them leave a newcomer one request at a time. The reserve
// keeps the promise: at half the pace a room and a quarter take 1.25
// horizons (19 minutes of micra's node's 15), within its two graces (20).
func roomFor(ahead, limit, mine int, counted bool) bool {
	switch {
	case !counted:
		return ahead < limit
	case mine == 0 && ahead < limit+reserve(limit):
		return limit > 0
	}
	return ahead < limit && mine < max(1, limit*3/4)
}

// reserve is the newcomers' part beyond a host's room of limit: a
// quarter of it, at least one.
func reserve(limit int) int { return max(1, limit/4) }

// maxLedger bounds the requests the ledger keeps; beyond it, the hosts
// whose latest requests are the oldest are forgotten (evict).
const maxLedger = 1 << 16

// senderLedger is what each sender had taken, by host. It is used under
// Crawler.promMu.
type senderLedger struct {
	hosts map[string]map[string][]promised // host -> sender -> requests taken
	n     int                              // requests kept
}

type promised struct {
	key [16]byte // urlHash of the normalised URL
	at  time.Time
}

// count returns how many of the requests from sender for host are still
// queued (queued reports it) and younger than horizon at now, forgetting
// the others (the other senders' by age alone).
func (l *senderLedger) count(host, sender string, now time.Time, horizon time.Duration, queued func([16]byte) bool) int {
	by := l.hosts[host]
	for s, ps := range by {
		kept := ps[:0]
		for _, p := range ps {
			if now.Sub(p.at) < horizon && (s != sender || queued(p.key)) {
				kept = append(kept, p)
			}
		}
		l.n -= len(ps) - len(kept)
		if len(kept) == 0 {
			delete(by, s)
		} else {
			by[s] = kept
		}
	}
	if by != nil && len(by) == 0 {
		delete(l.hosts, host)
	}
	return len(by[sender])
}

// add counts a request for key taken from sender for host at now (once:
// a page the sender sent again is counted from the first time).
func (l *senderLedger) add(host, sender string, key [16]byte, now time.Time) {
	if l.hosts == nil {
		l.hosts = map[string]map[string][]promised{}
	}
	for _, p := range l.hosts[host][sender] {
		if p.key == key {
			return
		}
	}
	for l.n >= maxLedger && len(l.hosts) > 0 {
		l.evict()
	}
	by := l.hosts[host]
	if by == nil {
		by = map[string][]promised{}
		l.hosts[host] = by
	}
	by[sender] = append(by[sender], promised{key, now})
	l.n++
}

// evict forgets the hosts whose latest request is in the older half of
// the span of the hosts' latest requests (at least the oldest host), so
// that a full ledger costs one pass per many requests added, not one per
// request.
func (l *senderLedger) evict() {
	latest := make(map[string]time.Time, len(l.hosts))
	var oldest, newest time.Time
	for h, by := range l.hosts {
		var t time.Time
		for _, ps := range by {
			if at := ps[len(ps)-1].at; at.After(t) {
				t = at
			}
		}
		latest[h] = t
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
		if t.After(newest) {
			newest = t
		}
	}
	mid := oldest.Add(newest.Sub(oldest) / 2)
	for h, t := range latest {
		if !t.After(mid) {
			for _, ps := range l.hosts[h] {
				l.n -= len(ps)
			}
			delete(l.hosts, h)
		}
	}
}
