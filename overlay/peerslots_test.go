package overlay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// heldProber holds every probe until released, counting those in flight.
type heldProber struct {
	release  chan struct{}
	inFlight atomic.Int32
	peak     atomic.Int32
}

func (p *heldProber) Probe(ctx context.Context, _ string) (time.Duration, error) {
	n := p.inFlight.Add(1)
	defer p.inFlight.Add(-1)
	for {
		m := p.peak.Load()
		if n <= m || p.peak.CompareAndSwap(m, n) {
			break
		}
	}
	select {
	case <-p.release:
		return 7 * time.Millisecond, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// TestProbesQueuePerPeer: a coordinator deciding many subnets at once
// probes one peer more often than the peer's probe streams allow
// (probeStreamsPerPeer, enforced by both resource managers): the probes
// wait for a stream instead of being refused. Real hosts: the resource
// manager is the subject (simulated hosts run without one).
func TestProbesQueuePerPeer(t *testing.T) {
	rig := loopback(t)
	p := &heldProber{release: make(chan struct{})}
	a, b := rig.node(0), rig.node(1, WithProber(p))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := a.h.Connect(ctx, peer.AddrInfo{ID: b.h.ID(), Addrs: b.h.Addrs()}); err != nil {
		t.Fatal(err)
	}
	const probes = 3 * probeStreamsPerPeer
	var wg sync.WaitGroup
	var failed atomic.Int32
	errs := make(chan error, probes)
	for range probes {
		wg.Go(func() {
			rtt, err := a.o.Probe(ctx, b.h.ID(), "http://127.0.0.9/")
			if err != nil || rtt != 7*time.Millisecond {
				failed.Add(1)
				errs <- fmt.Errorf("%v, %w", rtt, err)
			}
		})
	}
	// Every stream the peer allows is taken (bounded by the context).
	for p.inFlight.Load() < probeStreamsPerPeer && ctx.Err() == nil && failed.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if n := failed.Load(); n > 0 {
		close(p.release)
		wg.Wait()
		close(errs)
		t.Fatalf("%d of %d probes refused while the peer's streams were busy, first: %v", n, probes, <-errs)
	}
	close(p.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("probe: %v", err)
	}
	if got := p.peak.Load(); got > probeStreamsPerPeer {
		t.Errorf("%d probes in flight at the peer, at most %d streams allowed", got, probeStreamsPerPeer)
	}
}

// TestPeerSlots: a peer's slots bound what is in flight to it, not to
// others; a wait ends with its context; entries go when unused.
func TestPeerSlots(t *testing.T) {
	s := newPeerSlots(2)
	ctx := t.Context()
	var rel []func()
	for range 2 {
		r, err := s.acquire(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		rel = append(rel, r)
	}
	if r, err := s.acquire(ctx, "b"); err != nil {
		t.Fatalf("another peer's slot: %v", err)
	} else {
		r()
	}
	short, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.acquire(short, "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("third slot of two: %v, want it to wait until its context ends", err)
	}
	got := make(chan error, 1)
	go func() {
		r, err := s.acquire(ctx, "a")
		if err == nil {
			r()
		}
		got <- err
	}()
	rel[0]()
	if err := <-got; err != nil {
		t.Fatalf("waiting for a released slot: %v", err)
	}
	rel[1]()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) != 0 {
		t.Errorf("%d entries left with nothing in flight", len(s.m))
	}
}
