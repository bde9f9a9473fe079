package overlay

import (
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/internal/kv"
)

// Prefix is the overlay's badger namespace. Every key the overlay writes
// starts with it; the layout is:
//
//	/overlay/meta/schema                          schema version, one byte
//	/overlay/shard/<b32 shard key>/meta           pb.ShardMeta
//	/overlay/shard/<b32 shard key>/e/<kind>/<b32 entry key>
//	                                              pb.Entry; kind is one decimal digit
//	/overlay/mine/<b32 shard key>                 pb.ShardRef: a shard in which this node holds delegations
//	/overlay/release/r/<b32 parent id>            a signed release (subnet.Release), by the snapshot it replaces
//	/overlay/carry/<b32 range key>                pb.SignedRecord: a delegation of the previous snapshot naming this node, to carry
//	/overlay/deputy/<b32 shard key>/<b32 peer id> pb.AuditEntry, with a TTL: the tally of a shard's coordinator this node judged as its deputy
//	/overlay/selfwithheld/<b32 range key>         empty, with a TTL: a subnet this node gave up on its deputy's verdict, kept out of until it expires
//
// Binary parts are base32 (RFC 4648, lowercase, unpadded), so no part holds
// a '/'. Keys are built only in this file.
const Prefix = "/overlay/"

// schemaVersion is the layout above.
const schemaVersion = 1

var b32 = kv.B32

func schemaKey() []byte { return []byte(Prefix + "meta/schema") }

func shardPrefix(key [32]byte) []byte {
	return []byte(Prefix + "shard/" + b32.EncodeToString(key[:]) + "/")
}

func shardMetaKey(key [32]byte) []byte { return append(shardPrefix(key), "meta"...) }

// shardEntriesPrefix is the prefix of all entries of a shard.
func shardEntriesPrefix(key [32]byte) []byte { return append(shardPrefix(key), "e/"...) }

// shardKindPrefix is the prefix of a shard's entries of one kind.
func shardKindPrefix(key [32]byte, kind int32) []byte {
	return append(shardEntriesPrefix(key), byte('0'+kind%10), '/')
}

func shardEntryKey(key [32]byte, kind int32, entry []byte) []byte {
	return append(shardKindPrefix(key, kind), b32.EncodeToString(entry)...)
}

// allShardsPrefix is the prefix of every shard's keys.
func allShardsPrefix() []byte { return []byte(Prefix + "shard/") }

func minePrefix() []byte { return []byte(Prefix + "mine/") }

func mineKey(key [32]byte) []byte { return append(minePrefix(), b32.EncodeToString(key[:])...) }

// ownedPrefix holds the signed delegation records naming this node, so
// that a restarted node knows its subnets before the first heartbeat.
func ownedPrefix() []byte { return []byte(Prefix + "owned/") }

func ownedKey(rk []byte) []byte { return append(ownedPrefix(), b32.EncodeToString(rk)...) }

func releaseKey(parent [32]byte) []byte {
	return []byte(Prefix + "release/r/" + b32.EncodeToString(parent[:]))
}

func carryPrefix() []byte { return []byte(Prefix + "carry/") }

func carryKey(rk []byte) []byte { return append(carryPrefix(), b32.EncodeToString(rk)...) }

func deputyPrefix() []byte { return []byte(Prefix + "deputy/") }

func deputyKey(shard [32]byte, p peer.ID) []byte {
	return append(deputyPrefix(), b32.EncodeToString(shard[:])+"/"+b32.EncodeToString([]byte(p))...)
}

func selfWithheldPrefix() []byte { return []byte(Prefix + "selfwithheld/") }

func selfWithheldKey(rk []byte) []byte {
	return append(selfWithheldPrefix(), b32.EncodeToString(rk)...)
}
