package overlay

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

// The rules the two judgments of a subnet's node share: of a record it
// wrote (AUDIT, auditserve.go) and of a crawl request it left unanswered
// (WITHHELD, withheldserve.go). Each request names a page by a URL and an
// address of its host, in the snapshot this node serves (openCase). No
// node judges itself: a coordinator asked about itself recuses itself
// (recused), and the request goes to its deputy. The judge keeps its
// books (judgeIn) in the shard's replicated state when it coordinates the
// shard, in its own store as the deputy of the node judged, which
// coordinates it. A coordinator takes its deputy's verdict about itself (a
// conviction, a withholding confirmed) only from a replica of the shard
// (fromDeputy). The results both verdicts answer are named here too.

// judgeCase is what a judged request names: a page (url, of host), an
// address of its host, and the smallest subnet holding that address and
// the shard whose coordinator judges it.
type judgeCase struct {
	addr      netip.Addr
	url, host string
	id        subnet.ID
	ref       shardRef
}

// openCase decodes the fields every judged request carries: the snapshot
// (this node's), the address (4 or 16 bytes) and the URL (1 to maxURLLen
// bytes, with a host).
func (o *Overlay) openCase(snapshot, addr []byte, u string) (judgeCase, error) {
	if err := o.coord.checkSnapshot(snapshot); err != nil {
		return judgeCase{}, err
	}
	a, err := addrFromWire(addr)
	if err != nil {
		return judgeCase{}, err
	}
	if u == "" || len(u) > maxURLLen {
		return judgeCase{}, fmt.Errorf("%w: URL of %d bytes", ErrMalformed, len(u))
	}
	host := egress.HostOf(u)
	if host == "" {
		return judgeCase{}, fmt.Errorf("%w: URL %q has no host", ErrMalformed, u)
	}
	id := o.tree.SmallestNonUnary(a)
	return judgeCase{addr: a, url: u, host: host, id: id, ref: o.coord.rangeShard(id)}, nil
}

// recused is the answer of a coordinator asked to judge p, itself.
func recused(p peer.ID) error { return fmt.Errorf("%w: %s", ErrRecused, p) }

// judgeIn returns the books in which this node judges a request of shard
// ref: as the shard's coordinator, or, when the request came to it as a
// deputy, as the deputy of subject, the node judged (deputyFor).
func (c *coordinator) judgeIn(ctx context.Context, ref shardRef, subject peer.ID, deputy bool) (tallies, error) {
	if deputy {
		return c.deputyFor(ctx, ref, subject)
	}
	sh, err := c.ensureOwner(ctx, ref)
	return tallies{c: c, sh: sh}, err
}

// fromDeputy returns shard ref, which this node coordinates, when from,
// which sent this node a verdict about itself, is among the shard's
// replicas (its deputy is the nearest of them); else ErrForbidden.
func (c *coordinator) fromDeputy(ctx context.Context, ref shardRef, from peer.ID) (*shard, error) {
	sh, err := c.ensureOwner(ctx, ref)
	if err != nil {
		return nil, err
	}
	if set := c.replicaSet(c.view(sh.key)); from == c.self || !slices.Contains(set, from) {
		return nil, fmt.Errorf("%w: %s is not among the shard's replicas", ErrForbidden, from)
	}
	return sh, nil
}

// AuditResult is the outcome of one audit.
type AuditResult int

// WithheldResult is a coordinator's answer to a withholding notice.
type WithheldResult int

// Audit and withholding outcomes; the values are those of the wire.
const (
	AuditAgree        = AuditResult(pb.AuditVerdict_AGREE)         // an auditor's fetch matches the record
	AuditDisagree     = AuditResult(pb.AuditVerdict_DISAGREE)      // two auditors' fetches both differ from it
	AuditInconclusive = AuditResult(pb.AuditVerdict_INCONCLUSIVE)  // no auditor could fetch the page, or they differ
	AuditNotDelegated = AuditResult(pb.AuditVerdict_NOT_DELEGATED) // the subnet is not delegated to the record's author

	WithheldNoted       = WithheldResult(pb.WithheldVerdict_NOTED)       // ask again after Retry if still no record came
	WithheldTakenBack   = WithheldResult(pb.WithheldVerdict_TAKEN_BACK)  // the subnet was taken from the holder
	WithheldNotHolder   = WithheldResult(pb.WithheldVerdict_NOT_HOLDER)  // the subnet is not delegated to the holder
	WithheldUnconfirmed = WithheldResult(pb.WithheldVerdict_UNCONFIRMED) // no auditor could fetch the page
	WithheldConfirmed   = WithheldResult(pb.WithheldVerdict_CONFIRMED)   // the holder's deputy confirmed it
	WithheldTaken       = WithheldResult(pb.WithheldVerdict_TAKEN)       // the holder took the request of a refused notice
)

func (r AuditResult) String() string {
	return resultName("audit-result", pb.AuditVerdict_Result_name, int(r))
}

func (r WithheldResult) String() string {
	return resultName("withheld-result", pb.WithheldVerdict_Result_name, int(r))
}

// resultName names the value r of a verdict's result enum by its wire name
// in names, lower case with hyphens ("TAKEN_BACK" is "taken-back"), and a
// value the wire does not name, or its UNKNOWN (0), as kind(r).
func resultName(kind string, names map[int32]string, r int) string {
	if n, ok := names[int32(r)]; ok && r != 0 && r == int(int32(r)) {
		return strings.ToLower(strings.ReplaceAll(n, "_", "-"))
	}
	return fmt.Sprintf("%s(%d)", kind, r)
}

// orDefault sets *v to d when it is the zero value (a config field left
// unset).
func orDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}
