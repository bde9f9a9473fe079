package crawl

import "time"

// Shares of a host's room by sender. A host's room (Promise) is shared by
// everyone who sends the node requests for it, so one sender that keeps
// it full — real pages of the host, sent as fast as the node crawls them
// — would have the node refuse every other sender's requests for the
// host. So a sender may hold at most senderShare of a host's room; the
// rest is for the others. A sender is named by its caller (micra's node
// names the place of the peer: its AS or its /24 or /48, so that one
// operator's peer IDs, which are free, count as one). The requests each
// sender had taken are kept in memory, for the horizon at most, and
// count while their pages are queued: after a restart none count.

// senderShare is the part of a host's room one sender may hold: three
// quarters, so that a lone sender's queue still outlasts the few minutes
// before it sends the refused requests again, and a quarter is left.
func senderShare(limit int) int { return max(1, limit*3/4) }

// maxLedger bounds the requests the ledger keeps; beyond it, the host
// whose latest request is the oldest is forgotten.
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

// evict forgets the host whose latest request is the oldest.
func (l *senderLedger) evict() {
	var oldest string
	var at time.Time
	for h, by := range l.hosts {
		var latest time.Time
		for _, ps := range by {
			if t := ps[len(ps)-1].at; t.After(latest) {
				latest = t
			}
		}
		if oldest == "" || latest.Before(at) {
			oldest, at = h, latest
		}
	}
	for _, ps := range l.hosts[oldest] {
		l.n -= len(ps)
	}
	delete(l.hosts, oldest)
}
