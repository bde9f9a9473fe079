package requests

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
)

// TestPromiseJudges: a crawl request the crawler would not take
// within the horizon is taken with half the horizon more when it comes
// alone from a judge of its subnet (the coordinator of a refused notice),
// and only then: not from another peer, not in a frame of several, not
// twice of one host from one judge within half a grace (unless the room
// went unused), not when its host does not resolve.
func TestPromiseJudges(t *testing.T) {
	judge, other2, other := peer.ID("judge"), peer.ID("judge2"), peer.ID("other")
	site := netip.MustParseAddr("93.184.216.34")
	var horizons []time.Duration
	var senders []string
	pr := promiser{
		rooms: &judgeRooms{},
		every: 5 * time.Minute,
		// The host's queue holds 20 minutes of work: taken only with
		// more than that; full.example's more than 30.
		place: func(p peer.ID) string { return "at " + string(p) },
		promise: func(ctx context.Context, horizon time.Duration, from string, reqs ...crawl.Request) ([]bool, error) {
			horizons = append(horizons, horizon)
			senders = append(senders, from)
			taken := make([]bool, len(reqs))
			for i, r := range reqs {
				taken[i] = horizon > 20*time.Minute && !strings.Contains(r.Link, "full.example")
			}
			return taken, nil
		},
		resolve: func(ctx context.Context, host string) (netip.Addr, error) {
			if host = strings.ToLower(host); host == "site.example" || host == "other.example" || host == "full.example" {
				return site, nil
			}
			return netip.Addr{}, context.DeadlineExceeded
		},
		judges: func(ctx context.Context, a netip.Addr, p peer.ID) bool {
			return a == site && (p == judge || p == other2)
		},
		fresh:   func(string) bool { return false },
		indexer: func(peer.ID, string) bool { return false },
	}
	one := []crawl.Request{{Link: "http://site.example/page"}}
	for _, c := range []struct {
		name  string
		from  peer.ID
		reqs  []crawl.Request
		taken bool
		asked []time.Duration
	}{
		{"a judge's request", judge, one, true, []time.Duration{promiseHorizon, promiseHorizon * 3 / 2}},
		{"the judge's next of the host, within half a grace", judge, []crawl.Request{{Link: "http://SITE.example/2"}}, false, []time.Duration{promiseHorizon}},
		{"the judge's of another host", judge, []crawl.Request{{Link: "http://other.example/"}}, true, []time.Duration{promiseHorizon, promiseHorizon * 3 / 2}},
		{"another judge's of the host", other2, one, true, []time.Duration{promiseHorizon, promiseHorizon * 3 / 2}},
		{"a judge's not taken with the room either", judge, []crawl.Request{{Link: "http://full.example/"}}, false, []time.Duration{promiseHorizon, promiseHorizon * 3 / 2}},
		{"the judge's next of that host: the room was not used", judge, []crawl.Request{{Link: "http://full.example/2"}}, false, []time.Duration{promiseHorizon, promiseHorizon * 3 / 2}},
		{"another peer's", other, one, false, []time.Duration{promiseHorizon}},
		{"a judge's frame of two", judge, append(one, crawl.Request{Link: "http://site.example/2"}), false, []time.Duration{promiseHorizon}},
		{"a judge's request of a host that does not resolve", judge, []crawl.Request{{Link: "http://gone.example/"}}, false, []time.Duration{promiseHorizon}},
	} {
		horizons, senders = nil, nil
		taken, err := pr.take(t.Context(), c.from, c.reqs)
		if err != nil || taken[0] != c.taken || !slices.Equal(horizons, c.asked) {
			t.Errorf("%s: taken %v, %v, horizons %v; want taken %v, horizons %v", c.name, taken, err, horizons, c.taken, c.asked)
		}
		for _, s := range senders {
			if s != "at "+string(c.from) {
				t.Errorf("%s: counted as sent from %q, want its sender's place", c.name, s)
			}
		}
	}
	// The room for judges comes back once half a grace has passed; a
	// judge has it for at most maxJudgeRoomsPer hosts at once, the others
	// theirs.
	var rooms judgeRooms
	t0 := time.Unix(1_000_000, 0)
	if !rooms.reserve(judge, "h", t0, time.Minute) || rooms.reserve(judge, "h", t0.Add(time.Minute-time.Millisecond), time.Minute) ||
		!rooms.reserve(judge, "h", t0.Add(time.Minute), time.Minute) {
		t.Error("a judge's room: not given once a minute")
	}
	for i := 1; i < maxJudgeRoomsPer; i++ {
		if !rooms.reserve(judge, fmt.Sprint("h", i), t0.Add(time.Minute), time.Minute) {
			t.Fatalf("a judge's room for its %d-th host refused", i+1)
		}
	}
	if rooms.reserve(judge, "one more", t0.Add(time.Minute), time.Minute) || !rooms.reserve(other2, "one more", t0.Add(time.Minute), time.Minute) {
		t.Errorf("a judge's room for host %d: given; or another judge's refused", maxJudgeRoomsPer+1)
	}
	rooms.release(judge, "h1")
	if !rooms.reserve(judge, "one more", t0.Add(time.Minute), time.Minute) || !rooms.reserve(judge, "later", t0.Add(2*time.Minute), time.Minute) {
		t.Error("a judge's room: not given again after a release, or after the others ran out")
	}
	// Promise counts half the pace a host's delay allows: a request is
	// fetched within its horizon at that pace, and a judge's within two
	// graces (20 min at the default) at the full pace.
	const twoGraces = 2 * 10 * time.Minute
	// With the newcomers' reserve beyond the room (a quarter of it,
	// crawl's roomFor), a request waits a room and a quarter at most.
	if promiseHorizon*5/4 >= twoGraces || promiseHorizon*3/2*5/4/2 >= twoGraces {
		t.Errorf("horizons %v and, a judge's, %v, with a quarter more: not within two graces (%v) at half and at the full pace",
			promiseHorizon, promiseHorizon*3/2, twoGraces)
	}
}

