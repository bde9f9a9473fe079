package overlay

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Rows of measured RTTs. A coordinator's guided search bounds a candidate
// c by a probed node p's answer and the RTT between p and c (triangle
// inequality), so what it needs of the inter-node RTTs is the row of each
// node it probes: p's RTTs to everyone. Routine announcements reach only
// a node's DHT neighbours, O(log N) of them, with a sample of 96; at 300
// nodes a coordinator knew 12 % of the pairs between two others that way.
// So when a coordinator probes a node whose row it holds no fresh copy
// of, it asks for the row alongside the probe: one ANNOUNCE exchange with
// want_rtts set, answered with up to maxRowRTTs RTTs (rowWanted). The row
// is checked and kept as any announced RTTs are (announce.go), and a later
// decision reuses it for rttMaxAge/2 before asking again.
//
// The rows held are bounded in entries, not only in peers: at most
// maxRTTEntries RTTs over all rows (some 20 MB), the oldest rows going
// first.
const maxRTTEntries = 1 << 18

// keepRTTRow keeps us as author's announced RTTs, and drops the oldest
// other rows while the table holds more than maxRTTEntries RTTs. A whole
// row (an answer to want_rtts, or a sample of fewer than
// maxAnnouncedRTTs, which a node sends when it measured no more) replaces
// the last one; a routine sample of a longer row only updates the
// entries it carries of a whole row younger than rttMaxAge, which it
// would otherwise cut to 96. o.mu is held.
func (o *Overlay) keepRTTRow(author peer.ID, us map[peer.ID]int64, whole bool) {
	now := time.Now()
	whole = whole || len(us) < maxAnnouncedRTTs
	if old, ok := o.rtts[author]; ok && !whole && old.whole && now.Sub(old.at) <= o.rttMaxAge() {
		for p, d := range us {
			if _, had := old.us[p]; !had {
				if len(old.us) >= maxRowRTTs {
					continue
				}
				o.rttEntries++
			}
			old.us[p] = d
		}
	} else {
		o.dropRTTRow(author)
		o.rtts[author] = announcedRTTs{us: us, at: now, whole: whole}
		o.rttEntries += len(us)
	}
	for o.rttEntries > maxRTTEntries {
		oldest, found := peer.ID(""), false
		for id, a := range o.rtts {
			if id != author && (!found || a.at.Before(o.rtts[oldest].at)) {
				oldest, found = id, true
			}
		}
		if !found {
			return
		}
		o.dropRTTRow(oldest)
	}
}

// dropRTTRow forgets the RTTs id announced. o.mu is held.
func (o *Overlay) dropRTTRow(id peer.ID) {
	if a, ok := o.rtts[id]; ok {
		o.rttEntries -= len(a.us)
		delete(o.rtts, id)
	}
}

// rowWanted reports whether to ask p for its row of measured RTTs
// (want_rtts) now, and notes the ask when it does: when this node holds
// no whole row of p younger than rttMaxAge/2 and has not asked p in the
// last rttMaxAge/2 (a failed or empty answer is not asked again at every
// probe). A row shorter than half the peers this node knows is a node
// still measuring (a young network, or a node just joined): it is asked
// again after a quarter of an announcement interval instead. A
// coordinator's delegation environment asks it at each probe it sends,
// and sends the ask (exchangeAnnounce with wantRow) beside the probe when
// it reports true; the row, if any, is then what Between and MeasuredBy
// read.
func (o *Overlay) rowWanted(p peer.ID) bool {
	if p == o.h.ID() {
		return false
	}
	now := time.Now()
	longest := o.rttMaxAge() / 2
	again := longest
	o.mu.Lock()
	defer o.mu.Unlock()
	a, ok := o.rtts[p]
	if 2*len(a.us) < len(o.peers) {
		again = o.cfg.announce / 4
	}
	if ok && a.whole && now.Sub(a.at) < again || now.Sub(o.pulled[p]) < again {
		return false
	}
	if len(o.pulled) >= maxAnnouncedPeers {
		for id, at := range o.pulled {
			if now.Sub(at) >= longest {
				delete(o.pulled, id)
			}
		}
		if len(o.pulled) >= maxAnnouncedPeers {
			return false
		}
	}
	o.pulled[p] = now
	return true
}
