package indexer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/internal/check"
	"github.com/micra-net/micra/requests"
	"github.com/micra-net/micra/results"
	"github.com/micra-net/micra/subnet"
)

// Option configures New.
type Option func(*config) error

type config struct {
	log   *slog.Logger
	now   func() time.Time
	limit int // pubsub message limit

	shards     uint32
	take       []uint32
	announce   time.Duration
	snapshots  []subnet.SnapshotID
	replay     time.Duration
	workers    int
	ackDelay   time.Duration
	reassembly int64
	crawlLocal requests.CrawlHandler
	resolve    requests.Resolver
	lookupAll  func(ctx context.Context, host string) ([]netip.Addr, error) // every address of a host (audits)
	onStored   func(node peer.ID, seq uint64, records int)                  // tests and benchmarks

	// durable crawl requests (pending.go)
	patience time.Duration
	attempts int

	// audits (audit.go)
	auditShare   float64
	auditPerHour int
	flagFor      time.Duration

	// withholding notices (withheld.go)
	withheldPerHour int

	searchOnly bool // SearchOnly
}

func defaultConfig() config {
	return config{
		log:          slog.Default().With("subsystem", "indexer"),
		now:          time.Now,
		limit:        results.DefaultMessageLimit,
		shards:       1,
		announce:     time.Minute,
		replay:       90 * 24 * time.Hour, // a (node, seq) is remembered this long; a later replay is re-stored, idempotently
		workers:      max(1, min(runtime.GOMAXPROCS(0), 4)),
		ackDelay:     100 * time.Millisecond, // acks to one node are sent together
		reassembly:   64 << 20,               // bytes of incomplete multi-part batches held
		resolve:      requests.NetResolver(net.DefaultResolver),
		lookupAll:    lookupAll(net.DefaultResolver),
		patience:     30 * time.Minute,   // a crawl request without a record is sent again after this, then after twice as long...
		attempts:     6,                  // ...up to six submissions (about 32 h in all)
		auditShare:   0.02,               // one record in fifty: a node fabricating most of its records is caught within a few batches
		auditPerHour: 120,                // per node; each audit costs the network one to four page fetches
		flagFor:      7 * 24 * time.Hour, // overlay's default conviction

		withheldPerHour: 60, // notices about one node an hour: two per request (noted, judged), thirty requests
	}
}

// newConfig returns the defaults with opts applied, or the first error
// an option, or the options together, refuse with.
func newConfig(opts ...Option) (config, error) {
	cfg := defaultConfig()
	if err := check.Apply(&cfg, opts); err != nil {
		return cfg, err
	}
	for _, s := range cfg.take {
		if s >= cfg.shards {
			return cfg, fmt.Errorf("shard %d taken, but there are %d", s, cfg.shards)
		}
	}
	return cfg, nil
}

// CheckOptions returns the error New refuses opts with, if any, without
// starting anything: the one place the options' bounds are checked, for
// callers that check a configuration before they use it.
func CheckOptions(opts ...Option) error {
	_, err := newConfig(opts...)
	return err
}

// results are the results package's options the indexer's settings imply,
// for the topics it joins.
func (c *config) results() []results.Option {
	return []results.Option{results.Logger(c.log), results.Clock(c.now), results.MessageLimit(c.limit),
		results.Shards(int(c.shards))}
}

// requests are the requests package's options the indexer's settings
// imply, for the crawl requests it submits and the watches it takes.
func (c *config) requests() []requests.Option {
	return []requests.Option{requests.Logger(c.log), requests.Resolve(c.resolve), requests.LocalCrawl(c.crawlLocal)}
}

// Logger sets the logger (default slog.Default with subsystem=indexer).
func Logger(l *slog.Logger) Option {
	return func(c *config) error { return check.Set(&c.log, l, check.NotNil("logger", l)) }
}

// Clock sets the time source (default time.Now), for tests.
func Clock(now func() time.Time) Option {
	return func(c *config) error { return check.Set(&c.now, now, check.NotNil("clock", now)) }
}

// Shards sets the number of result shards, network-wide (default 1); it
// must be the nodes' (results.Shards). The indexer ignores announcements
// and refuses batches of another count.
func Shards(n int) Option {
	return func(c *config) error {
		return check.Set(&c.shards, uint32(n), check.Range("shards", n, 1, results.MaxShards))
	}
}

