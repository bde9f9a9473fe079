package overlay

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	record "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

// recordSigPrefix separates record signatures from every other use of a
// node's key.
const recordSigPrefix = "micra-record:"

// Delegation is one verified delegation: subnet is crawled by Node, as
// decided by Writer (the coordinator of the subnet's shard) under Epoch.
type Delegation struct {
	Subnet   subnet.Range
	Org      string
	Node     peer.ID
	Writer   peer.ID
	Epoch    uint64
	Seq      uint64
	Decided  time.Time
	URL      string     // the URL the delegation was decided for, if any
	Addr     netip.Addr // the address the delegation was decided for
	Orphaned bool       // the node stopped heartbeating; the subnet awaits re-delegation
	Own      bool       // Node claimed the subnet of its own address when it joined
	// CarriedFrom is the range of the previous snapshot whose delegation
	// was carried into this one (Carry); zero for a decision.
	CarriedFrom subnet.Range
}

// signRecord marshals and signs r with sk; r.Writer is set from sk.
func signRecord(sk crypto.PrivKey, r *pb.Record) (*pb.SignedRecord, error) {
	id, err := peer.IDFromPrivateKey(sk)
	if err != nil {
		return nil, err
	}
	r.Version = wireVersion
	r.Writer = []byte(id)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("marshalling record: %w", err)
	}
	sig, err := sk.Sign(append([]byte(recordSigPrefix), b...))
	if err != nil {
		return nil, fmt.Errorf("signing record: %w", err)
	}
	return &pb.SignedRecord{Record: b, Signature: sig}, nil
}

// openRecord verifies a signed record under snapshot sid and returns its
// content. It checks the size, the decoding, the version, the kind's
// required fields, and the signature by the writer's key, which must be
// embedded in the writer's peer id (Ed25519 ids are). Everything it reads is
// untrusted.
func openRecord(sid subnet.SnapshotID, sr *pb.SignedRecord) (*pb.Record, error) {
	if sr == nil || len(sr.GetRecord()) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrBadRecord)
	}
	if len(sr.GetRecord()) > maxRecordSize || len(sr.GetSignature()) > 1024 {
		return nil, fmt.Errorf("%w: %w", ErrBadRecord, ErrTooLarge)
	}
	if len(sr.GetSignature()) == 0 {
		return nil, fmt.Errorf("%w: unsigned", ErrBadRecord)
	}
	var r pb.Record
	if err := proto.Unmarshal(sr.GetRecord(), &r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRecord, err)
	}
	if r.GetVersion() != wireVersion {
		return nil, fmt.Errorf("%w: %w %d", ErrBadRecord, ErrUnsupportedVersion, r.GetVersion())
	}
	if !bytes.Equal(r.GetSnapshot(), sid[:]) {
		return nil, fmt.Errorf("%w: %w", ErrBadRecord, ErrWrongSnapshot)
	}
	writer, err := peer.IDFromBytes(r.GetWriter())
	if err != nil {
		return nil, fmt.Errorf("%w: writer: %v", ErrBadRecord, err)
	}
	switch r.GetKind() {
	case pb.Record_DELEGATION:
		if _, err := rangeFromPB(r.GetSubnet()); err != nil {
			return nil, fmt.Errorf("%w: subnet: %v", ErrBadRecord, err)
		}
		if _, err := peer.IDFromBytes(r.GetNode()); err != nil {
			return nil, fmt.Errorf("%w: node: %v", ErrBadRecord, err)
		}
		if len(r.GetUrl()) > maxURLLen || len(r.GetOrg()) > 256 || len(r.GetOrgEntries()) != 0 {
			return nil, fmt.Errorf("%w: oversize or misplaced fields", ErrBadRecord)
		}
		if len(r.GetAddr()) != 0 {
			if _, ok := netip.AddrFromSlice(r.GetAddr()); !ok {
				return nil, fmt.Errorf("%w: addr", ErrBadRecord)
			}
		}
	case pb.Record_ORG_INDEX:
		if r.GetOrg() == "" || len(r.GetOrg()) > 256 || len(r.GetOrgEntries()) > maxOrgEntries {
			return nil, fmt.Errorf("%w: organisation or entries", ErrBadRecord)
		}
		for _, e := range r.GetOrgEntries() {
			if _, err := rangeFromPB(e.GetSubnet()); err != nil {
				return nil, fmt.Errorf("%w: entry subnet: %v", ErrBadRecord, err)
			}
			if _, err := peer.IDFromBytes(e.GetNode()); err != nil {
				return nil, fmt.Errorf("%w: entry node: %v", ErrBadRecord, err)
			}
		}
	default:
		return nil, fmt.Errorf("%w: kind %d", ErrBadRecord, r.GetKind())
	}
	pk, err := writer.ExtractPublicKey()
	if err != nil {
		return nil, fmt.Errorf("%w: writer key not embedded in its id: %v", ErrBadRecord, err)
	}
	k := sigKey(sr.GetRecord(), sr.GetSignature())
	if verifiedSigs.seen(k) {
		return &r, nil
	}
	ok, err := pk.Verify(append([]byte(recordSigPrefix), sr.GetRecord()...), sr.GetSignature())
	if err != nil || !ok {
		return nil, fmt.Errorf("%w: bad signature", ErrBadRecord)
	}
	verifiedSigs.add(k)
	return &r, nil
}

