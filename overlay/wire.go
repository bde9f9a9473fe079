package overlay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio/pbio"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/multiformats/go-multistream"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/micra-net/micra/overlay/pb"
)

// spec describes one stream protocol: its resource-manager service, frame
// limit, deadline and the request types it serves.
type spec struct {
	id       protocol.ID
	service  string
	maxMsg   int
	deadline time.Duration
}

var (
	probeSpec     = spec{ProbeID, svcProbe, maxProbeMsg, probeDeadline}
	coordSpec     = spec{CoordinateID, svcCoordinate, maxCoordMsg, coordDeadline}
	replicateSpec = spec{ReplicateID, svcReplicate, maxReplicateMsg, syncDeadline}
	auditSpec     = spec{AuditID, svcAudit, maxAuditMsg, auditDeadline}
	releaseSpec   = spec{ReleaseID, svcRelease, maxReleaseMsg, syncDeadline}
	announceSpec  = spec{AnnounceID, svcAnnounce, maxAnnounceMsg, shortDeadline}
)

// payloadFields maps each message type but OK to its payload field: the
// field named as the type in lower case (PROBE_RESULT: probe_result).
// TestPayloadFields checks that every type has one.
var payloadFields = func() map[pb.Message_Type]protoreflect.FieldDescriptor {
	fields := (&pb.Message{}).ProtoReflect().Descriptor().Fields()
	out := map[pb.Message_Type]protoreflect.FieldDescriptor{}
	for name, v := range pb.Message_Type_value {
		if f := fields.ByName(protoreflect.Name(strings.ToLower(name))); f != nil {
			out[pb.Message_Type(v)] = f
		}
	}
	return out
}()

// payloadOf returns whether the field belonging to m's type is present.
// Every type except OK carries its own field.
func payloadOf(m *pb.Message) bool {
	if m.GetType() == pb.Message_OK {
		return true
	}
	f, ok := payloadFields[m.GetType()]
	return ok && m.ProtoReflect().Has(f)
}

// decodeMessage unmarshals one frame's bytes and checks the envelope: the
// version, a known type and its payload. It is the decoder every stream
// uses, and fuzzed.
func decodeMessage(b []byte, m *pb.Message) error {
	if err := protoUnmarshal(b, m); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return checkEnvelope(m)
}

func checkEnvelope(m *pb.Message) error {
	if v := m.GetVersion(); v != wireVersion {
		return fmt.Errorf("%w %d (this node speaks %d)", ErrUnsupportedVersion, v, wireVersion)
	}
	if _, ok := pb.Message_Type_name[int32(m.GetType())]; !ok || m.GetType() == pb.Message_UNKNOWN {
		return fmt.Errorf("%w: type %d", ErrUnexpectedType, m.GetType())
	}
	if !payloadOf(m) {
		return fmt.Errorf("%w: %v without its payload", ErrMalformed, m.GetType())
	}
	return nil
}

// readMsg reads one frame from r into m and checks its envelope.
func readMsg(r pbio.Reader, m *pb.Message) error {
	if err := r.ReadMsg(m); err != nil {
		switch {
		case errors.Is(err, io.ErrShortBuffer):
			return fmt.Errorf("%w: frame over the protocol's limit", ErrTooLarge)
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, network.ErrReset),
			errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), isTimeout(err):
			return err
		case errors.Is(err, multistream.ErrNotSupported[protocol.ID]{}), errors.As(err, new(*network.StreamError)):
			// The protocol's lazy negotiation failed, or the peer reset the
			// stream: a stream error for streamErr, not a malformed frame.
			// A peer that dropped the protocol, when the dialler had not
			// heard of it yet, read as malformed.
			return err
		}
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return checkEnvelope(m)
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// newMsg returns an envelope of type t at this build's version.
func newMsg(t pb.Message_Type) *pb.Message {
	return &pb.Message{Version: wireVersion, Type: t}
}

