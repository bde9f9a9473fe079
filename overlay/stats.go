package overlay

import (
	"sync"
	"sync/atomic"

	dhtpb "github.com/libp2p/go-libp2p-kad-dht/pb"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/overlay/pb"
)

// Counters of one overlay, for measurements and the dashboard.

type counters struct {
	requests, lookups, cacheHits, cacheMisses, redirects, puts atomic.Int64
	audits, refetches, convictions, withheldNotices            atomic.Int64
	releasesRefused, releaseBadPeers, releaseBytes             atomic.Int64
	dhtServed, refreshes, adopted                              atomic.Int64
	kinds                                                      sync.Map // msgKind -> *atomic.Int64
	takenBack                                                  sync.Map // reason -> *atomic.Int64
}

// countTakenBack counts a subnet this node, as its coordinator, took from
// its node, by reason.
func (c *counters) countTakenBack(reason string) {
	v, _ := c.takenBack.LoadOrStore(reason, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// msgKind is a message's protocol and type, as Stats.Kinds counts them.
type msgKind struct {
	dht bool // a DHT request served, else a micra request sent
	t   int32
	key dhtKey // a DHT request's key
}

// dhtKey sorts DHT requests by their key, for measurements.
type dhtKey uint8

const (
	keyOther    dhtKey = iota // another peer's ID: the DHT's bucket refreshes, peer routing
	keyAsker                  // the asker's own ID: self-lookups (the DHT's refresh, micra's neighbourhood lookup)
	keyAnswerer               // the answering node's ID: kad-dht's check of a peer before it enters or stays in a routing table
	keyShard                  // a 32-byte key: a shard's (micra's lookups and walks) or a record's
)

func keyOf(key []byte, asker, answerer peer.ID) dhtKey {
	switch {
	case string(key) == string(asker):
		return keyAsker
	case string(key) == string(answerer):
		return keyAnswerer
	case len(key) == 32:
		return keyShard
	}
	return keyOther
}

func (k msgKind) String() string {
	if k.dht {
		s := "dht/" + dhtpb.Message_MessageType(k.t).String()
		switch k.key {
		case keyAsker:
			s += " (asker's ID)"
		case keyAnswerer:
			s += " (answerer's ID)"
		case keyShard:
			s += " (32-byte key)"
		}
		return s
	}
	return "micra/" + pb.Message_Type(k.t).String()
}

// count adds one to the counter of a message kind.
func (c *counters) count(kind msgKind) {
	v, ok := c.kinds.Load(kind)
	if !ok {
		v, _ = c.kinds.LoadOrStore(kind, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(1)
}

// Stats are cumulative counters of one overlay, for measurements.
type Stats struct {
	Requests  int64 // request streams opened by this node (all micra protocols)
	Lookups   int64 // DHT closest-peer lookups
	DHTServed int64 // DHT requests this node answered (every peer's lookups, puts and gets)
	Refreshes int64 // routing-table refreshes after the join's (refresh.go)
	// Adopted counts the subnets this node took up because its
	// coordinator's heartbeat acks listed them as its own though their
	// ASSIGN never reached it (mine.go).
	Adopted     int64
	CacheHits   int64 // Resolve answered from the cache
	CacheMisses int64
	Redirects   int64 // NOT_COORDINATOR answers followed
	Puts        int64 // organisation index records put in the DHT
	Audits      int64 // audits judged as a coordinator (evidence verified)
	Refetches   int64 // pages fetched afresh for audits, as an auditor
	Convictions int64 // nodes convicted by audits, as a coordinator
	// WithheldNotices counts the withholding notices about a subnet's
	// current node this node took as a coordinator (withhold.go).
	WithheldNotices int64
	// Releases: refused (unsigned, untrusted, malformed, out-of-bounds
	// times, too large), peers that served a wrong snapshot file, and
	// snapshot file bytes fetched.
	ReleasesRefused int64
	ReleaseBadPeers int64
	ReleaseBytes    int64
	// Notices are the notices a coordinator's decisions set off (to the
	// node chosen, the organisation and block indexes, the DHT) that are
	// queued or being sent.
	Notices int64
	// TakenBack counts the subnets this node, as a coordinator, took
	// from their nodes and decided again, by reason: "orphaned" (silent
	// past the liveness timeout), "convicted" (by audits), "withheld"
	// (crawl requests left unanswered, withhold.go), "refused" (crawl
	// requests not taken).
	TakenBack map[string]int64
	// Kinds counts messages by kind: the micra requests this node sent
	// ("micra/" and the message type) and the DHT requests it answered
	// ("dht/" and the DHT message type, with " (asker's ID)" or
	// " (answerer's ID)" when the key was one of those and " (32-byte key)"
	// for a shard's or a record's key), for measurements.
	Kinds map[string]int64
}

// Stats returns the counters so far.
func (o *Overlay) Stats() Stats {
	st := Stats{
		Requests: o.stats.requests.Load(), Lookups: o.stats.lookups.Load(),
		CacheHits: o.stats.cacheHits.Load(), CacheMisses: o.stats.cacheMisses.Load(),
		Redirects: o.stats.redirects.Load(), Puts: o.stats.puts.Load(), DHTServed: o.stats.dhtServed.Load(),
		Refreshes: o.stats.refreshes.Load(), Adopted: o.stats.adopted.Load(), Audits: o.stats.audits.Load(), Refetches: o.stats.refetches.Load(), Convictions: o.stats.convictions.Load(),
		WithheldNotices: o.stats.withheldNotices.Load(),
		ReleasesRefused: o.stats.releasesRefused.Load(), ReleaseBadPeers: o.stats.releaseBadPeers.Load(),
		ReleaseBytes: o.stats.releaseBytes.Load(), Kinds: map[string]int64{}, TakenBack: map[string]int64{},
		Notices: int64(len(o.coord.assignQ)+len(o.coord.orgQ)+len(o.coord.blockQ)+len(o.coord.pubQ)) + o.coord.noticing.Load(),
	}
	o.stats.kinds.Range(func(k, v any) bool {
		st.Kinds[k.(msgKind).String()] = v.(*atomic.Int64).Load()
		return true
	})
	o.stats.takenBack.Range(func(k, v any) bool {
		st.TakenBack[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return st
}
