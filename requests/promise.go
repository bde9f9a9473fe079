package requests

import (
	"context"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
)

// promiseHorizon is how soon the node must be able to crawl a request it
// signs a receipt for. A coordinator judges a withholding notice no
// sooner than two of its graces after the receipt (overlay.WithholdConfig,
// 10 minutes each by default); the rest of them is for the record's way
// to the indexer.
const promiseHorizon = 15 * time.Minute

// NewPromiser returns the promise policy (Promises) over c: it takes
// only the crawl requests the crawler can fetch within promiseHorizon
// (crawl.Crawler.Promise). A link another node hands on whose page is
// fresh (crawl.Crawler.Fresh: fetched within the revisit minimum, its
// record sent) is taken without
// queueing it again: the indexers have its record, and a refetch would
// take a new page's room; an indexer of the link's result shard asks for
// a page because it lacks the record, so its requests are queued, with
// Record set: fetched unconditionally, a record made even if unchanged.
// The one request a judge of its subnet sends (overlay.Judges: the
// coordinator of a notice that says this node refused it, overlay.AskCrawl)
// has half the horizon more, so that a burst of requests that fills a
// host's queue does not have the node judged as refusing; at the actual
// pace of a host's delay (Promise counts half of it) that is still within
// the two graces before a judgment. A judge has that room once in half a
// grace per host: a coordinator asks for one page of a host per grace
// (overlay/withheldserve.go), and a judge that sent lone requests as fast as
// the node took them would otherwise fill the room for everyone's judges.
// The crawler counts the requests by the place of their sender
// (overlay.PlaceKey; every sender whose place is unknown, relayed, as
// one), and one place holds at most three quarters of a host's room (a
// place with none queued may take one beyond it, within a reserve), so
// that a peer keeping the room full leaves the others a part of it.
func NewPromiser(c PromiseConfig) PromiseHandler {
	pr := promiser{rooms: &judgeRooms{}, every: c.JudgeEvery, promise: c.Promise, fresh: c.Fresh, indexer: c.Indexer,
		resolve: c.Resolve, judges: c.Judges, place: func(p peer.ID) string {
			if k := c.Place(p); k != "" {
				return k
			}
			return "unknown"
		}}
	return pr.take
}

// PromiseConfig is what the promise policy asks of the node: its
// crawler's Promise and Fresh, who is an indexer of a link's result shard,
// how the node resolves a host, who judges a subnet, and the place a
// sender is counted by ("" when unknown). Each must be safe for
// concurrent use.
type PromiseConfig struct {
	JudgeEvery time.Duration // how often a judge has a host's room: half the withholding grace
	Promise    func(ctx context.Context, horizon time.Duration, from string, reqs ...crawl.Request) ([]bool, error)
	Fresh      func(link string) bool
	Indexer    func(p peer.ID, link string) bool
	Resolve    Resolver
	Judges     func(ctx context.Context, a netip.Addr, p peer.ID) bool
	Place      func(p peer.ID) string
}

// promiser is the promise policy over its parts (PromiseConfig), with
// when each judge last had the room for judges (at most once in every).
type promiser struct {
	rooms   *judgeRooms
	every   time.Duration
	promise func(ctx context.Context, horizon time.Duration, from string, reqs ...crawl.Request) ([]bool, error)
	place   func(p peer.ID) string
	fresh   func(link string) bool
	indexer func(p peer.ID, link string) bool
	resolve Resolver
	judges  func(ctx context.Context, a netip.Addr, p peer.ID) bool
}

func (pr promiser) take(ctx context.Context, from peer.ID, reqs []crawl.Request) ([]bool, error) {
	taken := make([]bool, len(reqs))
	var rest []crawl.Request
	var at []int
	for i, r := range reqs {
		switch {
		case pr.indexer(from, r.Link):
			r.Record = true
		case pr.fresh(r.Link):
			taken[i] = true
			continue
		}
		rest, at = append(rest, r), append(at, i)
	}
	if len(rest) == 0 {
		return taken, nil
	}
	sender := pr.place(from)
	t, err := pr.promise(ctx, promiseHorizon, sender, rest...)
	if err != nil {
		return nil, err
	}
	for j, i := range at {
		taken[i] = t[j]
	}
	if len(reqs) != 1 || taken[0] {
		return taken, nil
	}
	u, err := url.Parse(reqs[0].Link)
	if err != nil {
		return taken, nil
	}
	a, err := pr.resolve(ctx, u.Hostname())
	if err != nil || !pr.judges(ctx, a, from) {
		return taken, nil
	}
	host := strings.ToLower(u.Hostname())
	if !pr.rooms.reserve(from, host, time.Now(), pr.every) {
		return taken, nil
	}
	t, err = pr.promise(ctx, promiseHorizon*3/2, sender, rest...)
	if err != nil || !t[0] {
		pr.rooms.release(from, host)
	}
	return t, err
}

// judgeRooms are when each judge last had a host's room for judges, by
// judge and host. A judge has it for at most maxJudgeRoomsPer hosts at
// once (an honest coordinator asks for one page of a host per grace; one
// that asks for more hosts than that within half a grace gets no more),
// and the table for at most maxJudgeRooms pairs.
type judgeRooms struct {
	mu  sync.Mutex
	m   map[judgeHost]time.Time
	per map[peer.ID]int // live pairs by judge
}

type judgeHost struct {
	judge peer.ID
	host  string
}

const (
	maxJudgeRooms    = 16384
	maxJudgeRoomsPer = 256
)

// reserve records that judge has host's room at now, unless it had it
// within every before now, or has it for maxJudgeRoomsPer hosts, or the
// table is full: then it reports false.
func (j *judgeRooms) reserve(judge peer.ID, host string, now time.Time, every time.Duration) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	k := judgeHost{judge, host}
	if at, ok := j.m[k]; ok && now.Sub(at) < every {
		return false
	}
	if j.m == nil {
		j.m, j.per = map[judgeHost]time.Time{}, map[peer.ID]int{}
	}
	if _, ok := j.m[k]; !ok && (len(j.m) >= maxJudgeRooms || j.per[judge] >= maxJudgeRoomsPer) {
		for o, at := range j.m {
			if now.Sub(at) >= every {
				j.forget(o)
			}
		}
		if len(j.m) >= maxJudgeRooms || j.per[judge] >= maxJudgeRoomsPer {
			return false
		}
	}
	if _, ok := j.m[k]; !ok {
		j.per[judge]++
	}
	j.m[k] = now
	return true
}

// release forgets judge's reservation of host: the room was not used.
func (j *judgeRooms) release(judge peer.ID, host string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.m[judgeHost{judge, host}]; ok {
		j.forget(judgeHost{judge, host})
	}
}

// forget drops k, which is in the table. The caller holds mu.
func (j *judgeRooms) forget(k judgeHost) {
	delete(j.m, k)
	if j.per[k.judge]--; j.per[k.judge] <= 0 {
		delete(j.per, k.judge)
	}
}