// delegationFrom converts a verified DELEGATION record.
func delegationFrom(r *pb.Record) Delegation {
	rg, _ := rangeFromPB(r.GetSubnet())
	node, _ := peer.IDFromBytes(r.GetNode())
	writer, _ := peer.IDFromBytes(r.GetWriter())
	addr, _ := netip.AddrFromSlice(r.GetAddr())
	from, _ := rangeFromPB(r.GetCarriedFrom())
	return Delegation{
		Subnet: rg, Org: r.GetOrg(), Node: node, Writer: writer,
		Epoch: r.GetEpoch(), Seq: r.GetSeq(), Decided: time.UnixMilli(r.GetDecidedMs()),
		URL: r.GetUrl(), Addr: addr.Unmap(), Orphaned: r.GetOrphaned(), Own: r.GetOwn(),
		CarriedFrom: from,
	}
}

// newer reports whether record a supersedes b: a higher epoch, then a
// higher sequence number.
func newer(a, b *pb.Record) bool {
	if a.GetEpoch() != b.GetEpoch() {
		return a.GetEpoch() > b.GetEpoch()
	}
	return a.GetSeq() > b.GetSeq()
}

// rangeToPB encodes r with both ends as 16-byte addresses.
func rangeToPB(r subnet.Range) *pb.Range {
	s, e := r.Start.As16(), r.End.As16()
	return &pb.Range{Start: s[:], End: e[:]}
}

// rangeFromPB decodes and checks a wire range.
func rangeFromPB(p *pb.Range) (subnet.Range, error) {
	if p == nil || len(p.GetStart()) != 16 || len(p.GetEnd()) != 16 {
		return subnet.Range{}, errors.New("range ends must be 16 bytes")
	}
	s, _ := netip.AddrFromSlice(p.GetStart())
	e, _ := netip.AddrFromSlice(p.GetEnd())
	r := subnet.Range{Start: s.Unmap(), End: e.Unmap()}
	if !r.Valid() {
		return subnet.Range{}, errors.New("range ends differ in family or are reversed")
	}
	return r, nil
}

// rangeKey is the fixed 32-byte encoding of a range, used in keys.
func rangeKey(r subnet.Range) []byte {
	s, e := r.Start.As16(), r.End.As16()
	return append(s[:], e[:]...)
}

// DelegationKey returns the DHT key of the delegation record for r under
// snapshot sid: "/micra-delegation/<hex sid>/<hex start16 end16>".
func DelegationKey(sid subnet.SnapshotID, r subnet.Range) string {
	return "/" + DelegationNamespace + "/" + sid.String() + "/" + hex.EncodeToString(rangeKey(r))
}

// OrgKey returns the DHT key of the organisation index record for org
// under snapshot sid: "/micra-org/<hex sid>/<hex org>".
func OrgKey(sid subnet.SnapshotID, org string) string {
	return "/" + OrgNamespace + "/" + sid.String() + "/" + hex.EncodeToString([]byte(org))
}

// RecordValidator validates micra's DHT records of one namespace for one
// snapshot: the value must be a signed record of the namespace's kind, for
// exactly the key's subnet or organisation, which must exist in the tree;
// an organisation index must list ranges of that organisation, in order,
// each once. Inside an Overlay it also refuses records whose writer is
// farther from the record's shard than the peers the routing table knows
// (see plausibleWriter). It implements record.Validator; register it under
// its namespace.
type RecordValidator struct {
	tree *subnet.Tree
	kind pb.Record_Kind
	ns   string
	// writer, when set (by New, once the DHT's routing table exists),
	// refuses records whose writer cannot be the shard's coordinator as far
	// as this node's routing table can tell.
	writer *atomic.Pointer[writerCheck]
}

