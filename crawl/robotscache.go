package crawl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/micra-net/micra/crawl/internal/robots"
	"github.com/micra-net/micra/internal/codec"
)

// robotsCache fetches, caches (in RAM, bounded, and in badger) and applies
// robots.txt per RFC 9309: 2xx is parsed (first 500 KiB), 4xx means
// allow all, 5xx (and 429) or an unreachable server means disallow all,
// more than five redirects means unavailable (allow all). Results are kept
// at most ttl (24 h); an unreachable server is asked again after an hour, and
// meanwhile a previous successfully fetched copy up to 30 days old is used.
type robotsCache struct {
	db            *badger.DB
	f             *Fetcher
	agent         string
	ttl           time.Duration
	redirectDelay time.Duration // between the hops of a redirected robots.txt
	log           *slog.Logger

	mu sync.Mutex
	m  map[string]*robotsItem
}

type robotsKind uint8

const (
	robotsParsed robotsKind = iota
	robotsAllow
	robotsDisallow
)

type robotsItem struct {
	rules   *robots.Rules
	kind    robotsKind
	fetched time.Time
	expires time.Time
	body    []byte // kept only for persistence of parsed files
}

const (
	robotsMemEntries = 4096
	robotsRetry      = time.Hour
	robotsStaleMax   = 30 * 24 * time.Hour
)

func newRobotsCache(db *badger.DB, f *Fetcher, agent string, ttl, redirectDelay time.Duration, log *slog.Logger) *robotsCache {
	return &robotsCache{db: db, f: f, agent: agent, ttl: ttl, redirectDelay: redirectDelay, log: log, m: make(map[string]*robotsItem)}
}

func encodeRobots(it *robotsItem) []byte {
	var w codec.Encoder
	w.Byte(1)
	w.Byte(byte(it.kind))
	w.Time(it.fetched)
	w.Time(it.expires)
	w.Bytes(it.body)
	return w
}

func decodeRobots(b []byte, agent string) (*robotsItem, error) {
	d := newDecoder(b)
	d.Version("robots", 1)
	it := &robotsItem{kind: robotsKind(d.Byte()), fetched: d.Time(), expires: d.Time()}
	it.body = d.Bytes(robots.MaxSize)
	if err := d.Done(); err != nil {
		return nil, err
	}
	switch it.kind {
	case robotsParsed:
		it.rules = robots.Parse(it.body, agent)
	case robotsAllow:
		it.rules = robots.AllowAll()
	case robotsDisallow:
		it.rules = robots.DisallowAll()
	default:
		return nil, fmt.Errorf("%w: robots kind %d", ErrCorruptValue, it.kind)
	}
	return it, nil
}

// rules returns the robots rules for the origin of u (scheme, host, port).
// fetched is true when it asked the server for robots.txt (whatever the
// answer), so that the next request to the host waits its delay; fresh is
// true when that answer was a robots.txt parsed anew, so that its Sitemap
// lines are news.
func (rc *robotsCache) rules(ctx context.Context, u *url.URL) (rules *robots.Rules, fresh, fetched bool, err error) {
	origin := u.Scheme + "://" + u.Host
	now := time.Now()
	rc.mu.Lock()
	it := rc.m[origin]
	rc.mu.Unlock()
	if it != nil && now.Before(it.expires) {
		return it.rules, false, false, nil
	}
	var stored *robotsItem
	if it == nil {
		_ = rc.db.View(func(txn *badger.Txn) error {
			item, err := txn.Get(robotsKey(origin))
			if err != nil {
				return nil
			}
			return item.Value(func(v []byte) error {
				stored, _ = decodeRobots(v, rc.agent)
				return nil
			})
		})
		if stored != nil && now.Before(stored.expires) {
			rc.remember(origin, stored)
			return stored.rules, false, false, nil
		}
	} else {
		stored = it
	}
	got, err := rc.fetch(ctx, origin, now)
	if err != nil {
		return nil, false, false, err // our own shutdown: no verdict
	}
	fresh = got.kind == robotsParsed
	if got.kind == robotsDisallow && stored != nil && stored.kind != robotsDisallow && now.Sub(stored.fetched) < robotsStaleMax {
		// Unreachable now: RFC 9309 2.4 allows the last good copy.
		got.rules, got.kind, got.body = stored.rules, stored.kind, stored.body
	}
	enc := encodeRobots(got) // before remember drops the body
	rc.remember(origin, got)
	if err := rc.db.Update(func(txn *badger.Txn) error {
		return txn.Set(robotsKey(origin), enc)
	}); err != nil {
		rc.log.Warn("storing robots.txt failed", "host", u.Host, "error", err)
	}
	return got.rules, fresh, true, nil
}

// storedCrawlDelay returns the Crawl-delay of the robots.txt stored for
// host (a frontier host key: host[:port]), the larger of its http and
// https origins', expired copies included: a delay a site once asked for
// is the best guess there is. It never fetches.
func (rc *robotsCache) storedCrawlDelay(host string) time.Duration {
	var d time.Duration
	_ = rc.db.View(func(txn *badger.Txn) error {
		for _, scheme := range []string{"http://", "https://"} {
			item, err := txn.Get(robotsKey(scheme + host))
			if err != nil {
				continue
			}
			_ = item.Value(func(v []byte) error {
				if it, err := decodeRobots(v, rc.agent); err == nil {
					d = max(d, it.rules.CrawlDelay)
				}
				return nil
			})
		}
		return nil
	})
	return d
}

func (rc *robotsCache) remember(origin string, it *robotsItem) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.m) >= robotsMemEntries {
		now := time.Now()
		for k, v := range rc.m {
			if now.After(v.expires) || len(rc.m) >= robotsMemEntries {
				delete(rc.m, k)
			}
			if len(rc.m) < robotsMemEntries*3/4 {
				break
			}
		}
	}
	it.body = nil // RAM holds only the compiled rules
	rc.m[origin] = it
}

func (rc *robotsCache) fetch(ctx context.Context, origin string, now time.Time) (*robotsItem, error) {
	u, err := url.Parse(origin + "/robots.txt")
	if err != nil {
		return nil, err
	}
	res, err := rc.f.Fetch(ctx, FetchRequest{URL: u, MaxBody: robots.MaxSize, RedirectDelay: rc.redirectDelay})
	it := &robotsItem{fetched: now, expires: now.Add(rc.ttl)}
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, ErrTooManyRedirects), errors.Is(err, ErrRedirectRefused), errors.Is(err, ErrForbiddenDestination) && res != nil && res.Status != 0:
		// Unavailable (RFC 9309 2.3.1.2 and 2.3.1.3).
		it.kind, it.rules = robotsAllow, robots.AllowAll()
	case err != nil && !errors.Is(err, ErrBodyTooLarge):
		it.kind, it.rules = robotsDisallow, robots.DisallowAll()
		it.expires = now.Add(min(rc.ttl, robotsRetry))
		rc.log.Debug("robots.txt unreachable", "host", u.Host, "error", err)
	case res.Status >= 200 && res.Status < 300:
		it.kind, it.body = robotsParsed, res.Body
		it.rules = robots.Parse(res.Body, rc.agent)
	case res.Status == http.StatusTooManyRequests || res.Status >= 500:
		it.kind, it.rules = robotsDisallow, robots.DisallowAll()
		it.expires = now.Add(min(rc.ttl, robotsRetry))
	case res.Status >= 400:
		it.kind, it.rules = robotsAllow, robots.AllowAll()
	default:
		// 1xx, 3xx without Location and the like: treat as unavailable.
		it.kind, it.rules = robotsAllow, robots.AllowAll()
	}
	return it, nil
}
