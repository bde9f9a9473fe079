package node

import (
	"errors"
	"testing"
	"time"

	"github.com/micra-net/micra/internal/p2ptest"
)

// TestWithin checks the bound on a part's Close: a close that hangs is
// given up after the limit, one that returns passes its error on.
func TestWithin(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		release := make(chan struct{})
		start := time.Now()
		if err := within(hostCloseLimit, func() error { <-release; return nil }); !errors.Is(err, errLeftBehind) {
			t.Errorf("a close that hangs returned %v, want errLeftBehind", err)
		}
		if waited := time.Since(start); waited != hostCloseLimit {
			t.Errorf("gave up after %v, want %v", waited, hostCloseLimit)
		}
		close(release)
		errClose := errors.New("close failed")
		if err := within(hostCloseLimit, func() error { return errClose }); !errors.Is(err, errClose) {
			t.Errorf("got %v, want %v", err, errClose)
		}
	})
}
