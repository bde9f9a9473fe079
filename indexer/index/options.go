package index

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/micra-net/micra/internal/check"
)

// Option configures an Index.
type Option func(*config) error

// config holds every setting; New applies defaults, then options, then
// validate.
type config struct {
	logger *slog.Logger
	now    func() time.Time

	maxRecordBytes int
	maxKeywords    int
	maxLinks       int
	maxStatements  int
	clockSkew      time.Duration

	maxQueryBytes int
	maxQueryTerms int
	defaultLimit  int
	maxLimit      int
	maxWindow     int
	maxScan       int
	impactMin     int // document frequency from which a term has an impact list
	// Posting blocks (blocks.go): the document frequency from which a
	// term has a run, the postings of a block, and the bounds of a delta.
	blockMin, blockLen, deltaMin, deltaMax int
	runCache                               int64 // bytes of runs kept in memory
	pgCount                                int   // postings of its driving list the PostgreSQL store counts matches in exactly

	titleBoost float64

	maxProfiles        int
	maxProfileKeywords int
}

// Hard ceilings, so that a configuration typo cannot make a bound useless.
const (
	ceilRecordBytes     = 4 << 20 // crawl.MaxRecordBytes
	ceilKeywords        = 4096    // what a batch may carry
	ceilQueryTerms      = 64
	ceilQueryBytes      = 8 << 10
	ceilWindow          = 100000
	ceilProfiles        = 100000
	ceilProfileKeywords = 1024
)

// newConfig applies opts to the defaults and validates the result.
func newConfig(opts []Option) (*config, error) {
	cfg := defaults()
	if err := check.Apply(cfg, opts, cfg.validate); err != nil {
		return nil, err
	}
	return cfg, nil
}

func defaults() *config {
	return &config{
		logger:             slog.Default().With("subsystem", "index"),
		now:                time.Now,
		maxRecordBytes:     512 << 10,
		maxKeywords:        ceilKeywords,
		maxLinks:           5000,
		maxStatements:      1000,
		clockSkew:          15 * time.Minute,
		maxQueryBytes:      1024,
		maxQueryTerms:      16,
		defaultLimit:       10,
		maxLimit:           100,
		maxWindow:          1000,
		maxScan:            1_000_000,
		impactMin:          defaultImpactMin,
		blockMin:           defaultBlockMin,
		blockLen:           defaultBlockLen,
		deltaMin:           defaultDeltaMin,
		deltaMax:           defaultDeltaMax,
		runCache:           128 << 20,
		pgCount:            4096,
		titleBoost:         0.5,
		maxProfiles:        256,
		maxProfileKeywords: 64,
	}
}

func (c *config) validate() error {
	var errs []error
	check := func(ok bool, format string, a ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, a...))
		}
	}
	check(c.logger != nil && c.now != nil, "logger and clock must not be nil")
	check(c.maxRecordBytes >= 1024 && c.maxRecordBytes <= ceilRecordBytes, "record size cap %d not in 1 KiB..%d", c.maxRecordBytes, ceilRecordBytes)
	check(c.maxKeywords >= 1 && c.maxKeywords <= ceilKeywords, "keyword cap %d not in 1..%d", c.maxKeywords, ceilKeywords)
	check(c.maxLinks >= 0 && c.maxLinks <= 100000, "link cap %d not in 0..100000", c.maxLinks)
	check(c.maxStatements >= 0 && c.maxStatements <= ceilStatements, "statement cap %d not in 0..%d", c.maxStatements, ceilStatements)
	check(c.clockSkew >= 0, "clock skew must not be negative")
	check(c.maxQueryBytes >= 16 && c.maxQueryBytes <= ceilQueryBytes, "query size cap %d not in 16..%d", c.maxQueryBytes, ceilQueryBytes)
	check(c.maxQueryTerms >= 1 && c.maxQueryTerms <= ceilQueryTerms, "query term cap %d not in 1..%d", c.maxQueryTerms, ceilQueryTerms)
	check(c.maxLimit >= 1 && c.defaultLimit >= 1 && c.defaultLimit <= c.maxLimit && c.maxLimit <= c.maxWindow && c.maxWindow <= ceilWindow,
		"result limits invalid: need 1 <= default %d <= max %d <= window %d <= %d", c.defaultLimit, c.maxLimit, c.maxWindow, ceilWindow)
	check(c.maxScan >= 1000, "scan budget %d below 1000", c.maxScan)
	check(c.impactMin >= 1, "impact list threshold %d below 1", c.impactMin)
	check(c.blockMin >= 1 && c.blockLen >= 1 && c.blockLen <= maxBlockLen && c.deltaMin >= 1 && c.deltaMin <= c.deltaMax,
		"posting blocks invalid: need threshold %d >= 1, 1 <= block %d <= %d, 1 <= delta %d <= %d", c.blockMin, c.blockLen, maxBlockLen, c.deltaMin, c.deltaMax)
	check(c.runCache >= 1<<20, "block cache of %d bytes below 1 MiB", c.runCache)
	check(c.titleBoost >= 0 && c.titleBoost <= 100 && !math.IsNaN(c.titleBoost), "title boost %v not in 0..100", c.titleBoost)
	check(c.maxProfiles >= 0 && c.maxProfiles <= ceilProfiles, "profile cap %d not in 0..%d", c.maxProfiles, ceilProfiles)
	check(c.maxProfileKeywords >= 1 && c.maxProfileKeywords <= ceilProfileKeywords, "profile keyword cap %d not in 1..%d", c.maxProfileKeywords, ceilProfileKeywords)
	return errors.Join(errs...)
}

