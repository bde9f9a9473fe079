package results

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-msgio/pbio"

	"github.com/micra-net/micra/internal/p2pstream"
	"github.com/micra-net/micra/overlay"
	opb "github.com/micra-net/micra/overlay/pb"
)

// BatchRef names one result batch acknowledged by an indexer.
type BatchRef struct {
	Node   peer.ID // the batch's author
	Seq    uint64
	Digest [32]byte // SHA-256 of the signed batch's header
}

// ackWire is the version of the acknowledgement frames: overlay's message
// envelope (pb.Message ACK, answered by OK or ERROR), which the protocol
// kept when it moved here from the overlay.
const ackWire = 1

// ServeAcks registers the handler of AckID on h (an Outbox does, at Start;
// tools and tests may serve it themselves): each ACK frame (at most
// maxAckBatches references) is handed to handle, and answered with OK
// once it returns nil, or with an ERROR frame (UNAVAILABLE when handle's
// error is overlay.ErrUnavailable: the node does not know the indexer
// yet). Call the returned function to remove the handler.
func ServeAcks(h host.Host, log *slog.Logger, handle func(ctx context.Context, from peer.ID, refs []BatchRef) error) (remove func()) {
	ctx, cancel := context.WithCancel(context.Background())
	h.SetStreamHandler(AckID, func(s network.Stream) { serveAck(ctx, log, s, handle) })
	return func() {
		h.RemoveStreamHandler(AckID)
		cancel()
	}
}

func serveAck(ctx context.Context, log *slog.Logger, s network.Stream, handle func(context.Context, peer.ID, []BatchRef) error) {
	from := s.Conn().RemotePeer()
	if !p2pstream.Accept(log, s, AckID, svcAck, 2*maxAckMsg, ackDeadline) {
		return
	}
	defer s.Scope().ReleaseMemory(2 * maxAckMsg)
	ctx, cancel := context.WithTimeout(ctx, ackDeadline)
	defer cancel()
	var m opb.Message
	if err := pbio.NewDelimitedReader(s, maxAckMsg).ReadMsg(&m); err != nil {
		log.Debug("bad acknowledgement", "peer", from, "error", err)
		s.Reset()
		return
	}
	refs, err := decodeAck(&m)
	if err == nil {
		err = handle(ctx, from, refs)
	}
	resp := &opb.Message{Version: ackWire, Type: opb.Message_OK}
	if err != nil {
		log.Debug("acknowledgement refused", "peer", from, "error", err)
		code := opb.Error_MALFORMED
		if errors.Is(err, overlay.ErrUnavailable) {
			code = opb.Error_UNAVAILABLE
		}
		resp = &opb.Message{Version: ackWire, Type: opb.Message_ERROR, Error: &opb.Error{Code: code, Message: err.Error()}}
	}
	if err := pbio.NewDelimitedWriter(s).WriteMsg(resp); err != nil {
		s.Reset()
		return
	}
	_ = s.Close()
}

// decodeAck checks an ACK frame and returns its references.
func decodeAck(m *opb.Message) ([]BatchRef, error) {
	if m.GetVersion() != ackWire {
		return nil, fmt.Errorf("%w: %d", ErrUnsupportedVersion, m.GetVersion())
	}
	if m.GetType() != opb.Message_ACK || m.GetAck() == nil {
		return nil, fmt.Errorf("%w: unexpected %v", ErrMalformed, m.GetType())
	}
	bs := m.GetAck().GetBatches()
	if len(bs) == 0 || len(bs) > maxAckBatches {
		return nil, fmt.Errorf("%w: %d batches (1 to %d)", ErrMalformed, len(bs), maxAckBatches)
	}
	refs := make([]BatchRef, 0, len(bs))
	for _, b := range bs {
		node, err := peer.IDFromBytes(b.GetNode())
		if err != nil || len(b.GetDigest()) != 32 {
			return nil, fmt.Errorf("%w: batch reference", ErrMalformed)
		}
		ref := BatchRef{Node: node, Seq: b.GetSeq()}
		copy(ref.Digest[:], b.GetDigest())
		refs = append(refs, ref)
	}
	return refs, nil
}

// SendAck acknowledges refs to their author p and waits for its answer; a
// refusal because p does not know this indexer yet is overlay.ErrUnavailable.
func SendAck(ctx context.Context, h host.Host, p peer.ID, refs []BatchRef) error {
	if len(refs) == 0 || len(refs) > maxAckBatches {
		return fmt.Errorf("ack: %w: %d batches (1 to %d)", ErrMalformed, len(refs), maxAckBatches)
	}
	s, err := p2pstream.Open(ctx, h, p, AckID, svcAck, ackDeadline)
	if err != nil {
		return err
	}
	m := &opb.Message{Version: ackWire, Type: opb.Message_ACK, Ack: &opb.Ack{}}
	for _, r := range refs {
		m.Ack.Batches = append(m.Ack.Batches, &opb.BatchRef{Node: []byte(r.Node), Seq: r.Seq, Digest: r.Digest[:]})
	}
	if err := pbio.NewDelimitedWriter(s).WriteMsg(m); err != nil {
		s.Reset()
		return err
	}
	_ = s.CloseWrite()
	var resp opb.Message
	if err := pbio.NewDelimitedReader(s, 4<<10).ReadMsg(&resp); err != nil {
		s.Reset()
		return err
	}
	_ = s.Close()
	switch {
	case resp.GetType() == opb.Message_ERROR:
		msg := resp.GetError().GetMessage()
		if len(msg) > 256 {
			msg = msg[:256]
		}
		if resp.GetError().GetCode() == opb.Error_UNAVAILABLE {
			return fmt.Errorf("%w: peer: %q", overlay.ErrUnavailable, msg)
		}
		return fmt.Errorf("%w: peer: %q", overlay.ErrRemote, msg)
	case resp.GetType() != opb.Message_OK:
		return fmt.Errorf("%w: answer %v", ErrMalformed, resp.GetType())
	}
	return nil
}