// errorMsg builds the error frame for err.
func errorMsg(err error) *pb.Message {
	m := newMsg(pb.Message_ERROR)
	m.Error = &pb.Error{Code: errorToCode(err), Message: err.Error()}
	var nc *notCoordinatorError
	if errors.As(err, &nc) {
		m.Error.Hint = &pb.PeerHint{Id: []byte(nc.closer.ID)}
		for _, a := range nc.closer.Addrs {
			if len(m.Error.Hint.Addrs) >= 8 {
				break
			}
			m.Error.Hint.Addrs = append(m.Error.Hint.Addrs, a.Bytes())
		}
	}
	var se *staleEpochError
	if errors.As(err, &se) {
		m.Error.Epoch = se.current
	}
	return m
}

// remoteKey carries the IP address a request's connection comes from
// (netip.Addr; absent for relayed connections).
type remoteKey struct{}

// ipOf returns the IP address of a direct connection's multiaddr; a
// relayed one (p2p-circuit) has none of the peer's own.
func ipOf(m ma.Multiaddr) (netip.Addr, bool) {
	if m == nil {
		return netip.Addr{}, false
	}
	if _, err := m.ValueForProtocol(ma.P_CIRCUIT); err == nil {
		return netip.Addr{}, false
	}
	for _, p := range []int{ma.P_IP4, ma.P_IP6} {
		if v, err := m.ValueForProtocol(p); err == nil {
			if a, err := netip.ParseAddr(v); err == nil {
				return a.Unmap(), true
			}
		}
	}
	return netip.Addr{}, false
}

// notCoordinatorError refuses a shard request and names a closer peer.
type notCoordinatorError struct{ closer peer.AddrInfo }

func (e *notCoordinatorError) Error() string {
	return fmt.Sprintf("not the coordinator; closer peer %s", e.closer.ID)
}
func (e *notCoordinatorError) Unwrap() error { return ErrNotCoordinator }

// staleEpochError refuses a shard write older than the receiver's epoch.
type staleEpochError struct{ got, current uint64 }

func (e *staleEpochError) Error() string {
	return fmt.Sprintf("epoch %d is older than the current %d", e.got, e.current)
}
func (e *staleEpochError) Unwrap() error { return ErrStaleEpoch }

// handler answers one request. It returns the response or an error that is
// sent to the peer as an error frame.
type handler func(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error)

// serve wraps a request handler into a stream handler that sets the
// stream's service and memory scope and deadline, reads one request, refuses
// unexpected types, writes one response, and closes the stream on success or
// resets it on I/O errors. Refusals (malformed, oversize, wrong version) are
// answered with an error frame so the peer sees a clear reason.
func (o *Overlay) serve(sp spec, handlers map[pb.Message_Type]handler) network.StreamHandler {
	return func(s network.Stream) {
		if !o.startServing(s) {
			s.Reset()
			return
		}
		defer o.doneServing(s)
		if err := s.Scope().SetService(sp.service); err != nil {
			o.log.Debug("stream refused by resource manager", "peer", s.Conn().RemotePeer(), "protocol", sp.id, "error", err)
			s.Reset()
			return
		}
		mem := min(2*sp.maxMsg, streamMemory)
		if err := s.Scope().ReserveMemory(mem, network.ReservationPriorityAlways); err != nil {
			o.log.Debug("stream memory refused", "peer", s.Conn().RemotePeer(), "protocol", sp.id, "error", err)
			s.Reset()
			return
		}
		defer s.Scope().ReleaseMemory(mem)
		ctx, cancel := context.WithTimeout(o.ctx, sp.deadline)
		defer cancel()
		_ = s.SetDeadline(time.Now().Add(sp.deadline))
		from := s.Conn().RemotePeer()
		r := pbio.NewDelimitedReader(s, sp.maxMsg)
		w := pbio.NewDelimitedWriter(s)

		var req pb.Message
		if err := readMsg(r, &req); err != nil {
			o.log.Debug("bad request", "peer", from, "protocol", sp.id, "error", err)
			if errorToCode(err) != pb.Error_INTERNAL {
				_ = w.WriteMsg(errorMsg(err))
				_ = s.Close()
				return
			}
			s.Reset()
			return
		}
		h, ok := handlers[req.GetType()]
		if !ok {
			err := fmt.Errorf("%w: %v on %s", ErrUnexpectedType, req.GetType(), sp.id)
			o.log.Debug("bad request", "peer", from, "protocol", sp.id, "error", err)
			_ = w.WriteMsg(errorMsg(err))
			_ = s.Close()
			return
		}
		hctx := context.WithValue(ctx, writerKey{}, w)
		if a, ok := ipOf(s.Conn().RemoteMultiaddr()); ok {
			hctx = context.WithValue(hctx, remoteKey{}, a)
		}
		resp, err := h(hctx, from, &req)
		if err != nil {
			if o.log.Enabled(ctx, -4) {
				o.log.Debug("request failed", "peer", from, "protocol", sp.id, "type", req.GetType().String(), "error", err)
			}
			resp = errorMsg(err)
		}
		if resp == nil { // streaming handlers write their own frames
			_ = s.Close()
			return
		}
		if err := w.WriteMsg(resp); err != nil {
			s.Reset()
			return
		}
		_ = s.Close()
	}
}

