package results

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/egress"
)

// Option configures NewOutbox, Submit, ServeCrawlRequests and JoinTopic.
// Each option says which it applies to; the others ignore it.
type Option func(*config) error

// CrawlHandler receives crawl requests sent to this node. It must queue
// them durably (the crawler's Submit does) before returning nil, and be
// safe for concurrent use.
type CrawlHandler func(ctx context.Context, from peer.ID, reqs []crawl.Request) error

// PromiseHandler receives the crawl requests of a frame, each of which is
// answered with a receipt: it queues durably those this node will crawl in time
// (crawl.Crawler.Promise) and reports, for each, whether it took it. It
// must be safe for concurrent use.
type PromiseHandler func(ctx context.Context, from peer.ID, reqs []crawl.Request) (taken []bool, err error)

// Resolver returns the address of a host name for delegation.
type Resolver func(ctx context.Context, host string) (netip.Addr, error)

type config struct {
	log   *slog.Logger
	now   func() time.Time
	limit int // pubsub message limit

	// shared
	shards uint32

	// outbox
	acks         int
	outboxCap    int64
	reserve      int64
	retryBase    time.Duration
	retryMax     time.Duration
	window       int
	gap          time.Duration
	ackWait      time.Duration
	trusted      map[peer.ID]bool
	forgetIdx    time.Duration
	connectIndex bool

	// Submit and crawl requests
	policy     egress.Policy // crawl requests taken (Submit uses the overlay's)
	crawlLocal CrawlHandler
	promise    PromiseHandler // ServeCrawlRequests' handler of frames that ask for receipts
	resolve    Resolver
	fresh      bool // Submit asks each subnet's coordinator, not the cache (resubmissions: the owner may have changed)
}

func defaultConfig() config {
	return config{
		log:          slog.Default().With("subsystem", "results"),
		now:          time.Now,
		limit:        DefaultMessageLimit,
		shards:       1,
		acks:         1,                     // one indexer stored the batch
		outboxCap:    512 << 20,             // about 2000 full default batches (node.DefaultConfig's OutboxCap)
		retryBase:    30 * time.Second,      // an indexer that missed a batch gets it again soon
		retryMax:     10 * time.Minute,      // and at least this often while it stays unacknowledged
		window:       16,                    // batches published and not yet acknowledged, per node
		gap:          50 * time.Millisecond, // at most 20 messages per second: GossipSub queues 32 RPCs per peer
		ackWait:      10 * time.Second,      // a published batch holds a window slot this long without an ack
		forgetIdx:    24 * time.Hour,        // acks from an indexer silent this long no longer count
		connectIndex: true,
		resolve:      defaultResolve,
	}
}

var defaultResolve = NetResolver(net.DefaultResolver)

// DNS makes Submit resolve hosts with r: Resolve with NetResolver(r).
func DNS(r crawl.Resolver) Option {
	return func(c *config) error {
		if r == nil {
			return errors.New("nil resolver")
		}
		c.resolve = NetResolver(r)
		return nil
	}
}

// NetResolver adapts r to a Resolver: IP literals as they are, names to
// the first address r finds, as the crawler picks it (crawl.LookupAddr).
func NetResolver(r crawl.Resolver) Resolver {
	return func(ctx context.Context, host string) (netip.Addr, error) {
		return crawl.LookupAddr(ctx, r, host)
	}
}

// Logger sets the logger (default slog.Default with subsystem=results).
func Logger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("nil logger")
		}
		c.log = l
		return nil
	}
}

// Clock sets the time source (default time.Now), for tests.
func Clock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return errors.New("nil clock")
		}
		c.now = now
		return nil
	}
}

// Shards sets the number of result shards, network-wide (default 1: one
// topic, TopicResults). A record's shard is ShardOf its URL's host.
// Nodes and indexers must agree; an indexer ignores announcements and
// refuses batches of another count. Outbox and JoinTopic.
func Shards(n int) Option {
	return func(c *config) error {
		if n < 1 || n > MaxShards {
			return fmt.Errorf("shards must be 1 to %d, got %d", MaxShards, n)
		}
		c.shards = uint32(n)
		return nil
	}
}

// MessageLimit sets the pubsub message limit (default DefaultMessageLimit,
// overlay's). Batches are split into parts that fit. Outbox and JoinTopic;
// they must agree.
func MessageLimit(n int) Option {
	return func(c *config) error {
		if n < MinMessageLimit || n > 64<<20 {
			return fmt.Errorf("message limit must be %d bytes to 64 MiB, got %d", MinMessageLimit, n)
		}
		c.limit = n
		return nil
	}
}

