package results

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/micra-net/micra/internal/check"
)

// Option configures NewOutbox and JoinTopic.
// Each option says which it applies to; the others ignore it.
type Option func(*config) error

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
	}
}

// Logger sets the logger (default slog.Default with subsystem=results).
func Logger(l *slog.Logger) Option {
	return func(c *config) error { return check.Set(&c.log, l, check.NotNil("logger", l)) }
}

// Clock sets the time source (default time.Now), for tests.
func Clock(now func() time.Time) Option {
	return func(c *config) error { return check.Set(&c.now, now, check.NotNil("clock", now)) }
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

// partSize is the data carried by one message.
func (c *config) partSize() int { return c.limit - messageOverhead }
