package overlay

import (
	"context"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"
)

// probeStreamsPerPeer is how many probe streams a node keeps open to one
// peer, and accepts from one (addServiceLimits).
const probeStreamsPerPeer = 4

// peerSlots bounds the requests of one kind in flight to each peer. A
// coordinator deciding dozens of subnets at once probes the same few
// peers for each: past the resource manager's per-peer stream limit the
// stream is refused, and the peer would count as not having probed. With
// the slots the requests wait their turn instead. Safe for concurrent
// use; a peer's entry lives while a request to it is in flight or waits.
type peerSlots struct {
	n  int
	mu sync.Mutex
	m  map[peer.ID]*peerSlot
}

type peerSlot struct {
	sem   chan struct{}
	users int // holders and waiters
}

func newPeerSlots(n int) *peerSlots { return &peerSlots{n: n, m: map[peer.ID]*peerSlot{}} }

// acquire waits for one of p's slots; the caller calls release once done.
// It fails only when ctx ends first.
func (s *peerSlots) acquire(ctx context.Context, p peer.ID) (release func(), err error) {
	s.mu.Lock()
	e := s.m[p]
	if e == nil {
		e = &peerSlot{sem: make(chan struct{}, s.n)}
		s.m[p] = e
	}
	e.users++
	s.mu.Unlock()
	leave := func() {
		s.mu.Lock()
		if e.users--; e.users == 0 {
			delete(s.m, p)
		}
		s.mu.Unlock()
	}
	select {
	case e.sem <- struct{}{}:
		return func() { <-e.sem; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}
