package crawl

import (
	"context"
	"net/url"
	"strings"
	"time"

	"github.com/micra-net/micra/crawl/internal/parse"
	"github.com/micra-net/micra/crawl/internal/urlnorm"
)

// Where a page's links go: this node's frontier or the outgoing store.

// route sorts the links of a page: links to the page's own host and those
// the Router keeps go into local (with their parsed URLs), the others into
// out. Links found in the page go one hop deeper and only while the page
// has depth left; a redirect target keeps the page's depth; a sitemap named
// by robots.txt gets at least depth 1, so that the URLs it lists are
// fetched. A link whose host does not resolve is dropped.
func (c *Crawler) route(j *job, links []parse.Link) (local []entry, localURLs []*url.URL, out []Outlink) {
	e := j.l.entry
	if len(links) == 0 {
		return nil, nil, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), 30*time.Second)
	defer cancel()
	for _, l := range links {
		depth := e.Depth - 1
		switch l.Source {
		case parse.FromRedirect:
			depth = e.Depth
		case parse.FromRobots:
			depth = max(e.Depth, 1)
		}
		if depth < 0 {
			continue
		}
		var u *url.URL
		var err error
		if l.Source == parse.FromRedirect || l.Source == parse.FromRobots {
			u, err = urlnorm.Parse(l.URL)
		} else {
			// The parser resolved and normalised it already.
			u, err = url.Parse(l.URL)
		}
		if err != nil {
			continue
		}
		// Keyed by net/url's form, as Submit and revisits key it.
		child := entry{URL: u.String(), Parent: e.URL, Depth: depth, Hops: e.Hops + 1, Owners: e.Owners}
		if !strings.EqualFold(u.Host, j.u.Host) {
			addrs, err := c.fetch.Resolve(ctx, u.Hostname())
			if err != nil {
				c.stats.dropped.Add(1)
				continue
			}
			if c.cfg.router != nil && !c.cfg.router.Route(u, addrs[0]) {
				out = append(out, Outlink{Request: Request{Link: child.URL, ParentLink: child.Parent, Depth: child.Depth, Owners: child.Owners}, Addr: addrs[0].Unmap(), hops: child.Hops})
				continue
			}
		}
		local = append(local, child)
		localURLs = append(localURLs, u)
	}
	return local, localURLs, out
}

// queueLocal adds a page's local links to the frontier, in one batch.
func (c *Crawler) queueLocal(local []entry, urls []*url.URL) {
	if len(local) == 0 {
		return
	}
	if _, err := c.front.addBatch(local, urls, false, time.Now()); err != nil {
		c.log.Error("frontier failed", "error", err)
		return
	}
	c.poke()
}

// storedOut accounts for links of which stored of n went to the outgoing
// store (the others found it full) and wakes the node's forwarder.
func (c *Crawler) storedOut(n, stored int) {
	if n > stored {
		c.stats.dropped.Add(int64(n - stored))
		c.log.Warn("outgoing store full; links for other nodes dropped", "count", n-stored, "cap", c.cfg.outCap)
	}
	if stored > 0 {
		c.wakeOut()
	}
}

// wakeOut tells the node's forwarder that links were stored in the
// outgoing store (OutgoingStored).
func (c *Crawler) wakeOut() {
	select {
	case c.outWake <- struct{}{}:
	default:
	}
}
