package index

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"math"
)

// KeyPrefix is the badger namespace owned by this package. Every key the
// index writes starts with it; nothing else may write under it.
//
// Layout (id = first 16 bytes of SHA-256 of the record's URL; <t> a term and
// <n> a profile name, each preceded by its length in one byte so that no
// term or name is a prefix of another's keys; numbers fixed-width
// big-endian):
//
//	/index/meta/schema                 schema version (uvarint)
//	/index/meta/counts                 document, term and ingest counters (value: counts)
//	/index/d/<id>                      page state: live or tombstone, record time,
//	                                   content hash, provenance (value: docMeta)
//	/index/r/<id>                      live record: its postings and the record in
//	                                   crawl.AppendRecord form (value: stored)
//	/index/p/<len><t><id>              posting (value: weight u16, flags u8 [, anchor
//	                                   weight u16 when flagged inAnchor]); <t> is a
//	                                   keyword or stem, a verbatim term ("=…",
//	                                   schema 5, verbatim.go), or a hidden term of the
//	                                   record's statements (schema 2: "#t:…", "#p:…",
//	                                   "#h:…", see structured.go)
//	/index/t/<t>                       document frequency of a term, and whether it has
//	                                   an impact list (value: termState, impact.go)
//	/index/i/<len><t><^s:8><id>        the postings of a frequent term by descending
//	                                   impact s, a float64's bits (schema 4; empty
//	                                   value, impact.go)
//	/index/meta/building               the term whose impact list is being built
//	/index/meta/gen                    the last generation of blocks given (schema 6)
//	/index/b/<len><t><gen:4><last id>  a block of a frequent term's postings (schema 6;
//	                                   value: block, blocks.go)
//	/index/q/<len><t><gen:4><id>       a change of such a term's posting since its
//	                                   blocks of generation gen were written (schema 6;
//	                                   posting value, empty when removed)
//	/index/a/<id>                      anchor terms of the links to a page, live or not,
//	                                   with the number of linking pages (schema 3;
//	                                   value: anchorCounts, anchors.go)
//	/index/pf/<n>                      profile definition and state (value: profileValue)
//	/index/pc/<n>                      number of records matching a profile (value: uvarint)
//	/index/m/<len><n><id>              annotation of a record for a profile (value: match)
//	/index/mr/<len><n><rel:8><id>      the same, ordered by descending relevance (empty value)
//
// Postings of one term are contiguous and ordered by id, which the query
// evaluator uses to intersect and merge lists; ids are uniformly spread, so
// the position of an id in its list is also the fraction of the list read.
const KeyPrefix = "/index/"

// schemaVersion is stored under /index/meta/schema. Version 2 indexes
// records' statements as hidden terms (postings flagged inStruct, terms up
// to 255 bytes); version 3 counts the anchors of links for the pages they
// point to (/index/a/) and merges them into their postings (inAnchor);
// version 4 keeps impact lists of frequent terms (/index/i/); version 5
// indexes the verbatim terms of titles and anchors (verbatim.go); version 6
// packs the postings of frequent terms into blocks (blocks.go).
// New migrates older indexes (migrate.go). Binaries that read an older
// version only refuse a newer one (ErrSchema) instead of misreading it.
const schemaVersion = 6

const idLen = 16

// docID identifies a page: the first 16 bytes of SHA-256 of its URL.
type docID [idLen]byte

// compareIDs orders ids as bytes.Compare orders their bytes, in two loads.
func compareIDs(a, b *docID) int {
	if c := cmp.Compare(binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(b[:8])); c != 0 {
		return c
	}
	return cmp.Compare(binary.BigEndian.Uint64(a[8:]), binary.BigEndian.Uint64(b[8:]))
}

func idOf(url string) docID {
	s := sha256.Sum256([]byte(url))
	return docID(s[:idLen])
}

var (
	keySchema = []byte(KeyPrefix + "meta/schema")
	keyCounts = []byte(KeyPrefix + "meta/counts")

	prefixDoc          = []byte(KeyPrefix + "d/")
	prefixRecord       = []byte(KeyPrefix + "r/")
	prefixAnchor       = []byte(KeyPrefix + "a/")
	prefixPosting      = []byte(KeyPrefix + "p/")
	prefixDF           = []byte(KeyPrefix + "t/")
	prefixImpact       = []byte(KeyPrefix + "i/")
	prefixProfile      = []byte(KeyPrefix + "pf/")
	prefixProfileCount = []byte(KeyPrefix + "pc/")
	prefixMatch        = []byte(KeyPrefix + "m/")
	prefixMatchRank    = []byte(KeyPrefix + "mr/")
)

