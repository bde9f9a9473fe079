package crawl

import (
	"bytes"
	"encoding/base32"
	"encoding/binary"
	"errors"
	"time"
)

// KeyPrefix is the badger namespace owned by this package. Every key the
// crawler writes starts with it; nothing else may write under it.
//
// Layout (hosts base32 without padding, numbers fixed-width big-endian,
// u = first 16 bytes of SHA-256 of the normalised URL):
//
//	/crawl/meta/schema                 schema version (uint32)
//	/crawl/meta/bloom/<i:4>            Bloom filter snapshot in chunks, written by Close
//	/crawl/meta/counts                 queue counters snapshot, written by Close
//	/crawl/meta/clean                  present only between a clean Close and the next open
//	/crawl/meta/traffic                daily transfer counter
//	/crawl/u/<u>                       URL state: the seen set (value: pageState)
//	/crawl/q/<host>/<prio:2><seq:8>    queued request of a host (value: entry)
//	/crawl/h/<host>                    host state: its ready time (int64 unix ns), and while
//	                                   requests of it are leased, its ready time without them
//	/crawl/hr/<time:8><host>           ready index: hosts with queued URLs by time
//	/crawl/rv/<time:8><u>              revisit schedule (value: entry)
//	/crawl/r/<host>                    cached robots.txt (value: robotsEntry)
//	/crawl/p/<seq:8>                   a record made and not yet delivered in a batch
//	                                   (value: the record's batch encoding)
//	/crawl/o/<seq:8>                   a link for another node, until handed on
//	                                   (value: Outlink encoding)
const KeyPrefix = "/crawl/"

// schemaVersion is stored under /crawl/meta/schema.
const schemaVersion = 1

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

var (
	keySchema  = []byte(KeyPrefix + "meta/schema")
	keyBloom   = []byte(KeyPrefix + "meta/bloom") // before the snapshot was chunked; deleted when seen
	keyClean   = []byte(KeyPrefix + "meta/clean")
	keyCounts  = []byte(KeyPrefix + "meta/counts")
	keyTraffic = []byte(KeyPrefix + "meta/traffic")

	prefixBloom   = []byte(KeyPrefix + "meta/bloom/")
	prefixURL     = []byte(KeyPrefix + "u/")
	prefixQueue   = []byte(KeyPrefix + "q/")
	prefixHost    = []byte(KeyPrefix + "h/")
	prefixReady   = []byte(KeyPrefix + "hr/")
	prefixRevisit = []byte(KeyPrefix + "rv/")
	prefixRobots  = []byte(KeyPrefix + "r/")
	prefixPending = []byte(KeyPrefix + "p/")
	prefixOut     = []byte(KeyPrefix + "o/") // links for other nodes (outgoing.go)
)

var errKey = errors.New("malformed key")

// bloomChunkKey returns the key of chunk i of the Bloom filter snapshot.
func bloomChunkKey(i uint32) []byte {
	return binary.BigEndian.AppendUint32(cat(prefixBloom), i)
}

// cat returns the parts joined in a new slice (never one of the parts).
func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func timeBytes(t time.Time) []byte {
	n := t.UnixNano()
	if n < 0 {
		n = 0
	}
	return be64(uint64(n))
}

func hostPart(host string) []byte { return []byte(b32.EncodeToString([]byte(host))) }

// decodeHostPart accepts only the canonical encoding hostPart produces.
func decodeHostPart(p []byte) (string, error) {
	h, err := b32.DecodeString(string(p))
	if err != nil || len(h) == 0 || b32.EncodeToString(h) != string(p) {
		return "", errKey
	}
	return string(h), nil
}

func urlKey(u [16]byte) []byte { return cat(prefixURL, u[:]) }

func hostKey(host string) []byte { return cat(prefixHost, hostPart(host)) }

func robotsKey(host string) []byte { return cat(prefixRobots, hostPart(host)) }

func pendingKey(seq uint64) []byte { return cat(prefixPending, be64(seq)) }

// queuePrefix is the prefix of one host's queue, ending in '/'.
func queuePrefix(host string) []byte { return cat(prefixQueue, hostPart(host), []byte{'/'}) }

func queueKey(host string, prio uint16, seq uint64) []byte {
	return cat(queuePrefix(host), []byte{byte(prio >> 8), byte(prio)}, be64(seq))
}

func readyKey(t time.Time, host string) []byte { return cat(prefixReady, timeBytes(t), hostPart(host)) }

func revisitKey(t time.Time, u [16]byte) []byte { return cat(prefixRevisit, timeBytes(t), u[:]) }

// parseReadyKey returns the time and host of a ready-index key.
func parseReadyKey(k []byte) (time.Time, string, error) {
	if len(k) < len(prefixReady)+8 || string(k[:len(prefixReady)]) != string(prefixReady) {
		return time.Time{}, "", errKey
	}
	rest := k[len(prefixReady):]
	if rest[0]&0x80 != 0 {
		return time.Time{}, "", errKey // times are never negative
	}
	t := time.Unix(0, int64(binary.BigEndian.Uint64(rest[:8])))
	h, err := decodeHostPart(rest[8:])
	if err != nil {
		return time.Time{}, "", err
	}
	return t, h, nil
}

// parseQueueKey returns the host, priority and sequence of a queue key.
func parseQueueKey(k []byte) (string, uint16, uint64, error) {
	if len(k) < len(prefixQueue)+11 || string(k[:len(prefixQueue)]) != string(prefixQueue) {
		return "", 0, 0, errKey
	}
	rest := k[len(prefixQueue):]
	hp, tail := rest[:len(rest)-11], rest[len(rest)-11:]
	if tail[0] != '/' {
		return "", 0, 0, errKey
	}
	h, err := decodeHostPart(hp)
	if err != nil {
		return "", 0, 0, err
	}
	return h, uint16(tail[1])<<8 | uint16(tail[2]), binary.BigEndian.Uint64(tail[3:]), nil
}

// parseRevisitKey returns the time and URL hash of a revisit key.
func parseRevisitKey(k []byte) (time.Time, [16]byte, error) {
	var u [16]byte
	if len(k) != len(prefixRevisit)+8+16 || string(k[:len(prefixRevisit)]) != string(prefixRevisit) {
		return time.Time{}, u, errKey
	}
	rest := k[len(prefixRevisit):]
	if rest[0]&0x80 != 0 {
		return time.Time{}, u, errKey
	}
	copy(u[:], rest[8:])
	return time.Unix(0, int64(binary.BigEndian.Uint64(rest[:8]))), u, nil
}
