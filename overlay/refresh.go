package overlay

import (
	"time"

	"github.com/libp2p/go-libp2p/core/event"
)

// Routing-table refresh: a lookup of the node's own ID, a liveness check of
// the table's peers not queried lately, and a lookup of a random key in
// every bucket no lookup touched for half the period. It replaces
// kad-dht's auto-refresh (dht.DisableAutoRefresh in New), whose ticker
// starts with the DHT: Bootstrap's refresh lands just after it, so every
// other tick finds the buckets fresh and skips them, and the full refresh
// runs every two ticks in phase with the node's start — on every node at
// once in a swarm started together (a mass restart, the bench), where it
// swamped the 1,000-node bench's delegation phase (docs/scale.md). Here
// the period is explicit (twenty minutes, what kad-dht's ticker gave), its
// phase drawn at random and each period jittered, so that the swarm's
// refreshes stay spread whatever its start. kad-dht's two other triggers
// are kept: a routing table of at most lowPeers peers, checked every
// lowPeersCheck (kad-dht's fixLowPeers, which with auto-refresh disabled
// only re-adds connected peers), and a change of the host's addresses
// (the self lookup tells the new neighbourhood where to reach the node).
const (
	defaultRefresh = 20 * time.Minute
	lowPeers       = 10              // kad-dht's minRTRefreshThreshold
	lowPeersCheck  = 2 * time.Minute // kad-dht's periodicBootstrapInterval
	refreshJitter  = 0.1             // each period is refresh × [0.9, 1.1)
)

// refreshLoop refreshes the routing table (see above) until Close, from
// Bootstrap's join on; sub delivers the host's address changes.
func (o *Overlay) refreshLoop(sub event.Subscription) {
	defer sub.Close()
	period := o.cfg.refresh
	next := time.NewTimer(time.Duration(randFloat() * float64(period)))
	defer next.Stop()
	low := time.NewTicker(min(lowPeersCheck, period))
	defer low.Stop()
	addrs := sub.Out()
	for {
		select {
		case <-o.ctx.Done():
			return
		case <-next.C:
			next.Reset(time.Duration(float64(period) * (1 - refreshJitter + 2*refreshJitter*randFloat())))
		case <-low.C:
			if o.dht.RoutingTable().Size() > lowPeers {
				continue
			}
		case _, ok := <-addrs:
			if !ok {
				addrs = nil
				continue
			}
		}
		if !o.joined.Load() {
			continue // Bootstrap's own refresh comes with the join
		}
		o.stats.refreshes.Add(1)
		select {
		case <-o.dht.RefreshRoutingTable():
		case <-o.ctx.Done():
			return
		}
	}
}
