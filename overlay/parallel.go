package overlay

import (
	"context"
	"sync"
)

// parallel calls f for each item, at most n at once, and returns when every
// call it started has returned. It starts none once ctx is done and then
// reports false.
func parallel[T any](ctx context.Context, n int, items []T, f func(T)) bool {
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, it := range items {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return false
		}
		wg.Go(func() {
			defer func() { <-sem }()
			f(it)
		})
	}
	return true
}
