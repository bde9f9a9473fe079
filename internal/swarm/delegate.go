package swarm

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/subnet"
)

// Assignment is the outcome of Delegate: the node each site went to, and
// the probes the delegation procedures of the swarm issued meanwhile.
type Assignment struct {
	Node   map[int]netip.Addr // site ID → the world address of its node
	Probes int64
}

// delegateWorkers is how many sites Delegate delegates at once: a running
// network delegates the subnets of the URLs its crawlers meet side by
// side, not one after the other.
const delegateWorkers = 8

// delegateAttempts bounds the tries per site: a decision can fail while a
// coordinator is being replaced or a shard is claimed.
const delegateAttempts = 4

// Delegate delegates the subnet of each site's first address as a
// crawler of the swarm does when it meets the site's URL (node's router):
// resolve, and when nobody holds the subnet, delegate it, which runs the
// guided search at the subnet's coordinator with probes over the world.
// The sites are asked in order, a few at a time, each from the nodes in
// turn. It fails when a site could not be delegated or went to a peer
// that is not one of the swarm's nodes.
func (s *Swarm) Delegate(ctx context.Context, run *world.Running, sites []world.Site) (Assignment, error) {
	probes := func() int64 {
		var n int64
		for _, nd := range s.Nodes {
			n += nd.DelegationStats().Probes
		}
		return n
	}
	before := probes()
	got := make([]netip.Addr, len(sites))
	errs := make([]error, len(sites))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(delegateWorkers, len(sites)) {
		wg.Go(func() {
			for i := range next {
				got[i], errs[i] = s.delegate(ctx, run, sites[i], s.Nodes[i%len(s.Nodes)])
			}
		})
	}
feed:
	for i := range sites {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return Assignment{}, err
	}
	a := Assignment{Node: make(map[int]netip.Addr, len(sites))}
	for i, st := range sites {
		if errs[i] != nil {
			return Assignment{}, fmt.Errorf("delegating %s (%s): %w", st.Name, st.Addrs[0], errs[i])
		}
		a.Node[st.ID] = got[i]
	}
	a.Probes = probes() - before
	return a, nil
}

// delegate delegates st's subnet through asker's overlay and returns the
// address of the node it went to.
func (s *Swarm) delegate(ctx context.Context, run *world.Running, st world.Site, asker *Node) (netip.Addr, error) {
	o := asker.Overlay()
	addr := st.Addrs[0]
	var err error
	for try := range delegateAttempts {
		if try > 0 {
			select {
			case <-time.After(time.Duration(try) * 500 * time.Millisecond):
			case <-ctx.Done():
				return netip.Addr{}, ctx.Err()
			}
		}
		d, ok, rerr := o.Resolve(ctx, addr)
		if err = rerr; err != nil {
			continue
		}
		if !ok || d.Orphaned {
			if d, err = o.Delegate(ctx, run.URL(st), addr); err != nil {
				continue
			}
		}
		a, ok := s.Addr(d.Node)
		if !ok {
			return netip.Addr{}, fmt.Errorf("delegated to %s, not a node of the swarm", d.Node)
		}
		return a, nil
	}
	return netip.Addr{}, err
}

// Decide starts a swarm by cfg, delegates sites through it (Delegate) and
// stops it: the assignment a new network of those nodes makes of them. A
// node that does not stop cleanly is logged at error level, and the
// assignment stands: it left goroutines behind, it changed no decision.
func Decide(ctx context.Context, run *world.Running, tree *subnet.Tree, cfg Config, sites []world.Site) (Assignment, error) {
	s, err := Start(ctx, run, tree, cfg)
	if err != nil {
		return Assignment{}, err
	}
	a, err := s.Delegate(ctx, run, sites)
	if cerr := s.Close(); cerr != nil {
		s.cfg.Logger.Error("stopping the swarm", "error", cerr)
	}
	return a, err
}
