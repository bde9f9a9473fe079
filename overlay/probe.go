package overlay

import (
	"context"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"

	"github.com/micra-net/micra/overlay/pb"
)

// Probe asks p to time an HTTP HEAD to url from its own address. A URL on
// a host the Egress policy refuses is refused (ErrForbidden) without
// asking p; p refuses one its own policy or prober refuses likewise, which
// is no failed probe. A p this node is not connected to and has no
// address of is looked up in the DHT first (findAddrs); one not found
// fails as unreachable.
func (o *Overlay) Probe(ctx context.Context, p peer.ID, url string) (time.Duration, error) {
	if len(url) > maxURLLen {
		return 0, fmt.Errorf("probe: %w: URL of %d bytes", ErrTooLarge, len(url))
	}
	if err := o.refuseURL(url); err != nil {
		return 0, fmt.Errorf("probe: %w", err)
	}
	if p == o.h.ID() {
		if o.cfg.prober == nil {
			return 0, ErrUnavailable
		}
		return o.localProbe(ctx, url)
	}
	if err := o.findAddrs(ctx, p); err != nil {
		return 0, fmt.Errorf("probe by %s: %w", p, err)
	}
	release, err := o.probeSlots.acquire(ctx, p)
	if err != nil {
		return 0, fmt.Errorf("probe by %s: waiting for a stream: %w", p, err)
	}
	defer release()
	req := newMsg(pb.Message_PROBE)
	req.Probe = &pb.Probe{Url: url}
	o.stats.requests.Add(1)
	resp, err := o.request(ctx, p, probeSpec, req, pb.Message_PROBE_RESULT)
	if err != nil {
		return 0, err
	}
	rtt := resp.GetProbeResult().GetRttMicros()
	if rtt < 0 || rtt > int64(time.Hour/time.Microsecond) {
		return 0, fmt.Errorf("probe from %s: %w: RTT %d µs", p, ErrMalformed, rtt)
	}
	return time.Duration(rtt) * time.Microsecond, nil
}

// findAddrs looks p's addresses up in the DHT when this node is not
// connected to p and knows none (a coordinator asks nodes named in stored
// probes, which it may never have met), keeping them for
// peerstore.TempAddrTTL.
func (o *Overlay) findAddrs(ctx context.Context, p peer.ID) error {
	if o.h.Network().Connectedness(p) == network.Connected || len(o.h.Peerstore().Addrs(p)) > 0 {
		return nil
	}
	ai, err := o.dht.FindPeer(ctx, p)
	if err != nil {
		return fmt.Errorf("finding its addresses: %w", err)
	}
	o.h.Peerstore().AddAddrs(p, ai.Addrs, peerstore.TempAddrTTL)
	return nil
}