// BlockCache bounds the memory that keeps the postings of frequent terms,
// read from their blocks, for the next queries (blocks.go). Default: 128
// MiB, the blocks of about 60 terms on 100,000 pages each.
func BlockCache(bytes int64) Option {
	return func(c *config) error { c.runCache = bytes; return nil }
}

// Logger sets the logger. Default: slog.Default() with subsystem=index.
func Logger(l *slog.Logger) Option {
	return func(c *config) error { c.logger = l; return nil }
}

// Clock sets the source of the current time, used for received times and
// the future-time check. Default: time.Now.
func Clock(now func() time.Time) Option {
	return func(c *config) error { c.now = now; return nil }
}

// RecordLimits bounds what one stored record may hold: its encoded size in
// bytes (after the caps below), its keywords (the heaviest are kept) and its
// links (the first are kept). Records over maxBytes are rejected. Defaults:
// 512 KiB, 4096 keywords, 5000 links; the crawler sends at most 4096
// keywords and 5000 links by default. maxBytes must also fit in half of the
// database's largest transaction (15 % of its memtable size).
func RecordLimits(maxBytes, maxKeywords, maxLinks int) Option {
	return func(c *config) error {
		c.maxRecordBytes, c.maxKeywords, c.maxLinks = maxBytes, maxKeywords, maxLinks
		return nil
	}
}

// MaxStatements bounds the statements (structured data) one stored record
// keeps; the first are kept. Default 1000, what the crawler extracts from
// a page at most (structured.DefaultLimits); at most 4096, what a record
// may carry. 0 keeps none: pages are then stored and searched without
// their structured data.
func MaxStatements(n int) Option {
	return func(c *config) error { c.maxStatements = n; return nil }
}

// ClockSkew is how far in the future a record's time may be. A record from
// further ahead is rejected: since newer records win, a wrong clock would
// otherwise freeze its page. Default 15 min.
func ClockSkew(d time.Duration) Option {
	return func(c *config) error { c.clockSkew = d; return nil }
}

// QueryLimits bounds a query: its length in bytes and its distinct terms
// after stemming (search and exclusion terms together). Defaults: 1024
// bytes, 16 terms.
func QueryLimits(maxBytes, maxTerms int) Option {
	return func(c *config) error { c.maxQueryBytes, c.maxQueryTerms = maxBytes, maxTerms; return nil }
}

// ResultLimits sets the page size used when a query gives none, the largest
// page size, and the result window: offset+limit may not exceed it, as in
// every web search engine, because deep pages cost a heap of that size.
// Defaults: 10, 100, 1000.
func ResultLimits(defaultLimit, maxLimit, window int) Option {
	return func(c *config) error {
		c.defaultLimit, c.maxLimit, c.maxWindow = defaultLimit, maxLimit, window
		return nil
	}
}

// MaxScan bounds the postings one query visits. A query that would visit
// more stops early: its hits come from the part of the index it read and
// its total is an estimate (Results.Estimated). Default 1 000 000, about
// half a second on one core (reading a posting from badger costs about
// 0.4 µs); over an index of 100 000 pages only a query of ten or more terms
// that nearly every page has reaches it.
func MaxScan(n int) Option {
	return func(c *config) error { c.maxScan = n; return nil }
}

// TitleBoost multiplies the score contribution of a query term found in
// the record's title by 1+b. Default 0.5.
func TitleBoost(b float64) Option {
	return func(c *config) error { c.titleBoost = b; return nil }
}

// ProfileLimits bounds the registered profiles and the keywords of one
// profile. Defaults: 256 profiles, 64 keywords. Every stored record is
// matched against the profiles that share a term with it, so the cost of
// ingest grows with profiles only where they overlap the records.
func ProfileLimits(maxProfiles, maxKeywords int) Option {
	return func(c *config) error { c.maxProfiles, c.maxProfileKeywords = maxProfiles, maxKeywords; return nil }
}
