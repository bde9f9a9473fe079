package crawl

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"strings"
	"time"

	"github.com/micra-net/micra/egress"
)

// Resolver resolves host names; *net.Resolver implements it. The node may
// pass one that talks to a particular DNS server.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Option configures a Crawler or a Fetcher.
type Option func(*config) error

// config holds every setting; defaults are applied by defaults(), then
// options, then validate().
type config struct {
	product, version, infoURL string

	source       netip.Addr
	resolver     Resolver
	policy       egress.Policy
	rootCAs      *x509.CertPool
	connectTO    time.Duration
	headerTO     time.Duration
	fetchTO      time.Duration
	maxWire      int64
	maxDecoded   int64
	maxRedirects int

	minDelay      time.Duration
	maxCrawlDelay time.Duration
	perHost       int
	robotsTTL     time.Duration
	maxBackoff    time.Duration
	maxAttempts   int

	workers      int
	procWorkers  int
	queueSize    int
	maxDepth     int
	maxLinks     int
	maxKeywords  int
	structured   bool
	expectedURLs uint
	batchBytes   int
	batchAge     time.Duration
	outCap       int64
	revisitMin   time.Duration
	revisitMax   time.Duration

	windows  []Window
	location *time.Location
	bwCap    int64
	dailyCap int64

	router Router
	logger *slog.Logger

	calib  *Calibrator
	onSlow func(Slow)
	hold   func() error
}

func defaults() *config {
	return &config{
		product:       "micra",
		version:       "0.1",
		infoURL:       "https://github.com/micra-net/micra",
		connectTO:     10 * time.Second,
		headerTO:      15 * time.Second,
		fetchTO:       60 * time.Second,
		maxWire:       8 << 20,
		maxDecoded:    16 << 20,
		maxRedirects:  5,
		minDelay:      time.Second,
		maxCrawlDelay: 60 * time.Second,
		perHost:       1,
		robotsTTL:     24 * time.Hour,
		maxBackoff:    6 * time.Hour,
		maxAttempts:   3,
		workers:       16,
		procWorkers:   runtime.GOMAXPROCS(0),
		queueSize:     64,
		maxDepth:      16,
		maxLinks:      5000,
		maxKeywords:   maxRecKeywords,
		structured:    true,
		expectedURLs:  4 << 20,
		batchBytes:    256 << 10,
		batchAge:      5 * time.Minute,
		outCap:        defaultOutgoingCap,
		revisitMin:    time.Hour,
		revisitMax:    30 * 24 * time.Hour,
		location:      time.Local,
		logger:        slog.Default().With("subsystem", "crawl"),
	}
}

func (c *config) validate() error {
	var errs []error
	check := func(ok bool, format string, a ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, a...))
		}
	}
	check(c.product != "" && !strings.ContainsAny(c.product, " /;()\t"), "user agent product %q is not a token", c.product)
	check(c.connectTO > 0 && c.headerTO > 0 && c.fetchTO > 0, "timeouts must be positive")
	check(c.maxWire > 0 && c.maxDecoded > 0, "size caps must be positive")
	check(c.maxRedirects >= 0 && c.maxRedirects <= 5, "max redirects %d not in 0..5", c.maxRedirects)
	check(c.minDelay >= 0 && c.maxCrawlDelay >= 0, "delays must not be negative")
	check(c.perHost >= 1 && c.perHost <= maxHostConnections, "host connections %d not in 1..%d", c.perHost, maxHostConnections)
	check(c.robotsTTL > 0 && c.robotsTTL <= 24*time.Hour, "robots.txt cache TTL %v not in (0, 24h]", c.robotsTTL)
	check(c.workers > 0 && c.procWorkers > 0 && c.queueSize > 0, "workers and queue sizes must be positive")
	check(c.maxDepth >= 0 && c.maxLinks > 0 && c.maxKeywords > 0 && c.maxKeywords <= maxRecKeywords, "depth, links and keywords limits invalid")
	check(c.batchBytes >= 1024 && c.batchBytes <= maxBatchRaw/2 && c.batchAge > 0, "batch limits invalid (bytes in 1 KiB..%d)", maxBatchRaw/2)
	check(c.outCap > 0, "outgoing cap must be positive")
	check(c.revisitMin > 0 && c.revisitMax >= c.revisitMin, "revisit interval bounds invalid")
	check(c.bwCap >= 0 && c.dailyCap >= 0, "caps must not be negative")
	check(c.expectedURLs > 0, "expected URLs must be positive")
	check(c.logger != nil && c.location != nil, "logger and location must not be nil")
	return errors.Join(errs...)
}