// MessageLimit sets the pubsub message limit (default
// results.DefaultMessageLimit); it must be the nodes'.
func MessageLimit(n int) Option {
	return func(c *config) error {
		if n < results.MinMessageLimit || n > 64<<20 {
			return fmt.Errorf("message limit must be %d bytes to 64 MiB, got %d", results.MinMessageLimit, n)
		}
		c.limit = n
		return nil
	}
}

// DNS makes the indexer resolve hosts with r: for the crawl requests it
// submits (requests.NetResolver(r)) and every address of a host, which its
// audits need (a host may have addresses in several subnets).
func DNS(r crawl.Resolver) Option {
	return func(c *config) error {
		if err := check.NotNil("resolver", r); err != nil {
			return err
		}
		c.resolve, c.lookupAll = requests.NetResolver(r), lookupAll(r)
		return nil
	}
}

// DNSServer makes the indexer resolve hosts with the DNS server at server
// (as DNS does with a resolver that asks it), and name that server in its
// errors: Go's resolver names the system's, whatever it dialled.
func DNSServer(server netip.AddrPort) Option {
	return func(c *config) error {
		if !server.IsValid() {
			return errors.New("invalid DNS server address")
		}
		r := crawl.DNSResolver(server, netip.Addr{})
		c.resolve, c.lookupAll = requests.NetResolver(r), lookupAll(r)
		return nil
	}
}

// Resolve sets how the indexer finds the address of a URL's host for the
// crawl requests it submits and its audits (default: IP literals as they
// are, names through the system resolver).
func Resolve(r requests.Resolver) Option {
	return func(c *config) error { return check.Set(&c.resolve, r, check.NotNil("resolver", r)) }
}

// LocalCrawl sets the handler of crawl requests the indexer submits for
// subnets delegated to its own peer (an indexer that also crawls).
func LocalCrawl(h requests.CrawlHandler) Option {
	return func(c *config) error { c.crawlLocal = h; return nil }
}

// Take sets the shards an indexer subscribes to (default all).
func Take(shards ...int) Option {
	return func(c *config) error {
		c.take = c.take[:0]
		for _, s := range shards {
			if err := check.Range("shard", s, 0, results.MaxShards-1); err != nil {
				return err
			}
			c.take = append(c.take, uint32(s))
		}
		return nil
	}
}

// AnnounceEvery sets how often an indexer announces itself (default
// 1 min); an announcement holds for three intervals.
func AnnounceEvery(d time.Duration) Option {
	return func(c *config) error {
		return check.Set(&c.announce, d, check.Range("announce interval", d, 100*time.Millisecond, results.MaxAnnounceLifetime/3))
	}
}

// AcceptSnapshots adds subnet snapshot ids whose batches an indexer takes
// besides its own (during a snapshot change).
func AcceptSnapshots(ids ...subnet.SnapshotID) Option {
	return func(c *config) error { c.snapshots = append(c.snapshots, ids...); return nil }
}

// ReplayWindow sets how long an indexer remembers each stored (node,
// sequence) pair to recognise replays and conflicting batches (default 90
// days). A replay older than that is stored again, which the index makes
// harmless.
func ReplayWindow(d time.Duration) Option {
	return func(c *config) error { return check.Set(&c.replay, d, check.AtLeast("replay window", d, time.Minute)) }
}

// Workers sets how many batches an indexer verifies and decodes in
// parallel (default GOMAXPROCS, at most 4); the index serialises writes.
func Workers(n int) Option {
	return func(c *config) error { return check.Set(&c.workers, n, check.Range("workers", n, 1, 64)) }
}

// SearchOnly makes an indexer that only serves its store's search (a
// third indexer on a PostgreSQL database that others write): it takes no
// shard, announces nothing, audits nothing and keeps no crawl requests,
// so that nodes never count on it.
func SearchOnly() Option {
	return func(c *config) error { c.searchOnly = true; return nil }
}

// AckDelay sets how long an indexer gathers acknowledgements to one node
// before sending them (default 100 ms).
func AckDelay(d time.Duration) Option {
	return func(c *config) error { return check.Set(&c.ackDelay, d, check.Range("ack delay", d, 0, time.Minute)) }
}

// lookupAll returns every address r finds for a host (crawl.LookupAddrs).
func lookupAll(r crawl.Resolver) func(ctx context.Context, host string) ([]netip.Addr, error) {
	return func(ctx context.Context, host string) ([]netip.Addr, error) {
		return crawl.LookupAddrs(ctx, r, host)
	}
}
