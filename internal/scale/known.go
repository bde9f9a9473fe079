package scale

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/subnet"
)

// candidates wraps a node's Delegator and records, for each decision of a
// site's subnet, the lowest model RTT to the site among the coordinator's
// peers (DelegationEnv.Peers): its neighbours, whom its search can ask
// without having read of them in stored probes.
type candidates struct {
	overlay.Delegator
	s *sim
}

// known is what candidates recorded, by the address a decision was asked
// for: the lowest model RTT to the site among the decision's peers, and
// how many peers it had.
type known struct {
	mu   sync.Mutex
	best map[netip.Addr]time.Duration
	n    map[netip.Addr]int
}

// Delegate records the decision's peers and runs the wrapped Delegator.
func (c candidates) Delegate(ctx context.Context, req overlay.DelegateRequest, env overlay.DelegationEnv) (peer.ID, error) {
	if site, ok := c.s.sites[req.Addr]; ok && !req.IsPart() {
		ps := env.Peers()
		best := subnet.Unreachable
		for _, p := range ps {
			if a, ok := c.s.byPeer.Load(p.ID); ok {
				best = min(best, c.s.w.RTT(a.(netip.Addr), site))
			}
		}
		k := &c.s.known
		k.mu.Lock()
		if k.best == nil {
			k.best, k.n = map[netip.Addr]time.Duration{}, map[netip.Addr]int{}
		}
		k.best[req.Addr], k.n[req.Addr] = best, len(ps)
		k.mu.Unlock()
	}
	return c.Delegator.Delegate(ctx, req, env)
}

// get returns what was recorded of the decision of addr.
func (k *known) get(addr netip.Addr) (best time.Duration, peers int, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	best, ok = k.best[addr]
	return best, k.n[addr], ok
}