func (c *config) userAgent() string {
	return fmt.Sprintf("%s/%s (+%s)", c.product, c.version, c.infoURL)
}

// UserAgent sets the robots.txt product token (also the first word of the
// User-Agent header), the version and the info URL that tells site owners
// who crawls them. Default: "micra/0.1 (+https://github.com/micra-net/micra)".
func UserAgent(product, version, infoURL string) Option {
	return func(c *config) error {
		c.product, c.version, c.infoURL = strings.ToLower(product), version, infoURL
		return nil
	}
}

// SourceAddr binds every outgoing connection to the local address a, as a
// multi-homed host or the emulated Internet needs. Default: any.
func SourceAddr(a netip.Addr) Option {
	return func(c *config) error {
		if !a.IsValid() {
			return errors.New("invalid source address")
		}
		c.source = a
		return nil
	}
}

// DNS sets the resolver used for every host name. Default: net.DefaultResolver.
func DNS(r Resolver) Option {
	return func(c *config) error { c.resolver = r; return nil }
}

// AllowPrivateNetworks lifts the egress guard: loopback, private,
// link-local and other special-purpose addresses may be fetched (unspecified
// and multicast never). With ports, only 80, 443 and those ports are
// allowed; with none, every port. Off by default; meant for the emulated
// Internet, demos and tests.
func AllowPrivateNetworks(ports ...uint16) Option {
	return func(c *config) error {
		c.policy.AllowPrivate = true
		c.policy.Ports = append(c.policy.Ports, ports...)
		c.policy.AnyPort = len(ports) == 0
		return nil
	}
}

// AllowPrefixes lifts the egress guard for the special-purpose addresses
// inside prefixes only (for example the emulated Internet's site addresses
// on loopback), and allows ports besides 80 and 443; every other
// special-purpose address stays refused. Meant for tests that check the
// guard itself while crawling a loopback world.
func AllowPrefixes(prefixes []netip.Prefix, ports ...uint16) Option {
	return func(c *config) error {
		for _, p := range prefixes {
			if !p.IsValid() {
				return fmt.Errorf("allowed prefix %v is not valid", p)
			}
			c.policy.Allow = append(c.policy.Allow, p.Masked())
		}
		c.policy.Ports = append(c.policy.Ports, ports...)
		return nil
	}
}

// RootCAs sets the certificate authorities trusted for https. Default: the
// system pool.
func RootCAs(p *x509.CertPool) Option {
	return func(c *config) error { c.rootCAs = p; return nil }
}

// Timeouts sets the connect timeout, the time to wait for response headers
// and the total time of one request including its body. Defaults: 10 s, 15 s,
// 60 s.
func Timeouts(connect, header, total time.Duration) Option {
	return func(c *config) error {
		c.connectTO, c.headerTO, c.fetchTO = connect, header, total
		return nil
	}
}

// MaxBodySize caps the bytes read from the wire (wire) and the bytes after
// decompression (decoded). Longer bodies are truncated and flagged. Defaults:
// 8 MiB and 16 MiB.
func MaxBodySize(wire, decoded int64) Option {
	return func(c *config) error { c.maxWire, c.maxDecoded = wire, decoded; return nil }
}

// MaxRedirects sets how many redirects one fetch follows, 0 to 5. Default 5.
func MaxRedirects(n int) Option {
	return func(c *config) error { c.maxRedirects = n; return nil }
}

// Politeness sets the minimum delay between two requests to one host and to
// one server address, and the cap on a robots.txt Crawl-delay (longer
// delays are logged and capped). Defaults: 1 s and 60 s. A zero minDelay is
// for benchmarks against one's own server only.
func Politeness(minDelay, maxCrawlDelay time.Duration) Option {
	return func(c *config) error { c.minDelay, c.maxCrawlDelay = minDelay, maxCrawlDelay; return nil }
}

// maxHostConnections bounds HostConnections, far above what a benchmark or
// one site needs, so that a typo cannot open thousands of connections.
const maxHostConnections = 64

// HostConnections sets how many requests may be in flight at once to one
// host and to one server address. Default 1, the polite setting for the
// open Web, which this package keeps unless told otherwise. Raising it is
// for benchmarks against one's own server and for operators crawling a site
// they run (together with Politeness(0, ...)); it is capped at 64 and needs
// at least as many Workers to take effect.
func HostConnections(n int) Option {
	return func(c *config) error { c.perHost = n; return nil }
}

