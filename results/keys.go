package results

import (
	"encoding/binary"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/internal/kv"
)

// Prefix is the package's badger namespace. Every key it writes starts
// with it; the layout is:
//
//	/results/meta/schema                 schema version, one byte
//	/results/meta/seq                    the node's next batch sequence number, u64
//	/results/out/<seq>                   outbox: pb.Stored (signed header, signature)
//	/results/data/<seq>                  outbox: the batch data
//	/results/ack/<seq>/<b32 peer>        outbox: empty; the indexer acknowledged the batch
//	/results/ix/<b32 peer>               pb.KnownIndexer: an indexer this node heard from
//	/results/seen/<b32 node>/<seq>       indexer: the digest (32 bytes) of a stored batch, with a TTL
//	/results/audit/<b32 node>            indexer: pb.AuditStats, the audits of the node's records
//	/results/dispute/<b32 node>          indexer: pb.Disputes, the node's records that disagreed at audits (its priors)
//	/results/req/<b32 id>                indexer: pb.PendingCrawl, a crawl request waiting for a record (id: SHA-256 of its URL, 16 bytes)
//	/results/withheld/<b32 id>           indexer: pb.WithheldOwed, a withholding notice owed about that request's node (same id)
//
// <seq> is 8 bytes big-endian, so the outbox scans in sequence order.
// Peer ids are base32 (RFC 4648, lowercase, unpadded). Keys are built only
// in this file and, for the indexer's, in the indexer package's keys.go,
// which shares the namespace and its schema (CheckSchema).
const Prefix = "/results/"

// schemaVersion is the layout above.
const schemaVersion = 1

var b32 = kv.B32

func schemaKey() []byte { return []byte(Prefix + "meta/schema") }
func seqKey() []byte    { return []byte(Prefix + "meta/seq") }

func outPrefix() []byte  { return []byte(Prefix + "out/") }
func dataPrefix() []byte { return []byte(Prefix + "data/") }
func ackPrefix() []byte  { return []byte(Prefix + "ack/") }
func ixPrefix() []byte   { return []byte(Prefix + "ix/") }

func outKey(seq uint64) []byte  { return binary.BigEndian.AppendUint64(outPrefix(), seq) }
func dataKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(dataPrefix(), seq) }

func ackKey(seq uint64, p peer.ID) []byte {
	k := binary.BigEndian.AppendUint64(ackPrefix(), seq)
	k = append(k, '/')
	return append(k, b32.EncodeToString([]byte(p))...)
}

// parseSeqKey returns the sequence number after prefix p in k.
func parseSeqKey(p, k []byte) (uint64, bool) {
	if len(k) < len(p)+8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(k[len(p):]), true
}

// parseAckKey returns the sequence number and peer of an ack key.
func parseAckKey(k []byte) (uint64, peer.ID, bool) {
	p := ackPrefix()
	if len(k) < len(p)+9 || k[len(p)+8] != '/' {
		return 0, "", false
	}
	seq := binary.BigEndian.Uint64(k[len(p):])
	raw, err := b32.DecodeString(string(k[len(p)+9:]))
	if err != nil {
		return 0, "", false
	}
	id, err := peer.IDFromBytes(raw)
	if err != nil {
		return 0, "", false
	}
	return seq, id, true
}

func ixKey(p peer.ID) []byte { return append(ixPrefix(), b32.EncodeToString([]byte(p))...) }

// parseIxKey returns the peer of an indexer key.
func parseIxKey(k []byte) (peer.ID, bool) {
	p := ixPrefix()
	if len(k) <= len(p) {
		return "", false
	}
	raw, err := b32.DecodeString(string(k[len(p):]))
	if err != nil {
		return "", false
	}
	id, err := peer.IDFromBytes(raw)
	return id, err == nil
}
