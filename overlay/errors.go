package overlay

import (
	"errors"
	"fmt"

	"github.com/micra-net/micra/overlay/pb"
)

var (
	// ErrMalformed: a peer sent a message that does not decode or breaks the
	// schema's rules. The stream is reset; other streams are unaffected.
	ErrMalformed = errors.New("malformed message")
	// ErrUnsupportedVersion: a message carries a schema version this build
	// does not speak.
	ErrUnsupportedVersion = errors.New("unsupported message version")
	// ErrUnsupportedProtocol: the peer does not speak the protocol (or this
	// version of it).
	ErrUnsupportedProtocol = errors.New("peer does not support the protocol")
	// ErrTooLarge: a frame or a list exceeds its limit.
	ErrTooLarge = errors.New("message too large")
	// ErrUnexpectedType: a message type that does not belong to the
	// protocol or to this point of the exchange.
	ErrUnexpectedType = errors.New("unexpected message type")
	// ErrNotCoordinator: the peer asked is not the shard's coordinator; the
	// call was redirected too often or the hint was unusable.
	ErrNotCoordinator = errors.New("peer is not the shard coordinator")
	// ErrStaleEpoch: a shard write carried an epoch older than the one the
	// receiver holds; another peer has taken the shard over.
	ErrStaleEpoch = errors.New("stale shard epoch")
	// ErrWrongSnapshot: the peer works under another subnet snapshot; peers
	// cooperate only under the same snapshot id.
	ErrWrongSnapshot = errors.New("different subnet snapshot")
	// ErrUnavailable: the peer does not offer the service (for example it
	// has no prober).
	ErrUnavailable = errors.New("service unavailable")
	// ErrProbeFailed: the probe ran and failed (unreachable, timeout, HTTP
	// error). The delegation procedure counts it as an infinite RTT.
	ErrProbeFailed = errors.New("probe failed")
	// ErrNoCandidate: the delegation procedure found no node to delegate to.
	ErrNoCandidate = errors.New("no candidate node")
	// ErrOverloaded: the peer refused work it has no room for.
	ErrOverloaded = errors.New("peer overloaded")
	// ErrNotFound: the thing asked about does not exist.
	ErrNotFound = errors.New("not found")
	// ErrForbidden: the sender may not make this request (a reassignment
	// not from a coordinator, an own-subnet claim from another address).
	ErrForbidden = errors.New("forbidden")
	// ErrRemote: the peer reported an internal error.
	ErrRemote = errors.New("remote error")
	// ErrBadRecord: a signed record is malformed, unsigned, wrongly signed,
	// or does not match its key.
	ErrBadRecord = errors.New("invalid record")
	// ErrClosed: the overlay is closed.
	ErrClosed = errors.New("overlay closed")
	// ErrBadEvidence: an audit's evidence does not verify (not signed by
	// the node it names, tampered with, or not about the URL audited).
	ErrBadEvidence = errors.New("audit evidence does not verify")
	// ErrFetchFailed: a refetch for an audit ran and failed.
	ErrFetchFailed = errors.New("refetch failed")
	// ErrRecused: the coordinator asked to judge an audit is the audited
	// node itself; its deputy, the next peer nearest the shard key, judges
	// instead (Overlay.Audit goes there by itself).
	ErrRecused = errors.New("coordinator recused: the audit is of itself")
	// ErrNoPeers: no live peer is known to ask.
	ErrNoPeers = errors.New("no peers known")
)

// codeErrors pairs wire codes with sentinels, most specific first.
var codeErrors = []struct {
	code pb.Error_Code
	err  error
}{
	{pb.Error_UNSUPPORTED_VERSION, ErrUnsupportedVersion},
	{pb.Error_TOO_LARGE, ErrTooLarge},
	{pb.Error_UNEXPECTED_TYPE, ErrUnexpectedType},
	{pb.Error_MALFORMED, ErrMalformed},
	{pb.Error_NOT_COORDINATOR, ErrNotCoordinator},
	{pb.Error_STALE_EPOCH, ErrStaleEpoch},
	{pb.Error_WRONG_SNAPSHOT, ErrWrongSnapshot},
	{pb.Error_UNAVAILABLE, ErrUnavailable},
	{pb.Error_PROBE_FAILED, ErrProbeFailed},
	{pb.Error_NO_CANDIDATE, ErrNoCandidate},
	{pb.Error_OVERLOADED, ErrOverloaded},
	{pb.Error_NOT_FOUND, ErrNotFound},
	{pb.Error_FORBIDDEN, ErrForbidden},
	{pb.Error_BAD_EVIDENCE, ErrBadEvidence},
	{pb.Error_FETCH_FAILED, ErrFetchFailed},
	{pb.Error_RECUSED, ErrRecused},
}

// codeToError turns a peer's error frame into an error wrapping the matching
// sentinel and carrying the peer's message (clipped; it is untrusted text).
func codeToError(e *pb.Error) error {
	sentinel := ErrRemote
	for _, c := range codeErrors {
		if c.code == e.GetCode() {
			sentinel = c.err
		}
	}
	msg := e.GetMessage()
	if len(msg) > 256 {
		msg = msg[:256]
	}
	if msg == "" {
		return fmt.Errorf("peer: %w", sentinel)
	}
	return fmt.Errorf("peer: %w: %q", sentinel, msg)
}

// errorToCode maps an error to its wire code; errors without a sentinel
// become INTERNAL.
func errorToCode(err error) pb.Error_Code {
	for _, c := range codeErrors {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return pb.Error_INTERNAL
}
