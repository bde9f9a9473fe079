// Package cooldown keeps when each key was last used, so that it is not
// used again within its cool-down: a coordinator's asks of a node per
// host, a node's re-delegations per subnet. The table is bounded: when it
// is full, the keys past their cool-down are forgotten, and while it is
// full of keys within theirs, no new key is taken (a peer that fills it
// delays others, it never makes the table grow).
package cooldown

import (
	"sync"
	"time"
)

// Table is a bounded table of keys and when each was last used. The zero
// value is not usable: make one with New. Safe for concurrent use.
type Table[K comparable] struct {
	mu  sync.Mutex
	m   map[K]time.Time
	max int
}

// New returns a table of at most size keys (at least 1).
func New[K comparable](size int) *Table[K] {
	return &Table[K]{m: make(map[K]time.Time), max: max(size, 1)}
}

// Use records that key is used at now, unless it was used less than gap
// before now, or the table is full of keys used less than gap before now:
// then it returns how long to wait (gap, for a full table) and false.
func (t *Table[K]) Use(key K, now time.Time, gap time.Duration) (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if at, ok := t.m[key]; ok {
		if left := gap - now.Sub(at); left > 0 {
			return left, false
		}
	} else if len(t.m) >= t.max {
		for k, at := range t.m {
			if now.Sub(at) >= gap {
				delete(t.m, k)
			}
		}
		if len(t.m) >= t.max {
			return gap, false
		}
	}
	t.m[key] = now
	return 0, true
}

// Forget drops key, as if it had not been used.
func (t *Table[K]) Forget(key K) {
	t.mu.Lock()
	delete(t.m, key)
	t.mu.Unlock()
}

// Len is the number of keys kept.
func (t *Table[K]) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
