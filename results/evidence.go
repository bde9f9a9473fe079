package results

import (
	"crypto/sha256"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/results/pb"
)

// MaxEvidence is the largest evidence (a whole signed batch) an audit
// carries; an indexer does not audit records of larger batches. It leaves
// room for the rest of an AUDIT frame (overlay's limit is 4 MiB). A node's
// batches are far smaller by default: 256 KiB of records before
// compression.
const MaxEvidence = 4<<20 - 8<<10

// Size is the bytes the signed header adds to Evidence beside the data
// (and a few bytes of framing).
func (auth SignedHeader) Size() int { return len(auth.raw) + len(auth.sig) + len(auth.pub) }

// Evidence builds the audit evidence of a verified batch: its signed
// header and all its data (OpenEvidence reads it).
func (auth SignedHeader) Evidence(data []byte) ([]byte, error) {
	return proto.Marshal(&pb.Evidence{Version: wireVersion, Header: auth.raw, Signature: auth.sig, PublicKey: auth.pub, Data: data})
}

// OpenEvidence implements overlay.EvidenceOpener: it verifies a signed
// result batch carried as audit evidence — the header's signature by the
// node it names, the data against the header's size and part hashes — then
// decodes the batch (crawl.DecodeBatch's caps) and returns what its record
// of url states. Every error wraps overlay.ErrBadEvidence. The header's
// creation time may lie in the past without bound (an audit may come late)
// but not in the future beyond the clock skew allowed.
func OpenEvidence(ev []byte, url string) (overlay.Claim, error) {
	bad := func(err error) (overlay.Claim, error) {
		return overlay.Claim{}, fmt.Errorf("%w: %w", overlay.ErrBadEvidence, err)
	}
	if len(ev) > MaxEvidence {
		return bad(fmt.Errorf("%w: evidence of %d bytes, limit %d", ErrMalformed, len(ev), MaxEvidence))
	}
	var e pb.Evidence
	if err := proto.Unmarshal(ev, &e); err != nil {
		return bad(fmt.Errorf("%w: %v", ErrMalformed, err))
	}
	if e.GetVersion() != wireVersion {
		return bad(fmt.Errorf("%w: %d", ErrUnsupportedVersion, e.GetVersion()))
	}
	node, h, err := openHeader(e.GetHeader(), e.GetSignature(), e.GetPublicKey(), time.Now())
	if err != nil {
		return bad(err)
	}
	data := e.GetData()
	if uint64(len(data)) != h.GetSize() {
		return bad(fmt.Errorf("%w: %d bytes of data, the header says %d", ErrMalformed, len(data), h.GetSize()))
	}
	ps := int(h.GetPartSize())
	for i, want := range h.GetPartHashes() {
		if sum := sha256.Sum256(data[i*ps : min(len(data), (i+1)*ps)]); string(sum[:]) != string(want) {
			return bad(fmt.Errorf("%w: part %d does not match its hash", ErrMalformed, i))
		}
	}
	recs, err := crawl.DecodeBatch(data)
	if err != nil {
		return bad(fmt.Errorf("%w: %w", ErrMalformed, err))
	}
	for i := range recs {
		if r := &recs[i]; r.URL == url {
			return overlay.Claim{Node: node, URL: r.URL, Status: r.Status, Fingerprint: r.Fingerprint, Time: r.Time}, nil
		}
	}
	return bad(fmt.Errorf("no record of %q among the batch's %d", url, len(recs)))
}

var _ overlay.EvidenceOpener = overlay.EvidenceOpenerFunc(OpenEvidence)