// cat returns the parts joined in a new slice (never one of the parts).
func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// lp is s preceded by its length; terms and names are at most 255 bytes.
func lp(s string) []byte {
	return append([]byte{byte(len(s))}, s...)
}

func docKey(id docID) []byte    { return cat(prefixDoc, id[:]) }
func recordKey(id docID) []byte { return cat(prefixRecord, id[:]) }

func anchorKey(id docID) []byte { return cat(prefixAnchor, id[:]) }

// postingPrefix is the prefix of every posting of term t.
func postingPrefix(t string) []byte { return cat(prefixPosting, lp(t)) }

func postingKey(t string, id docID) []byte { return cat(prefixPosting, lp(t), id[:]) }

// postingID returns the id at the end of a posting key of a known prefix.
func postingID(prefix, k []byte) (docID, bool) {
	var id docID
	if len(k) != len(prefix)+idLen || !bytes.HasPrefix(k, prefix) {
		return id, false
	}
	copy(id[:], k[len(prefix):])
	return id, true
}

func dfKey(t string) []byte { return cat(prefixDF, []byte(t)) }

func profileKey(name string) []byte      { return cat(prefixProfile, []byte(name)) }
func profileCountKey(name string) []byte { return cat(prefixProfileCount, []byte(name)) }

func matchPrefix(name string) []byte        { return cat(prefixMatch, lp(name)) }
func matchKey(name string, id docID) []byte { return cat(prefixMatch, lp(name), id[:]) }
func matchRankPrefix(name string) []byte    { return cat(prefixMatchRank, lp(name)) }
func matchRankKey(name string, rel float64, id docID) []byte {
	return cat(prefixMatchRank, lp(name), relBytes(rel), id[:])
}

// relBytes orders non-negative relevances descending: the bits of a
// non-negative float64 order like the float, so their complement orders in
// reverse.
func relBytes(rel float64) []byte {
	return binary.BigEndian.AppendUint64(nil, ^math.Float64bits(max(rel, 0)))
}

// parseMatchRankKey returns the relevance and id of a rank key of a known
// prefix.
func parseMatchRankKey(prefix, k []byte) (float64, docID, bool) {
	var id docID
	if len(k) != len(prefix)+8+idLen || !bytes.HasPrefix(k, prefix) {
		return 0, id, false
	}
	rel := math.Float64frombits(^binary.BigEndian.Uint64(k[len(prefix):]))
	if math.IsNaN(rel) || rel < 0 || rel > 1 {
		return 0, id, false
	}
	copy(id[:], k[len(prefix)+8:])
	return rel, id, true
}

// parsePostingKey splits any posting key into its term and id.
func parsePostingKey(k []byte) (string, docID, bool) {
	t, rest, ok := splitTermKey(prefixPosting, k)
	var id docID
	if !ok || len(rest) != idLen {
		return "", id, false
	}
	copy(id[:], rest)
	return t, id, true
}

// splitTermKey splits a key of prefix followed by a length-prefixed term
// into the term and what follows it.
func splitTermKey(prefix, k []byte) (string, []byte, bool) {
	if !bytes.HasPrefix(k, prefix) || len(k) < len(prefix)+1 {
		return "", nil, false
	}
	rest := k[len(prefix):]
	n := int(rest[0])
	if n == 0 || len(rest) < 1+n {
		return "", nil, false
	}
	return string(rest[1 : 1+n]), rest[1+n:], true
}

// parseMatchKey splits an annotation key into profile name and id.
func parseMatchKey(k []byte) (string, docID, bool) {
	var id docID
	if !bytes.HasPrefix(k, prefixMatch) || len(k) < len(prefixMatch)+1 {
		return "", id, false
	}
	rest := k[len(prefixMatch):]
	n := int(rest[0])
	if n == 0 || len(rest) != 1+n+idLen {
		return "", id, false
	}
	copy(id[:], rest[1+n:])
	return string(rest[1 : 1+n]), id, true
}

// parseIDKey returns the id of a key made of prefix and an id (document
// state and record keys).
func parseIDKey(prefix, k []byte) (docID, bool) {
	var id docID
	if len(k) != len(prefix)+idLen || !bytes.HasPrefix(k, prefix) {
		return id, false
	}
	copy(id[:], k[len(prefix):])
	return id, true
}
