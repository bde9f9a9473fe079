package results

import (
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/results/pb"
	"github.com/micra-net/micra/subnet"
)

// sealed is a signed batch: its header, signature and data.
type sealed struct {
	hdr    *pb.Header
	hdrRaw []byte
	sig    []byte
	pub    []byte // the node's public key when its id does not embed it
	digest [32]byte
	data   []byte
	stored []byte // the marshalled pb.Stored, once the outbox made it
}

// size is what the batch takes in the outbox: its data and its stored
// metadata (the cap counts these).
func (s *sealed) size() int64 { return int64(len(s.data) + len(s.stored)) }

// batchMeta is what the signer puts in a header besides the data.
type batchMeta struct {
	node          peer.ID
	seq           uint64
	snapshot      subnet.SnapshotID
	created       time.Time
	shard, shards uint32
	batch         crawl.Batch
}

// seal builds and signs the header of one batch, cutting its data into
// parts of at most partSize bytes.
func seal(sk crypto.PrivKey, pub []byte, m batchMeta, partSize int) (*sealed, error) {
	data := m.batch.Data
	if len(data) == 0 || len(data) > maxBatchData {
		return nil, fmt.Errorf("%w: batch of %d bytes", ErrMalformed, len(data))
	}
	n := (len(data) + partSize - 1) / partSize
	if n > maxParts {
		return nil, fmt.Errorf("%w: batch of %d bytes needs %d parts of %d bytes, at most %d", ErrMalformed, len(data), n, partSize, maxParts)
	}
	h := &pb.Header{
		Node:      []byte(m.node),
		Seq:       m.seq,
		Snapshot:  m.snapshot[:],
		CreatedMs: m.created.UnixMilli(),
		Shard:     m.shard,
		Shards:    m.shards,
		Records:   uint32(m.batch.Records),
		RawBytes:  uint64(max(m.batch.RawBytes, 0)),
		Size:      uint64(len(data)),
		PartSize:  uint32(partSize),
	}
	if !m.batch.Oldest.IsZero() {
		h.OldestMs = m.batch.Oldest.UnixMilli()
	}
	for i := range n {
		sum := sha256.Sum256(data[i*partSize : min(len(data), (i+1)*partSize)])
		h.PartHashes = append(h.PartHashes, sum[:])
	}
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("marshalling header: %w", err)
	}
	sig, err := sk.Sign(append([]byte(signPrefix), raw...))
	if err != nil {
		return nil, fmt.Errorf("signing batch: %w", err)
	}
	return &sealed{hdr: h, hdrRaw: raw, sig: sig, pub: pub, digest: sha256.Sum256(raw), data: data}, nil
}

// Seal signs b with sk as batch seq of node and returns its result
// messages, one per part of at most partSize bytes (PartSize of the
// message limit), as an outbox publishes them; nothing is stored. node
// need not be sk's: such a batch fails verification everywhere. It is for
// tools and tests; a node publishes through its Outbox.
func Seal(sk crypto.PrivKey, node peer.ID, seq uint64, sid subnet.SnapshotID, created time.Time, shard, shards uint32, b crawl.Batch, partSize int) ([][]byte, error) {
	pub, err := publicKeyField(sk)
	if err != nil {
		return nil, err
	}
	s, err := seal(sk, pub, batchMeta{node: node, seq: seq, snapshot: sid, created: created, shard: shard, shards: shards, batch: b}, partSize)
	if err != nil {
		return nil, err
	}
	return s.envelopes()
}

// PartSize is the most data bytes one result message of limit bytes
// carries beside its envelope.
func PartSize(limit int) int { return limit - messageOverhead }

// publicKeyField returns what an envelope carries of the key of id: nothing
// when the id embeds the key (Ed25519, secp256k1), else the marshalled key.
func publicKeyField(sk crypto.PrivKey) ([]byte, error) {
	id, err := peer.IDFromPrivateKey(sk)
	if err != nil {
		return nil, err
	}
	if _, err := id.ExtractPublicKey(); err == nil {
		return nil, nil
	}
	return crypto.MarshalPublicKey(sk.GetPublic())
}

// part returns the bytes of part i.
func (s *sealed) part(i int) []byte {
	ps := int(s.hdr.PartSize)
	return s.data[i*ps : min(len(s.data), (i+1)*ps)]
}

// envelopes returns the marshalled pubsub messages of the batch, one per
// part.
func (s *sealed) envelopes() ([][]byte, error) {
	out := make([][]byte, len(s.hdr.PartHashes))
	for i := range out {
		e := &pb.Envelope{Version: wireVersion, Header: s.hdrRaw, Signature: s.sig, PublicKey: s.pub, Part: uint32(i), Data: s.part(i)}
		b, err := proto.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("marshalling envelope: %w", err)
		}
		out[i] = b
	}
	return out, nil
}

// Part is one verified result message: a part of a signed batch whose
// header is authentic and whose bytes match the header's hash of that part.
type Part struct {
	Node   peer.ID
	Header *pb.Header
	Digest [32]byte // SHA-256 of the header: the batch's name in acknowledgements
	Index  int
	Data   []byte
	// Signed proves the batch to a third party (SignedHeader.Evidence).
	Signed SignedHeader
}

// Parts returns the number of parts of the batch.
func (p *Part) Parts() int { return len(p.Header.PartHashes) }

// Created returns the batch's creation time.
func (p *Part) Created() time.Time { return time.UnixMilli(p.Header.CreatedMs) }

