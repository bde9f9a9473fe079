package requests

import (
	"context"
	"log/slog"
	"net"
	"net/netip"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/egress"
	chk "github.com/micra-net/micra/internal/check"
)

// Option configures Submit, ServeCrawlRequests and ServeWatches. Each
// option says which it applies to; the others ignore it.
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
	log        *slog.Logger
	policy     egress.Policy // crawl requests taken (Submit uses the overlay's)
	crawlLocal CrawlHandler
	promise    PromiseHandler // ServeCrawlRequests' handler of frames
	resolve    Resolver
	fresh      bool // Submit asks each subnet's coordinator, not the cache (resubmissions: the owner may have changed)
}

func defaultConfig() config {
	return config{
		log:     slog.Default().With("subsystem", "requests"),
		resolve: defaultResolve,
	}
}

func newConfig(opts []Option) (config, error) {
	cfg := defaultConfig()
	err := chk.Apply(&cfg, opts)
	return cfg, err
}

var defaultResolve = NetResolver(net.DefaultResolver)

// NetResolver adapts r to a Resolver: IP literals as they are, names to
// the first address r finds, as the crawler picks it (crawl.LookupAddr).
func NetResolver(r crawl.Resolver) Resolver {
	return func(ctx context.Context, host string) (netip.Addr, error) {
		return crawl.LookupAddr(ctx, r, host)
	}
}

// Logger sets the logger (default slog.Default with subsystem=requests).
func Logger(l *slog.Logger) Option {
	return func(c *config) error { return chk.Set(&c.log, l, chk.NotNil("logger", l)) }
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

// Promises sets the handler of crawl requests: only the requests it takes
// are signed for, the others get an empty receipt (not taken: the sender
// may send them again later). A receipt is evidence against the node when
// the page's record does not come (overlay.Withheld), so a node promises
// only what it can keep. Without it, every frame goes to the CrawlHandler
// whole and every request is signed for. ServeCrawlRequests.
func Promises(h PromiseHandler) Option {
	return func(c *config) error { c.promise = h; return nil }
}

// LocalCrawl sets the handler of crawl requests for subnets delegated to
// this peer itself. Submit.
func LocalCrawl(h CrawlHandler) Option {
	return func(c *config) error { c.crawlLocal = h; return nil }
}

// Resolve sets how Submit finds the address of a URL's host (default: IP
// literals as they are, names through the system resolver). Submit.
func Resolve(r Resolver) Option {
	return func(c *config) error { return chk.Set(&c.resolve, r, chk.NotNil("resolver", r)) }
}
