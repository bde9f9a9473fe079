package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/bootstrap"
)

// A node remembers the peers it was connected to, in its database, so
// that a restart finds its network again when every configured bootstrap
// peer is down, and a node started without bootstrap peers resumes the
// network it was part of instead of starting a new one. The list is
// written in the bootstrap file format (one multiaddr ending in
// /p2p/<id> per line) and read back with bootstrap.Parse, so a damaged
// value is refused with the line it failed on and the node goes on
// without it.
var knownKey = []byte("/node/peers")

const (
	maxKnown       = 64 // peers remembered: a DHT needs one live peer to start
	maxKnownAddrs  = 8  // addresses remembered per peer
	saveKnownEvery = 5 * time.Minute

	// rejoinMin and rejoinMax bound the wait between two rounds of dials
	// while the node has no peer: it doubles from the first to the second,
	// with up to 25 % jitter, and starts again at the first once joined.
	rejoinMin = 10 * time.Second
	rejoinMax = 5 * time.Minute
)

// loadKnown returns the peers stored by an earlier run; a value that does
// not parse is reported and ignored.
func (n *Node) loadKnown() []peer.AddrInfo {
	v, ok, err := loadValue(n.db, knownKey)
	if err != nil {
		n.log.Warn("reading the peers of earlier runs", "error", err)
		return nil
	}
	if !ok {
		return nil
	}
	ps, err := bootstrap.Parse("stored peers", strings.NewReader(string(v)))
	if err != nil {
		n.log.Warn("the stored peers of earlier runs do not parse; ignored", "error", err)
		return nil
	}
	return ps
}

// saveKnown stores the peers the node is connected to now, then those it
// knew before, up to maxKnown with maxKnownAddrs addresses each. With no
// connected peer the stored list is kept as it is.
func (n *Node) saveKnown() error {
	self := n.h.ID()
	var now []peer.AddrInfo
	for _, id := range n.h.Network().Peers() {
		if addrs := n.h.Peerstore().Addrs(id); id != self && len(addrs) > 0 {
			now = append(now, peer.AddrInfo{ID: id, Addrs: addrs})
		}
	}
	if len(now) == 0 {
		return nil
	}
	// Connected now first (in a fixed order), then what older runs knew.
	slices.SortFunc(now, func(a, b peer.AddrInfo) int { return strings.Compare(string(a.ID), string(b.ID)) })
	all := bootstrap.Merge(now, n.loadKnown())
	var b strings.Builder
	fmt.Fprintf(&b, "# peers of %s, saved %s\n", self, time.Now().UTC().Format(time.RFC3339))
	kept := 0
	for _, p := range all {
		if p.ID == self || kept == maxKnown {
			continue
		}
		kept++
		for _, a := range p.Addrs[:min(len(p.Addrs), maxKnownAddrs)] {
			fmt.Fprintf(&b, "%s/p2p/%s\n", a, p.ID)
		}
	}
	return n.db.Update(func(txn *badger.Txn) error { return txn.Set(knownKey, []byte(b.String())) })
}

// joinPeers are the peers Join dials: the configured bootstrap peers,
// then those of earlier runs.
func (n *Node) joinPeers() (configured, known []peer.AddrInfo) {
	return n.peers, n.loadKnown()
}

// keepJoined runs until the node closes: every saveKnownEvery it stores
// the peers it is connected to; whenever it has no peer at all (none
// answered at the start, or all went away) it dials the configured and
// known peers again, waiting rejoinMin doubling to rejoinMax between
// rounds, and bootstraps the DHT when one answers.
func (n *Node) keepJoined() {
	lo, hi := rejoinMin, rejoinMax
	if n.opt.rejoin > 0 {
		lo, hi = n.opt.rejoin, 30*n.opt.rejoin
	}
	wait := lo
	save := time.NewTicker(saveKnownEvery)
	defer save.Stop()
	for {
		t := time.NewTimer(wait + time.Duration(rand.Int64N(int64(wait)/4+1)))
		select {
		case <-n.ctx.Done():
			t.Stop()
			return
		case <-save.C:
			t.Stop()
			if err := n.saveKnown(); err != nil {
				n.log.Warn("storing the connected peers", "error", err)
			}
			continue
		case <-t.C:
		}
		if len(n.h.Network().Peers()) > 0 {
			wait = lo
			continue
		}
		configured, known := n.joinPeers()
		peers := bootstrap.Merge(configured, known)
		if len(peers) == 0 {
			continue // the first node of a network, alone: others join it
		}
		if err := n.rejoin(n.ctx, peers); err != nil {
			if n.ctx.Err() != nil {
				return
			}
			wait = min(2*wait, hi)
			n.log.Warn("no peer answers; trying again", "peers", len(peers), "in", wait, "error", err)
			continue
		}
		wait = lo
	}
}

// rejoin dials peers and, when one answers, bootstraps the DHT and marks
// the node joined.
func (n *Node) rejoin(ctx context.Context, peers []peer.AddrInfo) error {
	got, err := n.dial(ctx, peers, bootstrap.Attempts(2))
	if err != nil {
		return err
	}
	if err := n.bootstrapDHT(ctx); err != nil {
		return err
	}
	n.log.Info("joined the overlay again", "peers", len(got))
	n.joinOnce.Do(func() { close(n.joined) })
	if err := n.saveKnown(); err != nil {
		n.log.Warn("storing the connected peers", "error", err)
	}
	return nil
}
