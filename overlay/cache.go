package overlay

import (
	"container/list"
	"sync"
	"time"

	"github.com/micra-net/micra/subnet"
)

// cache holds resolved delegations by subnet, least recently used first out,
// each for at most ttl.
type cache struct {
	mu    sync.Mutex
	size  int
	ttl   time.Duration
	ll    *list.List
	items map[subnet.Range]*list.Element
}

type cacheItem struct {
	d   Delegation
	exp time.Time
}

func newCache(size int, ttl time.Duration) *cache {
	return &cache{size: size, ttl: ttl, ll: list.New(), items: map[subnet.Range]*list.Element{}}
}

func (c *cache) get(r subnet.Range) (Delegation, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[r]
	if !ok {
		return Delegation{}, false
	}
	it := el.Value.(*cacheItem)
	if time.Now().After(it.exp) {
		c.ll.Remove(el)
		delete(c.items, r)
		return Delegation{}, false
	}
	c.ll.MoveToFront(el)
	return it.d, true
}

// put stores d unless a newer delegation of the same subnet is cached.
func (c *cache) put(d Delegation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[d.Subnet]; ok {
		it := el.Value.(*cacheItem)
		if it.d.Epoch > d.Epoch || (it.d.Epoch == d.Epoch && it.d.Seq > d.Seq) {
			return
		}
		it.d, it.exp = d, time.Now().Add(c.ttl)
		c.ll.MoveToFront(el)
		return
	}
	c.items[d.Subnet] = c.ll.PushFront(&cacheItem{d: d, exp: time.Now().Add(c.ttl)})
	for c.ll.Len() > c.size {
		el := c.ll.Back()
		c.ll.Remove(el)
		delete(c.items, el.Value.(*cacheItem).d.Subnet)
	}
}

func (c *cache) invalidate(r subnet.Range) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[r]; ok {
		c.ll.Remove(el)
		delete(c.items, r)
	}
}