// startServing counts s among the requests being served, unless the
// overlay is closing (false). doneServing ends it.
func (o *Overlay) startServing(s network.Stream) bool {
	o.serving.Lock()
	defer o.serving.Unlock()
	if o.streams == nil {
		return false
	}
	o.streams[s] = struct{}{}
	o.inFlight.Add(1)
	return true
}

func (o *Overlay) doneServing(s network.Stream) {
	o.serving.Lock()
	delete(o.streams, s)
	o.serving.Unlock()
	o.inFlight.Done()
}

// stopServing refuses new requests, resets the streams of those being
// served (a handler blocked on a slow peer's stream returns at once; their
// contexts ended with the overlay's) and waits for their handlers.
func (o *Overlay) stopServing() {
	o.serving.Lock()
	for s := range o.streams {
		s.Reset()
	}
	o.streams = nil
	o.serving.Unlock()
	o.inFlight.Wait()
}

// request opens a stream to p, sends req and reads one response of type
// want. Error frames become errors wrapping the matching sentinel. Relayed
// (limited) connections are allowed: the exchanges are small, and a node
// behind NAT must still be reachable.
func (o *Overlay) request(ctx context.Context, p peer.ID, sp spec, req *pb.Message, want pb.Message_Type) (*pb.Message, error) {
	o.stats.count(msgKind{t: int32(req.GetType())})
	s, err := o.openStream(ctx, p, sp)
	if err != nil {
		return nil, err
	}
	w := pbio.NewDelimitedWriter(s)
	r := pbio.NewDelimitedReader(s, sp.maxMsg)
	if err := w.WriteMsg(req); err != nil {
		s.Reset()
		return nil, o.streamErr(p, sp, err)
	}
	_ = s.CloseWrite()
	var resp pb.Message
	if err := readMsg(r, &resp); err != nil {
		s.Reset()
		return nil, o.streamErr(p, sp, err)
	}
	_ = s.Close()
	if resp.GetType() == pb.Message_ERROR {
		return &resp, codeToError(resp.GetError())
	}
	if resp.GetType() != want {
		return nil, fmt.Errorf("%s from %s: %w: %v, want %v", sp.id, p, ErrUnexpectedType, resp.GetType(), want)
	}
	return &resp, nil
}

func (o *Overlay) openStream(ctx context.Context, p peer.ID, sp spec) (network.Stream, error) {
	ctx = network.WithAllowLimitedConn(ctx, "micra")
	ctx, cancel := context.WithTimeout(ctx, sp.deadline)
	defer cancel()
	s, err := o.h.NewStream(ctx, p, sp.id)
	if err != nil {
		return nil, o.streamErr(p, sp, err)
	}
	if err := s.Scope().SetService(sp.service); err != nil {
		s.Reset()
		return nil, fmt.Errorf("%s to %s: %w", sp.id, p, err)
	}
	dl := time.Now().Add(sp.deadline)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	_ = s.SetDeadline(dl)
	return s, nil
}

func (o *Overlay) streamErr(p peer.ID, sp spec, err error) error {
	var se *network.StreamError
	if errors.Is(err, multistream.ErrNotSupported[protocol.ID]{}) ||
		(errors.As(err, &se) && se.Remote && se.ErrorCode == network.StreamProtocolNegotiationFailed) {
		return fmt.Errorf("%s: %w %s", p, ErrUnsupportedProtocol, sp.id)
	}
	return fmt.Errorf("%s to %s: %w", sp.id, p, err)
}
