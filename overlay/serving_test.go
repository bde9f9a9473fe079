package overlay

import (
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/micra-net/micra/internal/p2ptest"
)

// resetStream is a stream that only records its Reset.
type resetStream struct {
	network.Stream
	reset atomic.Bool
}

func (s *resetStream) Reset() error { s.reset.Store(true); return nil }

// TestCloseWaitsForHandlers: Close returns only after the requests being
// served have returned, resetting their streams so that none waits on a
// slow peer, and refuses requests that arrive meanwhile. The node closes
// its database after the overlay: a heartbeat's claim still scanning the
// store then panicked with "DB Closed" (TestNodeJoinCrawlRestart, about one
// run in a hundred).
func TestCloseWaitsForHandlers(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		o := &Overlay{streams: map[network.Stream]struct{}{}}
		busy := &resetStream{}
		if !o.startServing(busy) {
			t.Fatal("a request refused before Close")
		}
		stopped := make(chan struct{})
		go func() {
			o.stopServing()
			close(stopped)
		}()
		synctest.Wait()
		select {
		case <-stopped:
			t.Fatal("stopServing returned while a handler was running")
		default:
		}
		if !busy.reset.Load() {
			t.Error("the running request's stream was not reset")
		}
		if o.startServing(&resetStream{}) {
			t.Error("a request accepted while closing")
		}
		o.doneServing(busy)
		synctest.Wait()
		select {
		case <-stopped:
		default:
			t.Fatal("stopServing did not return after the handler did")
		}
	})
}
