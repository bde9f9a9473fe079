// Package p2pstream opens and accepts the one-frame libp2p streams of
// micra's request protocols (results' acknowledgements, requests' crawl
// requests and watches): resource-manager service, memory and deadline set
// the same way on both ends. It imports overlay for its errors only and
// must not import results, requests, indexer or node.
package p2pstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/multiformats/go-multistream"

	"github.com/micra-net/micra/overlay"
)

// Accept puts an incoming stream of protocol id in service svc, reserves
// mem bytes for it (the caller releases them) and sets its deadline d from
// now. It resets the stream and reports false when the resource manager
// refuses.
func Accept(log *slog.Logger, s network.Stream, id protocol.ID, svc string, mem int, d time.Duration) bool {
	from := s.Conn().RemotePeer()
	if err := s.Scope().SetService(svc); err != nil {
		log.Debug("stream refused by resource manager", "peer", from, "protocol", id, "error", err)
		s.Reset()
		return false
	}
	if err := s.Scope().ReserveMemory(mem, network.ReservationPriorityAlways); err != nil {
		log.Debug("stream memory refused", "peer", from, "protocol", id, "error", err)
		s.Reset()
		return false
	}
	_ = s.SetDeadline(time.Now().Add(d))
	return true
}

// Open opens a stream of protocol id to p (relayed connections allowed) in
// service svc, with the stream's deadline at most d away; a peer that does
// not speak id is overlay.ErrUnsupportedProtocol.
func Open(ctx context.Context, h host.Host, p peer.ID, id protocol.ID, svc string, d time.Duration) (network.Stream, error) {
	ctx = network.WithAllowLimitedConn(ctx, "micra")
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	s, err := h.NewStream(ctx, p, id)
	if err != nil {
		var se *network.StreamError
		if errors.Is(err, multistream.ErrNotSupported[protocol.ID]{}) ||
			(errors.As(err, &se) && se.Remote && se.ErrorCode == network.StreamProtocolNegotiationFailed) {
			return nil, fmt.Errorf("%s: %w %s", p, overlay.ErrUnsupportedProtocol, id)
		}
		return nil, err
	}
	if err := s.Scope().SetService(svc); err != nil {
		s.Reset()
		return nil, err
	}
	dl := time.Now().Add(d)
	if t, ok := ctx.Deadline(); ok && t.Before(dl) {
		dl = t
	}
	_ = s.SetDeadline(dl)
	return s, nil
}
