package results

import "errors"

// Errors of result delivery. Match them with errors.Is; most are wrapped
// with the detail that caused them.
var (
	// ErrClosed: the outbox or indexer was closed.
	ErrClosed = errors.New("results closed")
	// ErrOutboxFull: the outbox is at its cap (and its shutdown reserve)
	// and the caller gave up waiting; the batch was not stored.
	ErrOutboxFull = errors.New("results outbox full")
	// ErrMalformed: a message or batch does not decode or breaks the
	// schema's rules (sizes, counts, hashes).
	ErrMalformed = errors.New("malformed result message")
	// ErrUnsupportedVersion: a message of a version this build does not
	// speak.
	ErrUnsupportedVersion = errors.New("unsupported result message version")
	// ErrBadSignature: a batch's signature does not verify under the key
	// of the node it names.
	ErrBadSignature = errors.New("bad batch signature")
	// ErrConflict: a batch reuses a (node, sequence) pair already stored
	// with another digest: a forgery or a node that reused a sequence
	// number. It is never stored nor acknowledged.
	ErrConflict = errors.New("batch conflicts with a stored batch of the same sequence number")
	// ErrRefused: a well-formed batch the indexer does not take (another
	// snapshot, shard layout or shard).
	ErrRefused = errors.New("batch refused")
	// ErrNotIndexer: an acknowledgement from a peer that has not announced
	// itself as an indexer (or is not trusted).
	ErrNotIndexer = errors.New("peer is not a known indexer")
)
