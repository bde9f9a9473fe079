package overlay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"

	"github.com/micra-net/micra/overlay/pb"
)

// Routing requests to shard coordinators: lookups of the coordinator,
// redirects, retries after transient refusals, and dials within a budget.

// askCoordinator sends req to the coordinator of ref, following redirects
// and retrying once with a fresh lookup when the coordinator is gone.
// maxCoordRetries bounds askCoordinator's look-ups after transient
// refusals.
const maxCoordRetries = 3

func (o *Overlay) askCoordinator(ctx context.Context, ref shardRef, req *pb.Message, want pb.Message_Type) (*pb.Message, error) {
	return o.askCoordinatorOn(ctx, coordSpec, ref, req, want)
}

// askCoordinatorOn is askCoordinator over the protocol of sp.
func (o *Overlay) askCoordinatorOn(ctx context.Context, sp spec, ref shardRef, req *pb.Message, want pb.Message_Type) (*pb.Message, error) {
	resp, _, err := o.askCoordinatorFrom(ctx, sp, ref, req, want)
	return resp, err
}

// askCoordinatorFrom is askCoordinatorOn that also returns the peer whose
// answer it returns: the one that answered, or the last one asked.
func (o *Overlay) askCoordinatorFrom(ctx context.Context, sp spec, ref shardRef, req *pb.Message, want pb.Message_Type) (*pb.Message, peer.ID, error) {
	if o.ctx.Err() != nil {
		return nil, "", ErrClosed
	}
	key := ref.key(o.sid)
	o.mu.Lock()
	target, known := o.coordFor[key]
	o.mu.Unlock()
	if !known {
		// The nearest peer this node knows: a redirect or two from a peer
		// nearer the key costs less than a lookup (tens of DHT requests).
		target = o.coord.view(key)[0]
	}
	var lastErr error
	refreshed := false
	retries := 0 // after a takeover, a lost claim race or an unreachable coordinator
	for hop := 0; hop <= maxNotCoordinator+1+maxCoordRetries; hop++ {
		resp, err := o.askPeer(ctx, sp, target, req, want, retryBudget(ctx, retries < maxCoordRetries))
		if err == nil {
			o.mu.Lock()
			o.coordFor[key] = target
			o.mu.Unlock()
			return resp, target, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			return nil, target, err
		}
		switch {
		case errors.Is(err, ErrNotCoordinator) && resp != nil && resp.GetError().GetHint() != nil:
			next, perr := peer.IDFromBytes(resp.GetError().GetHint().GetId())
			if perr != nil || next == target {
				return nil, target, err
			}
			if next == o.h.ID() || !closer(next, target, key) {
				// The peer names this node, or a peer no nearer the key
				// than itself: one of the views is stale. Look again.
				if refreshed {
					return nil, target, err
				}
				refreshed = true
				next = o.coord.closestPeers(ctx, key, true)[0]
			}
			o.stats.redirects.Add(1)
			if addrs := hintAddrs(resp.GetError().GetHint()); len(addrs) > 0 && next != o.h.ID() {
				o.h.Peerstore().AddAddrs(next, addrs, peerstore.TempAddrTTL)
			}
			target = next
		case errors.Is(err, ErrNotCoordinator), errors.Is(err, ErrUnavailable), errors.Is(err, ErrStaleEpoch),
			!isRemote(err):
			// Taken over, no quorum yet, two peers racing to claim the
			// shard (one loses with a stale epoch), or the coordinator is
			// unreachable: look it up again after a pause, a few times
			// (0.1, 0.4, 1.6 s), since these settle within a second or two.
			if retries == maxCoordRetries {
				return nil, target, err
			}
			retries++
			if !isRemote(err) {
				o.coord.forget(target)
				o.mu.Lock()
				if o.coordFor[key] == target {
					delete(o.coordFor, key) // the next request must not start there again
				}
				o.mu.Unlock()
				// Not reached: gone, or only its addresses are (a
				// peer not met for 15 minutes). First ask a reachable
				// peer near the key: a redirect carries the
				// coordinator's addresses, one request where a lookup
				// costs tens.
				if next := o.reachableNear(key, target); retries == 1 && next != "" {
					target = next
					continue
				}
			}
			pause := time.NewTimer(100 * time.Millisecond << (2 * (retries - 1)))
			select {
			case <-ctx.Done():
				pause.Stop()
				return nil, target, err
			case <-pause.C:
			}
			target = o.coord.closestPeers(ctx, key, true)[0]
		default:
			return nil, target, err
		}
	}
	return nil, target, fmt.Errorf("%w: %w", ErrNotCoordinator, lastErr)
}

// reachableNear returns the peer nearest key in this node's view, neither
// this node nor not, that it is connected to or has addresses for; ""
// when none.
func (o *Overlay) reachableNear(key [32]byte, not peer.ID) peer.ID {
	for _, p := range o.coord.view(key) {
		if p == not || p == o.h.ID() {
			continue
		}
		if o.h.Network().Connectedness(p) == network.Connected || len(o.h.Peerstore().Addrs(p)) > 0 {
			return p
		}
	}
	return ""
}

// askPeer sends req to target over sp, or serves it here when target is
// this node, connecting within dial when it is positive (else within
// ctx). An error frame's message is returned with its error.
func (o *Overlay) askPeer(ctx context.Context, sp spec, target peer.ID, req *pb.Message, want pb.Message_Type, dial time.Duration) (*pb.Message, error) {
	if target == o.h.ID() {
		return o.handleLocal(ctx, req)
	}
	o.stats.requests.Add(1)
	if err := o.connect(ctx, target, dial); err != nil {
		return nil, fmt.Errorf("%s to %s: %w", sp.id, target, err)
	}
	return o.request(ctx, target, sp, req, want)
}

// connect connects to p unless connected (a limited, relayed connection
// counts), within the given time when it is positive, else within ctx's.
func (o *Overlay) connect(ctx context.Context, p peer.ID, within time.Duration) error {
	ctx = network.WithAllowLimitedConn(ctx, "micra")
	if within > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, within)
		defer cancel()
	}
	return o.h.Connect(ctx, peer.AddrInfo{ID: p})
}

// retryBudget is the time an attempt of askCoordinatorOn may spend
// connecting: half what ctx has left while a retry remains (0: all of
// it). A dial to a departed coordinator waits out whatever deadline it is
// given, and a heartbeat that spent its whole budget there would never
// look up the peer that took the shard over; its crawlers would then stay
// silent to the new coordinator until it orphaned their subnets, one
// liveness timeout after its claim. The request itself keeps the whole
// budget: a decision may take seconds.
func retryBudget(ctx context.Context, retry bool) time.Duration {
	if dl, ok := ctx.Deadline(); ok && retry {
		return max(time.Until(dl)/2, time.Nanosecond)
	}
	return 0
}

// isRemote reports whether err came from the peer's answer rather than from
// reaching it.
func isRemote(err error) bool {
	for _, c := range codeErrors {
		if errors.Is(err, c.err) {
			return true
		}
	}
	return errors.Is(err, ErrRemote)
}
