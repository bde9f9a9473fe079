package overlay

import (
	"container/list"
	"net/netip"
	"sync"
	"time"

	"github.com/micra-net/micra/subnet"
)

// cache holds resolved delegations by subnet (a range of the tree or a
// part of one), least recently used first out, each for at most ttl.
type cache struct {
	mu    sync.Mutex
	size  int
	ttl   time.Duration
	ll    *list.List
	items map[subnet.Range]*list.Element
	parts int // items that are parts
}

type cacheItem struct {
	d    Delegation
	exp  time.Time
	part bool
}

func newCache(size int, ttl time.Duration) *cache {
	return &cache{size: size, ttl: ttl, ll: list.New(), items: map[subnet.Range]*list.Element{}}
}

func (c *cache) get(r subnet.Range) (Delegation, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.getLocked(r)
}

// holding returns the cached delegation holding a, whose smallest
// non-unary range is s: the most specific part of s holding a, else s's.
func (c *cache) holding(s subnet.Range, a netip.Addr) (Delegation, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return mostSpecific(s, a, c.parts > 0, c.getLocked)
}

func (c *cache) getLocked(r subnet.Range) (Delegation, bool) {
	el, ok := c.items[r]
	if !ok {
		return Delegation{}, false
	}
	it := el.Value.(*cacheItem)
	if time.Now().After(it.exp) {
		c.remove(el)
		return Delegation{}, false
	}
	c.ll.MoveToFront(el)
	return it.d, true
}

// put stores d, a part when part is set, unless a newer delegation of the
// same subnet is cached.
func (c *cache) put(d Delegation, part bool) {
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
	c.items[d.Subnet] = c.ll.PushFront(&cacheItem{d: d, exp: time.Now().Add(c.ttl), part: part})
	if part {
		c.parts++
	}
	for c.ll.Len() > c.size {
		c.remove(c.ll.Back())
	}
}

// invalidate drops r's entry and the entries of the parts inside r, which
// Resolve would otherwise still answer from for their addresses. Parts are
// rare, so the scan for them runs only while some are cached.
func (c *cache) invalidate(r subnet.Range) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[r]; ok {
		c.remove(el)
	}
	if c.parts == 0 {
		return
	}
	for k, el := range c.items {
		if el.Value.(*cacheItem).part && r.ContainsRange(k) {
			c.remove(el)
		}
	}
}

func (c *cache) remove(el *list.Element) {
	it := el.Value.(*cacheItem)
	c.ll.Remove(el)
	delete(c.items, it.d.Subnet)
	if it.part {
		c.parts--
	}
}