// TestPromiseFresh: a link another node hands on whose page is fresh is
// taken without queueing it again; the same link from an indexer of its
// shard, and a link whose page is not fresh, go to the crawler's Promise,
// an indexer's asking for a record even of an unchanged page; in a frame
// of both, each request's answer is its own.
func TestPromiseFresh(t *testing.T) {
	ix, crawler := peer.ID("indexer"), peer.ID("crawler")
	var queued []string
	pr := promiser{
		place: func(p peer.ID) string { return string(p) },
		promise: func(ctx context.Context, horizon time.Duration, from string, reqs ...crawl.Request) ([]bool, error) {
			taken := make([]bool, len(reqs))
			for i, r := range reqs {
				queued = append(queued, fmt.Sprintf("%s record=%v", r.Link, r.Record))
				taken[i] = r.Link != "http://site.example/full"
			}
			return taken, nil
		},
		fresh:   func(link string) bool { return link == "http://site.example/fresh" },
		indexer: func(p peer.ID, link string) bool { return p == ix },
		resolve: func(ctx context.Context, host string) (netip.Addr, error) { return netip.Addr{}, context.Canceled },
		judges:  func(ctx context.Context, a netip.Addr, p peer.ID) bool { return false },
	}
	reqs := []crawl.Request{{Link: "http://site.example/new"}, {Link: "http://site.example/fresh"}, {Link: "http://site.example/full"}}
	for _, c := range []struct {
		from   peer.ID
		queued []string
	}{
		{crawler, []string{"http://site.example/new record=false", "http://site.example/full record=false"}},
		{ix, []string{"http://site.example/new record=true", "http://site.example/fresh record=true", "http://site.example/full record=true"}},
	} {
		queued = nil
		taken, err := pr.take(t.Context(), c.from, reqs)
		if err != nil || fmt.Sprint(taken) != "[true true false]" || fmt.Sprint(queued) != fmt.Sprint(c.queued) {
			t.Errorf("from %s: taken %v, %v, queued %v; want [true true false], queued %v", c.from, taken, err, queued, c.queued)
		}
	}
}
