package delegate

import (
	"context"
	"sync"
	"time"

	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/subnet"
)

// maxCached bounds each cache; past it the expired entries go, then all.
const maxCached = 4096

// cache keeps answers from other shards for the CacheTTL, shared by the
// decisions of one Delegator. It is safe for concurrent use.
type cache struct {
	ttl    time.Duration
	mu     sync.Mutex
	orgs   map[string]orgEntry
	blocks map[blockKey]blockEntry
}

type orgEntry struct {
	ds  []overlay.Delegation
	exp time.Time
}

type blockKey struct{ x, anchor subnet.ID }

type blockEntry struct {
	ixs []overlay.IndexedDelegation
	exp time.Time
}

func newCache(ttl time.Duration) *cache {
	return &cache{ttl: ttl, orgs: map[string]orgEntry{}, blocks: map[blockKey]blockEntry{}}
}

// org returns the delegations of organisation org.
func (c *cache) org(ctx context.Context, env overlay.DelegationEnv, org string) ([]overlay.Delegation, error) {
	now := time.Now()
	c.mu.Lock()
	e, ok := c.orgs[org]
	c.mu.Unlock()
	if ok && now.Before(e.exp) {
		return e.ds, nil
	}
	ds, err := env.OrgDelegations(ctx, org)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.orgs) >= maxCached {
		prune(c.orgs, now, func(e orgEntry) time.Time { return e.exp })
	}
	c.orgs[org] = orgEntry{ds, now.Add(c.ttl)}
	return ds, nil
}

// block returns the block index of x as seen from anchor.
func (c *cache) block(ctx context.Context, env overlay.DelegationEnv, x, anchor subnet.ID) ([]overlay.IndexedDelegation, error) {
	now := time.Now()
	k := blockKey{x, anchor}
	c.mu.Lock()
	e, ok := c.blocks[k]
	c.mu.Unlock()
	if ok && now.Before(e.exp) {
		return e.ixs, nil
	}
	ixs, err := env.Block(ctx, x)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.blocks) >= maxCached {
		prune(c.blocks, now, func(e blockEntry) time.Time { return e.exp })
	}
	c.blocks[k] = blockEntry{ixs, now.Add(c.ttl)}
	return ixs, nil
}

// addToBlocks adds a decision this Delegator just made to the cached block
// indexes of the ranges containing its subnet, replacing an older entry of
// the same subnet, so that the next decisions nearby see it before the
// block shards' copies come back.
func (c *cache) addToBlocks(t *subnet.Tree, ix overlay.IndexedDelegation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.blocks {
		if !t.Range(k.x).ContainsRange(ix.Subnet) {
			continue
		}
		ixs := make([]overlay.IndexedDelegation, 0, len(e.ixs)+1)
		for _, o := range e.ixs {
			if o.Subnet != ix.Subnet {
				ixs = append(ixs, o)
			}
		}
		c.blocks[k] = blockEntry{append(ixs, ix), e.exp}
	}
}

func prune[K comparable, V any](m map[K]V, now time.Time, exp func(V) time.Time) {
	for k, v := range m {
		if now.After(exp(v)) {
			delete(m, k)
		}
	}
	if len(m) >= maxCached {
		clear(m)
	}
}