// RobotsTTL sets how long a robots.txt is cached, at most 24 h (RFC 9309).
// Default 24 h.
func RobotsTTL(d time.Duration) Option {
	return func(c *config) error { c.robotsTTL = d; return nil }
}

// Workers sets the number of concurrent fetches and of processing
// goroutines, and the capacity of the queues between pipeline stages.
// Defaults: 16, GOMAXPROCS, 64.
func Workers(fetch, process, queue int) Option {
	return func(c *config) error { c.workers, c.procWorkers, c.queueSize = fetch, process, queue; return nil }
}

// MaxDepth sets the crawl depth of seeds that do not give one: how many link
// hops to follow from them. Default 16.
func MaxDepth(n int) Option {
	return func(c *config) error { c.maxDepth = n; return nil }
}

// MaxLinks caps the out-links taken from one document. Default 5000.
func MaxLinks(n int) Option {
	return func(c *config) error { c.maxLinks = n; return nil }
}

// MaxKeywords caps the keywords in one record, the heaviest kept: at most
// 4096, the default, which keeps every distinct stem of all but the
// longest pages (the first ExactKeywords with exact weights, the rest
// quantised).
func MaxKeywords(n int) Option {
	return func(c *config) error { c.maxKeywords = n; return nil }
}

// StructuredData turns the transform of structured data on or off: a
// page's JSON-LD, microdata, RDFa, RDF/XML and feed items become its
// record's Statements, and the IRIs they name become links. Default on.
func StructuredData(on bool) Option {
	return func(c *config) error { c.structured = on; return nil }
}

// ExpectedURLs sizes the in-memory Bloom filter of the URL-seen test (about
// 1.2 bytes per URL at 1 % false positives; more URLs only cost more disk
// look-ups). Default 4 Mi.
func ExpectedURLs(n uint) Option {
	return func(c *config) error { c.expectedURLs = n; return nil }
}

// Batching sets when a batch of records is sealed: at maxBytes of encoded
// records or when its oldest record is maxAge old. Defaults: 256 KiB, 5 min.
func Batching(maxBytes int, maxAge time.Duration) Option {
	return func(c *config) error { c.batchBytes, c.batchAge = maxBytes, maxAge; return nil }
}

// OutgoingCap bounds the outgoing store: links for other nodes stored and
// not handed on yet. Links beyond it are dropped and counted in
// Stats.Dropped; queued requests that the dispatcher would hand off (see
// Disowner) wait in their queues instead. Default: 1 Mi links (about
// 150 MB on disk).
func OutgoingCap(n int) Option {
	return func(c *config) error { c.outCap = int64(n); return nil }
}

// Revisit bounds the adaptive revisit interval of a page. Defaults: 1 h, 30 days.
func Revisit(min, max time.Duration) Option {
	return func(c *config) error { c.revisitMin, c.revisitMax = min, max; return nil }
}

// Windows restricts crawling to the given weekly time windows, interpreted
// in loc (nil: local time). No windows: always.
func Windows(loc *time.Location, w ...Window) Option {
	return func(c *config) error {
		for _, x := range w {
			if err := x.validate(); err != nil {
				return err
			}
		}
		if loc != nil {
			c.location = loc
		}
		c.windows = append(c.windows, w...)
		return nil
	}
}

// Bandwidth caps the average download rate in bytes per second and the bytes
// downloaded per calendar day (in the Windows location). 0 means no cap.
func Bandwidth(bytesPerSecond, bytesPerDay int64) Option {
	return func(c *config) error { c.bwCap, c.dailyCap = bytesPerSecond, bytesPerDay; return nil }
}

// Routing sets the Router that decides which discovered URLs this node
// crawls. Default: all of them.
func Routing(r Router) Option {
	return func(c *config) error { c.router = r; return nil }
}

// Calibration feeds the RTT of every page fetch (GET and conditional GET;
// see Timing.RTT) to cal and calls onSlow with each signal it gives, from
// the fetching goroutine: onSlow must not block (the node queues a
// re-delegation of the server's subnet). Default: none.
func Calibration(cal *Calibrator, onSlow func(Slow)) Option {
	return func(c *config) error {
		if cal == nil || onSlow == nil {
			return errors.New("calibration needs a calibrator and a callback")
		}
		c.calib, c.onSlow = cal, onSlow
		return nil
	}
}

// Logger sets the logger. Default: slog.Default() with subsystem=crawl.
func Logger(l *slog.Logger) Option {
	return func(c *config) error { c.logger = l; return nil }
}