// OpenEnvelope decodes and verifies one result message of at most limit
// bytes; now bounds the creation time (at most 10 min
// in the future). It accepts untrusted input.
func OpenEnvelope(data []byte, limit int, now time.Time) (*Part, error) {
	if len(data) > limit {
		return nil, fmt.Errorf("%w: message of %d bytes, limit %d", ErrMalformed, len(data), limit)
	}
	var e pb.Envelope
	if err := proto.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if e.GetVersion() != wireVersion {
		return nil, fmt.Errorf("%w: %d", ErrUnsupportedVersion, e.GetVersion())
	}
	node, h, err := openHeader(e.GetHeader(), e.GetSignature(), e.GetPublicKey(), now)
	if err != nil {
		return nil, err
	}
	i := int(e.GetPart())
	if i >= len(h.PartHashes) {
		return nil, fmt.Errorf("%w: part %d of %d", ErrMalformed, i, len(h.PartHashes))
	}
	ps := int(h.PartSize)
	want := min(int(h.Size)-i*ps, ps)
	if len(e.GetData()) != want {
		return nil, fmt.Errorf("%w: part %d is %d bytes, want %d", ErrMalformed, i, len(e.GetData()), want)
	}
	if sum := sha256.Sum256(e.GetData()); string(sum[:]) != string(h.PartHashes[i]) {
		return nil, fmt.Errorf("%w: part %d does not match its hash", ErrMalformed, i)
	}
	return &Part{Node: node, Header: h, Digest: sha256.Sum256(e.GetHeader()), Index: i, Data: e.GetData(),
		Signed: SignedHeader{raw: e.GetHeader(), sig: e.GetSignature(), pub: e.GetPublicKey()}}, nil
}

// SignedHeader is a batch's marshalled header with its signature and, when
// the node's id does not embed it, its public key: what proves the batch to
// a third party (Evidence). Its zero value proves nothing.
type SignedHeader struct{ raw, sig, pub []byte }

// openHeader verifies a batch header's signature by the node it names and
// checks its fields (checkHeader).
func openHeader(raw, sig, pub []byte, now time.Time) (peer.ID, *pb.Header, error) {
	if len(raw) == 0 || len(raw) > maxHeader {
		return "", nil, fmt.Errorf("%w: header of %d bytes", ErrMalformed, len(raw))
	}
	var h pb.Header
	if err := proto.Unmarshal(raw, &h); err != nil {
		return "", nil, fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	node, err := checkHeader(&h, now)
	if err != nil {
		return "", nil, err
	}
	pk, err := node.ExtractPublicKey()
	if err != nil {
		if len(pub) == 0 || len(pub) > 4096 {
			return "", nil, fmt.Errorf("%w: no public key for %s", ErrBadSignature, node)
		}
		if pk, err = crypto.UnmarshalPublicKey(pub); err != nil {
			return "", nil, fmt.Errorf("%w: public key: %v", ErrBadSignature, err)
		}
		if !node.MatchesPublicKey(pk) {
			return "", nil, fmt.Errorf("%w: public key is not %s's", ErrBadSignature, node)
		}
	}
	if len(sig) == 0 || len(sig) > 1024 {
		return "", nil, fmt.Errorf("%w: signature of %d bytes", ErrBadSignature, len(sig))
	}
	ok, err := pk.Verify(append([]byte(signPrefix), raw...), sig)
	if err != nil || !ok {
		return "", nil, fmt.Errorf("%w: by %s", ErrBadSignature, node)
	}
	return node, &h, nil
}

// checkHeader checks a header's fields and returns its node.
func checkHeader(h *pb.Header, now time.Time) (peer.ID, error) {
	node, err := peer.IDFromBytes(h.GetNode())
	if err != nil {
		return "", fmt.Errorf("%w: node id: %v", ErrMalformed, err)
	}
	switch {
	case h.GetSeq() == 0:
		return "", fmt.Errorf("%w: sequence number 0", ErrMalformed)
	case len(h.GetSnapshot()) != len(subnet.SnapshotID{}):
		return "", fmt.Errorf("%w: snapshot id of %d bytes", ErrMalformed, len(h.GetSnapshot()))
	case h.GetShards() < 1 || h.GetShards() > MaxShards || h.GetShard() >= h.GetShards():
		return "", fmt.Errorf("%w: shard %d of %d", ErrMalformed, h.GetShard(), h.GetShards())
	case h.GetRecords() < 1 || h.GetRecords() > maxBatchRecs:
		return "", fmt.Errorf("%w: %d records", ErrMalformed, h.GetRecords())
	case h.GetSize() < 1 || h.GetSize() > maxBatchData:
		return "", fmt.Errorf("%w: batch of %d bytes", ErrMalformed, h.GetSize())
	case h.GetPartSize() < 1<<10 || h.GetPartSize() > 64<<20:
		return "", fmt.Errorf("%w: part size %d", ErrMalformed, h.GetPartSize())
	}
	n := (h.GetSize() + uint64(h.GetPartSize()) - 1) / uint64(h.GetPartSize())
	if n > maxParts || uint64(len(h.GetPartHashes())) != n {
		return "", fmt.Errorf("%w: %d part hashes for %d bytes in parts of %d", ErrMalformed, len(h.GetPartHashes()), h.GetSize(), h.GetPartSize())
	}
	for _, ph := range h.GetPartHashes() {
		if len(ph) != sha256.Size {
			return "", fmt.Errorf("%w: part hash of %d bytes", ErrMalformed, len(ph))
		}
	}
	if c := time.UnixMilli(h.GetCreatedMs()); h.GetCreatedMs() <= 0 || c.After(now.Add(clockSkew)) {
		return "", fmt.Errorf("%w: created %v", ErrMalformed, c)
	}
	return node, nil
}
