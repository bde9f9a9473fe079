package indexer

import (
	"encoding/binary"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/internal/kv"
	"github.com/micra-net/micra/results"
)

// The indexer's keys live in the results package's badger namespace
// (results.Prefix, whose doc comment gives the whole layout) and share its
// schema; they are built only here.

// b32 is the namespace's base32 of ids (RFC 4648, lowercase, unpadded).
var b32 = kv.B32

func seenKey(node peer.ID, seq uint64) []byte {
	k := []byte(results.Prefix + "seen/" + b32.EncodeToString([]byte(node)) + "/")
	return binary.BigEndian.AppendUint64(k, seq)
}

func auditPrefix() []byte { return []byte(results.Prefix + "audit/") }

func auditKey(node peer.ID) []byte {
	return append(auditPrefix(), b32.EncodeToString([]byte(node))...)
}

// parseAuditKey returns the node of an audit key.
func parseAuditKey(k []byte) (peer.ID, bool) { return parseNodeKey(auditPrefix(), k) }

func disputePrefix() []byte { return []byte(results.Prefix + "dispute/") }

func disputeKey(node peer.ID) []byte {
	return append(disputePrefix(), b32.EncodeToString([]byte(node))...)
}

// parseDisputeKey returns the node of a dispute key.
func parseDisputeKey(k []byte) (peer.ID, bool) { return parseNodeKey(disputePrefix(), k) }

// parseNodeKey returns the node named after prefix p in k.
func parseNodeKey(p, k []byte) (peer.ID, bool) {
	if len(k) <= len(p) {
		return "", false
	}
	b, err := b32.DecodeString(string(k[len(p):]))
	if err != nil {
		return "", false
	}
	id, err := peer.IDFromBytes(b)
	return id, err == nil
}

// pendingPrefix is the prefix of the pending crawl requests, each under
// its pendingID (idKey).
func pendingPrefix() []byte { return []byte(results.Prefix + "req/") }

func withheldPrefix() []byte { return []byte(results.Prefix + "withheld/") }

// withheldKey is the key of the withholding notice owed about pending
// request id's node.
func withheldKey(id [16]byte) []byte { return idKey(withheldPrefix(), id) }

// parseWithheldKey returns the id of a withholding notice's key.
func parseWithheldKey(k []byte) ([16]byte, bool) { return parseIDKey(withheldPrefix(), k) }

// idKey is the key of the item of 16-byte id under prefix p (a retryQueue's).
func idKey(p []byte, id [16]byte) []byte {
	return append(p[:len(p):len(p)], b32.EncodeToString(id[:])...)
}

// parseIDKey returns the 16-byte id named after prefix p in k.
func parseIDKey(p, k []byte) ([16]byte, bool) {
	b, err := b32.DecodeString(string(k[min(len(p), len(k)):]))
	if len(k) <= len(p) || err != nil || len(b) != 16 {
		return [16]byte{}, false
	}
	return [16]byte(b), true
}
