package crawl

import (
	"slices"
	"sync"
)

// The hosts being crawled now: a request is active from the moment the
// dispatcher hands it to a fetcher until its page is processed (or the
// fetch ends without a page). Stats.InFlight counts the requests,
// Stats.Crawling names their hosts.

// maxCrawlingShown bounds the hosts Stats.Crawling lists.
const maxCrawlingShown = 32

type activeHosts struct {
	mu    sync.Mutex
	hosts map[string]int // requests active per host
}

// begin marks a request of host active.
func (c *Crawler) begin(host string) {
	c.stats.inFlight.Add(1)
	c.active.mu.Lock()
	defer c.active.mu.Unlock()
	if c.active.hosts == nil {
		c.active.hosts = map[string]int{}
	}
	c.active.hosts[host]++
}

// end marks a request of host done.
func (c *Crawler) end(host string) {
	c.stats.inFlight.Add(-1)
	c.active.mu.Lock()
	defer c.active.mu.Unlock()
	if c.active.hosts[host] <= 1 {
		delete(c.active.hosts, host)
		return
	}
	c.active.hosts[host]--
}

// crawling returns the hosts with requests active, sorted, at most
// maxCrawlingShown.
func (c *Crawler) crawling() []string {
	c.active.mu.Lock()
	out := make([]string, 0, min(len(c.active.hosts), maxCrawlingShown))
	for h := range c.active.hosts {
		out = append(out, h)
	}
	c.active.mu.Unlock()
	slices.Sort(out)
	return out[:min(len(out), maxCrawlingShown)]
}