// writerCheck reports whether a verified record's writer may have written
// it.
type writerCheck func(r *pb.Record) bool

var _ record.Validator = RecordValidator{}

// NewRecordValidators returns the validators of micra's namespaces for
// tree's snapshot, keyed by namespace.
func NewRecordValidators(tree *subnet.Tree) map[string]RecordValidator {
	return newRecordValidators(tree, nil)
}

func newRecordValidators(tree *subnet.Tree, writer *atomic.Pointer[writerCheck]) map[string]RecordValidator {
	return map[string]RecordValidator{
		DelegationNamespace: {tree: tree, kind: pb.Record_DELEGATION, ns: DelegationNamespace, writer: writer},
		OrgNamespace:        {tree: tree, kind: pb.Record_ORG_INDEX, ns: OrgNamespace, writer: writer},
	}
}

// Validate checks value against key; see RecordValidator.
func (v RecordValidator) Validate(key string, value []byte) error {
	_, err := v.open(key, value)
	return err
}

func (v RecordValidator) open(key string, value []byte) (*pb.Record, error) {
	if len(value) > maxRecordSize+2048 {
		return nil, fmt.Errorf("%w: %w", ErrBadRecord, ErrTooLarge)
	}
	var sr pb.SignedRecord
	if err := proto.Unmarshal(value, &sr); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRecord, err)
	}
	r, err := openRecord(v.tree.ID(), &sr)
	if err != nil {
		return nil, err
	}
	if r.GetKind() != v.kind {
		return nil, fmt.Errorf("%w: kind %v in namespace %s", ErrBadRecord, r.GetKind(), v.ns)
	}
	var want string
	switch v.kind {
	case pb.Record_DELEGATION:
		rg, _ := rangeFromPB(r.GetSubnet())
		if _, ok := v.tree.Find(rg); !ok {
			return nil, fmt.Errorf("%w: subnet %s not in the snapshot", ErrBadRecord, rg)
		}
		want = DelegationKey(v.tree.ID(), rg)
	case pb.Record_ORG_INDEX:
		if len(v.tree.ByOrg(r.GetOrg())) == 0 {
			return nil, fmt.Errorf("%w: organisation not in the snapshot", ErrBadRecord)
		}
		// Entries name ranges of the organisation, each once, in range
		// order (so that a record's size bounds what it claims).
		var prev []byte
		for _, e := range r.GetOrgEntries() {
			rg, _ := rangeFromPB(e.GetSubnet()) // checked by openRecord
			id, ok := v.tree.Find(rg)
			if !ok || v.tree.Org(id) != r.GetOrg() {
				return nil, fmt.Errorf("%w: entry %s is not a range of the organisation", ErrBadRecord, rg)
			}
			k := rangeKey(rg)
			if prev != nil && bytes.Compare(prev, k) >= 0 {
				return nil, fmt.Errorf("%w: entries out of order or repeated", ErrBadRecord)
			}
			prev = k
		}
		want = OrgKey(v.tree.ID(), r.GetOrg())
	}
	if key != want {
		return nil, fmt.Errorf("%w: key does not match the record", ErrBadRecord)
	}
	if v.writer != nil {
		if chk := v.writer.Load(); chk != nil && !(*chk)(r) {
			return nil, fmt.Errorf("%w: writer is farther from the shard than the peers known", ErrBadRecord)
		}
	}
	return r, nil
}

// Select returns the index of the newest valid value: the highest epoch,
// then the highest sequence number; the first on ties.
func (v RecordValidator) Select(key string, values [][]byte) (int, error) {
	best, bestIdx := (*pb.Record)(nil), -1
	for i, val := range values {
		r, err := v.open(key, val)
		if err != nil {
			continue
		}
		if best == nil || newer(r, best) {
			best, bestIdx = r, i
		}
	}
	if bestIdx < 0 {
		return 0, fmt.Errorf("%w: no valid value for %s", ErrBadRecord, clipKey(key))
	}
	return bestIdx, nil
}

func clipKey(k string) string {
	if len(k) > 80 {
		return k[:77] + "..."
	}
	return strings.ToValidUTF8(k, "?")
}
