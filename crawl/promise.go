package crawl

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/micra-net/micra/crawl/internal/urlnorm"
)

// Promises. A node signs a receipt of each crawl request it takes from
// another node, and a receipt is evidence against it: a page with no record
// some time after the receipt (two of a coordinator's graces, 20 minutes
// at micra's defaults) may cost the node its subnet. A politeness delay
// per host means a queue of a thousand requests for one host takes a
// thousand delays, however honest the node: anyone who sends that many
// real pages of a host could then report the late ones. So the node
// promises only what it can keep, and Promise decides what that is.

// promiseAhead is the priority bound of the requests counted ahead of a
// new one in its host's queue: every runtime request and seed (hops 0)
// sorts before it, whatever its in-links; links the crawl found itself
// (hops 1 and more) sort after it.
const promiseAhead = 0x0100

// minPromiseDelay stands for a host's politeness delay when the crawler
// has none (a zero minimum delay): fetches then follow each other at the
// pace of the fetches themselves.
const minPromiseDelay = 250 * time.Millisecond

// Promise queues the runtime requests reqs it can fetch within horizon
// and reports, for each, whether it took it; it takes none of a host
//   - whose queue holds so many runtime requests already that the new one
//     would wait longer than horizon at half the pace the host's politeness
//     delay allows (its robots.txt Crawl-delay as stored, at least the
//     minimum delay; half, for slow answers and retries),
//   - that is resting (backing off after errors) for more than half of
//     horizon,
//
// and none at all while the operator's windows or the daily byte cap keep
// the crawler idle for more than half of horizon; and none of a host for
// which from, the sender, holds its share of that room already, unless it
// is a newcomer with none queued and the newcomers' reserve has room
// (roomFor, promisesenders.go; from "" is not counted by sender). A
// request not taken is not queued: its sender may send it again later.
// Requests taken are queued as Submit queues them. A malformed request is
// neither taken nor queued, and named in the error.
func (c *Crawler) Promise(ctx context.Context, horizon time.Duration, from string, reqs ...Request) ([]bool, error) {
	if c.ctx.Err() != nil {
		return nil, ErrClosed
	}
	if horizon <= 0 {
		return nil, fmt.Errorf("%w: promise horizon %v", ErrBadRequest, horizon)
	}
	c.promMu.Lock()
	defer c.promMu.Unlock()
	taken := make([]bool, len(reqs))
	now := time.Now()
	if c.sched.nextOpen(now).Sub(now) > horizon/2 {
		return taken, nil
	}
	if at := c.meter.wait(now); at.Sub(now) > horizon/2 {
		return taken, nil
	}
	if c.cfg.hold != nil && c.cfg.hold() != nil {
		return taken, nil
	}
	type room struct{ ahead, limit, mine int }
	rooms := map[string]*room{}
	var errs []error
	var take []Request
	type ledgerEntry struct {
		host string
		key  [16]byte
	}
	var mine []ledgerEntry
	txn := c.db.NewTransaction(false)
	defer txn.Discard()
	queued := func(k [16]byte) bool {
		st, found, err := getState(txn, k)
		return err == nil && found && st.Queued != nil
	}
	for i, r := range reqs {
		u, err := urlnorm.Parse(r.Link)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %q: %w", ErrBadRequest, r.Link, err))
			continue
		}
		host := urlnorm.HostKey(u)
		rm := rooms[host]
		if rm == nil {
			d := max(c.hostDelay(c.robots.storedCrawlDelay(host), nil, host), minPromiseDelay)
			rm = &room{limit: int(horizon / (2 * d))}
			ahead, ready, err := c.front.ahead(host, rm.limit+reserve(rm.limit))
			if err != nil {
				return nil, err
			}
			rm.ahead = ahead
			if ready.Sub(now) > horizon/2 {
				rm.limit = 0
			}
			if from != "" {
				rm.mine = c.senders.count(host, from, now, horizon, queued)
			}
			rooms[host] = rm
		}
		if !roomFor(rm.ahead, rm.limit, rm.mine, from != "") {
			continue
		}
		rm.ahead++
		rm.mine++
		taken[i] = true
		take = append(take, r)
		mine = append(mine, ledgerEntry{host, urlHash(u.String())})
	}
	if len(take) > 0 {
		if err := c.Submit(ctx, take...); err != nil {
			return nil, err
		}
	}
	if from != "" {
		for _, e := range mine {
			c.senders.add(e.host, from, e.key, now)
		}
	}
	return taken, errors.Join(errs...)
}

// Fresh reports whether the page of link was fetched within the revisit
// minimum, is not queued, and its record went out (a new or changed page,
// not withdrawn since): a request for it from a node that handed the link
// on asks for nothing the indexers lack, and queueing it again would only
// refetch it (a conditional fetch that makes no record) and take the
// room of a new page of its host.
func (c *Crawler) Fresh(link string) bool {
	u, err := urlnorm.Parse(link)
	if err != nil {
		return false
	}
	var st pageState
	var found bool
	err = c.db.View(func(txn *badger.Txn) (err error) {
		st, found, err = getState(txn, urlHash(u.String()))
		return err
	})
	return err == nil && found && st.Queued == nil && st.Indexed && time.Since(st.LastVisit) < c.cfg.revisitMin
}

// ahead counts the runtime requests and seeds in host's queue (priority
// below promiseAhead), up to limit, and returns the host's ready time
// leases aside (zero when it has none).
func (f *frontier) ahead(host string, limit int) (n int, ready time.Time, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	err = f.db.View(func(txn *badger.Txn) error {
		if it, err := txn.Get(hostKey(host)); err == nil {
			if v, err := it.ValueCopy(nil); err == nil {
				// While requests are leased, the stored ready time is
				// the leases' end; base is the host's own.
				_, ready, _, _ = parseHostValue(v)
			}
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		qp := queuePrefix(host)
		bound := queueKey(host, promiseAhead, 0)
		eachKey(txn, qp, f.queueStart(host), func(k []byte) bool {
			if n >= limit || string(k) >= string(bound) {
				return false
			}
			n++
			return true
		})
		return nil
	})
	return n, ready, err
}