// Acks sets how many distinct indexers must acknowledge a batch before it
// leaves the outbox (default 1). With more than the indexers that take a
// shard, that shard's batches stay until more come. Outbox.
func Acks(n int) Option {
	return func(c *config) error {
		if n < 1 || n > 16 {
			return fmt.Errorf("acks must be 1 to 16, got %d", n)
		}
		c.acks = n
		return nil
	}
}

// OutboxCap bounds the bytes the outbox holds (default 512 MiB). At the cap
// Outbox.Results blocks, which pauses the crawler, until acknowledgements
// make room. A caller that gives up waiting (its context ends: the crawler
// shutting down) may still store into a reserve of reserve bytes above the
// cap (default cap/16), so that shutting down loses nothing. Outbox.
func OutboxCap(bytes, reserve int64) Option {
	return func(c *config) error {
		if bytes < 1<<10 || reserve < 0 {
			return fmt.Errorf("outbox cap must be at least 1 KiB and the reserve non-negative, got %d and %d", bytes, reserve)
		}
		c.outboxCap, c.reserve = bytes, reserve
		return nil
	}
}

// Republish sets the backoff of re-announcing unacknowledged batches: the
// first retry after base, doubling up to max (defaults 30 s and 10 min).
// Batches of shards that no live indexer takes wait without retries. Outbox.
func Republish(base, max time.Duration) Option {
	return func(c *config) error {
		if base <= 0 || max < base {
			return fmt.Errorf("republish backoff needs 0 < base ≤ max, got %v and %v", base, max)
		}
		c.retryBase, c.retryMax = base, max
		return nil
	}
}

// Pace bounds publishing: at most window batches published and not yet
// acknowledged (a slot frees on acknowledgement or after ackWait), and at
// least gap between two messages (defaults 16, 10 s, 50 ms). GossipSub
// drops messages beyond a peer's queue of 32, so bursts must stay short.
// Outbox.
func Pace(window int, ackWait, gap time.Duration) Option {
	return func(c *config) error {
		if window < 1 || ackWait <= 0 || gap < 0 {
			return fmt.Errorf("pace needs a positive window and ack wait and a non-negative gap, got %d, %v, %v", window, ackWait, gap)
		}
		c.window, c.ackWait, c.gap = window, ackWait, gap
		return nil
	}
}

// TrustedIndexers restricts the indexers whose acknowledgements count, and
// whose announcements are heard, to ids. By default every peer that
// announces itself as an indexer counts: an open network trusts its
// announcements. Outbox.
func TrustedIndexers(ids ...peer.ID) Option {
	return func(c *config) error {
		c.trusted = make(map[peer.ID]bool, len(ids))
		for _, id := range ids {
			c.trusted[id] = true
		}
		return nil
	}
}

// ConnectIndexers controls whether the outbox dials the indexers it hears
// of and protects those connections (default on): a node publishes to a
// result topic it does not subscribe to through directly connected
// subscribers only. Outbox.
func ConnectIndexers(on bool) Option {
	return func(c *config) error { c.connectIndex = on; return nil }
}

// Fresh makes Submit ask each subnet's coordinator for its owner instead of
// trusting the overlay's cache (a resubmission: the owner may have
// changed). Submit.
func Fresh() Option {
	return func(c *config) error { c.fresh = true; return nil }
}

// Egress sets which crawl requests ServeCrawlRequests takes: a frame with
// a request whose host the policy refuses (an IP literal of a
// special-purpose address, localhost) is refused whole, as a malformed
// one is. Default: the zero egress.Policy, which refuses every
// special-purpose address; node passes its allow_private_networks.
// Submit checks seeds against its overlay's policy (overlay.Egress)
// instead. ServeCrawlRequests.
func Egress(p egress.Policy) Option {
	return func(c *config) error { c.policy = p; return nil }
}

// Promises sets the handler of the crawl requests whose senders ask for
// receipts: only the requests it takes are signed for, the others get an
// empty receipt (not taken: the sender may send them again later). A
// receipt is evidence against the node when the page's record does not
// come (overlay.Withheld), so a node promises only what it can keep.
// Without it, such frames go to the CrawlHandler whole and every request
// is signed for. ServeCrawlRequests.
func Promises(h PromiseHandler) Option {
	return func(c *config) error { c.promise = h; return nil }
}

// LocalCrawl sets the handler of crawl requests for subnets delegated to
// this peer itself. Submit.
func LocalCrawl(h CrawlHandler) Option {
	return func(c *config) error { c.crawlLocal = h; return nil }
}

// Resolve sets how Submit finds the address of a
// URL's host (default: IP literals as they are, names through the system
// resolver). Submit.
func Resolve(r Resolver) Option {
	return func(c *config) error {
		if r == nil {
			return errors.New("nil resolver")
		}
		c.resolve = r
		return nil
	}
}

// partSize is the data carried by one message.
func (c *config) partSize() int { return c.limit - messageOverhead }
