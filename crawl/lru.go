package crawl

import "container/list"

// lru is a bounded map whose least recently touched entry goes first when
// it is full. Not safe for concurrent use: its owner locks.
type lru[K comparable, V any] struct {
	max int
	ll  *list.List // of *lruEntry[K, V], most recent first
	m   map[K]*list.Element
}

type lruEntry[K comparable, V any] struct {
	k K
	v *V
}

func newLRU[K comparable, V any](max int) *lru[K, V] {
	return &lru[K, V]{max: max, ll: list.New(), m: map[K]*list.Element{}}
}

// touch returns k's value, moved to the front, or a new zero value added
// at the front (evicting from the back beyond max).
func (l *lru[K, V]) touch(k K) *V {
	if el, ok := l.m[k]; ok {
		l.ll.MoveToFront(el)
		return el.Value.(*lruEntry[K, V]).v
	}
	e := &lruEntry[K, V]{k: k, v: new(V)}
	l.m[k] = l.ll.PushFront(e)
	for l.ll.Len() > l.max {
		old := l.ll.Back()
		l.ll.Remove(old)
		delete(l.m, old.Value.(*lruEntry[K, V]).k)
	}
	return e.v
}

// remove drops k.
func (l *lru[K, V]) remove(k K) {
	if el, ok := l.m[k]; ok {
		l.ll.Remove(el)
		delete(l.m, k)
	}
}

func (l *lru[K, V]) len() int { return l.ll.Len() }
