package overlay

import (
	"crypto/sha256"
	"encoding/binary"
	"sync"
)

// sigMemo remembers the record signatures verified lately, so that a
// record seen again (a block shard's answer holds hundreds, asked again
// each time its 10 s cache ends; every replica and index holds the same
// records) is not verified again: an ed25519 verification costs about 50
// µs, a SHA-256 of a record about 1. Whether a signature verifies is a
// function of the record and the signature alone (the writer's key is in
// the record), so one memo serves every overlay in a process. The key
// hashes the record's length, the record and the signature, so no split of
// the same bytes into another record and signature shares it. It holds at
// most two generations of maxSigMemo/2 keys (about 1.5 MB): when the
// current one fills, it becomes the previous and the one before is
// dropped.
type sigMemo struct {
	mu        sync.Mutex
	cur, prev map[[32]byte]struct{}
}

const maxSigMemo = 1 << 15

var verifiedSigs sigMemo

func sigKey(rec, sig []byte) [32]byte {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(rec)))
	h.Write(n[:])
	h.Write(rec)
	h.Write(sig)
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// seen reports whether k was added lately.
func (m *sigMemo) seen(k [32]byte) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.cur[k]; ok {
		return true
	}
	_, ok := m.prev[k]
	return ok
}

// add remembers k, a verified signature's key.
func (m *sigMemo) add(k [32]byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.cur) >= maxSigMemo/2 {
		m.prev, m.cur = m.cur, nil
	}
	if m.cur == nil {
		m.cur = make(map[[32]byte]struct{}, maxSigMemo/2)
	}
	m.cur[k] = struct{}{}
}
