package overlay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/overlay/pb"
)

// Serving AUDIT: a coordinator, or the deputy of one, checks the evidence
// and the delegation, has the page re-fetched, records the outcome in the
// author's tally, and tells the author's other judges of a conviction.

// handleAudit judges one record of a subnet of a shard this node
// coordinates, or of the shard whose coordinator, the record's author, it
// stands in for as deputy (see the comment at the top of audit.go).
func (o *Overlay) handleAudit(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
	rq := req.GetAudit()
	c := o.coord
	if err := c.checkSnapshot(rq.GetSnapshot()); err != nil {
		return nil, err
	}
	a, err := addrFromWire(rq.GetAddr())
	if err != nil {
		return nil, err
	}
	u := rq.GetUrl()
	if u == "" || len(u) > maxURLLen {
		return nil, fmt.Errorf("%w: URL of %d bytes", ErrMalformed, len(u))
	}
	host := egress.HostOf(u)
	if host == "" {
		return nil, fmt.Errorf("%w: URL %q has no host", ErrMalformed, u)
	}
	if err := o.limit(o.auditLimit, from, "audit"); err != nil {
		return nil, err
	}
	id := o.tree.SmallestNonUnary(a)
	ref := c.rangeShard(id)
	if len(rq.GetConviction()) > 0 {
		return o.takeConviction(ctx, from, ref, rq.GetConviction())
	}
	if o.cfg.evidence == nil {
		return nil, fmt.Errorf("%w: this node does not verify audit evidence", ErrUnavailable)
	}
	var sh *shard
	if !rq.GetDeputy() {
		if sh, err = c.ensureOwner(ctx, ref); err != nil {
			return nil, err
		}
	}
	claim, err := o.cfg.evidence.OpenEvidence(rq.GetEvidence(), u)
	if err != nil {
		if !errors.Is(err, ErrBadEvidence) {
			err = fmt.Errorf("%w: %v", ErrBadEvidence, err)
		}
		o.log.Debug("audit evidence refused", "peer", from, "url", u, "error", err)
		return nil, err
	}
	if claim.URL != u {
		return nil, fmt.Errorf("%w: the evidence is about %q", ErrBadEvidence, claim.URL)
	}
	if claim.Fingerprint == 0 || claim.Status < 200 || claim.Status > 299 {
		return nil, fmt.Errorf("%w: the record has no fingerprint to compare (status %d)", ErrMalformed, claim.Status)
	}
	if claim.Node == c.self {
		return nil, fmt.Errorf("%w: %s", ErrRecused, claim.Node)
	}
	book := tallies{c: c, sh: sh}
	if rq.GetDeputy() {
		if book, err = c.deputyFor(ctx, ref, claim.Node); err != nil {
			return nil, err
		}
		sh = book.sh
	}
	o.stats.audits.Add(1)
	v := &pb.AuditVerdict{Node: []byte(claim.Node), Deputy: book.deputy}
	// Convicted here: in this shard's tally, or in another shard this
	// node coordinates (or judged as a deputy).
	convicted := func(t *pb.AuditEntry) bool { return c.convictedAt(t, time.Now()) || c.convicted()[claim.Node] }
	answer := func(t *pb.AuditEntry) (*pb.Message, error) {
		v.Agreed, v.Disagreed = t.GetAgreed(), t.GetDisagreed()
		v.Convicted = convicted(t)
		m := newMsg(pb.Message_AUDIT_VERDICT)
		m.AuditVerdict = v
		return m, nil
	}
	tally, err := book.get(claim.Node)
	if err != nil {
		return nil, err
	}
	if convicted(tally) {
		v.Result = pb.AuditVerdict_INCONCLUSIVE // nothing fetched: the node is convicted already
		o.tellConvicted(ctx, book, claim.Node, rq, tally)
		return answer(tally)
	}
	_, d, ok, err := c.lookup(sh, o.tree.Range(id))
	if err != nil {
		return nil, err
	}
	if !ok || d.Orphaned || d.Node != claim.Node {
		v.Result = pb.AuditVerdict_NOT_DELEGATED
		return answer(tally)
	}
	if len(rq.GetPriors()) > maxAuditPriors {
		return nil, fmt.Errorf("%w: %d priors, at most %d", ErrTooLarge, len(rq.GetPriors()), maxAuditPriors)
	}
	if slices.Contains(tally.GetJudged(), urlHash(u)) {
		v.Result = pb.AuditVerdict_INCONCLUSIVE // judged before: counted once, not fetched again
	} else {
		v.Result, v.Pages = o.judge(ctx, sh, id, claim)
	}
	if v.Result == pb.AuditVerdict_AGREE || v.Result == pb.AuditVerdict_DISAGREE {
		if tally, err = c.recordAudit(ctx, book, claim.Node, host, v.Result == pb.AuditVerdict_AGREE, urlHash(u)); err != nil {
			return nil, err
		}
	}
	// Priors: the same node's records that disagreed elsewhere, each
	// judged here once, by this coordinator's own auditors.
	for _, pr := range rq.GetPriors() {
		if convicted(tally) || ctx.Err() != nil {
			break
		}
		pc, err := o.cfg.evidence.OpenEvidence(pr.GetEvidence(), pr.GetUrl())
		ph := egress.HostOf(pr.GetUrl())
		if err != nil || pc.Node != claim.Node || pc.URL != pr.GetUrl() || ph == "" || pc.Fingerprint == 0 ||
			pc.Status < 200 || pc.Status > 299 {
			o.log.Debug("audit prior refused", "peer", from, "url", pr.GetUrl(), "error", err)
			continue
		}
		uh := urlHash(pc.URL)
		if slices.Contains(tally.GetJudged(), uh) {
			continue
		}
		res, _ := o.judge(ctx, sh, id, pc)
		if res != pb.AuditVerdict_AGREE && res != pb.AuditVerdict_DISAGREE {
			continue
		}
		if tally, err = c.recordAudit(ctx, book, claim.Node, ph, res == pb.AuditVerdict_AGREE, uh); err != nil {
			return nil, err
		}
	}
	o.tellConvicted(ctx, book, claim.Node, rq, tally)
	return answer(tally)
}

// tellConvicted sends tally t, when it convicts author in a shard this
// node judges as author's deputy, to author, which coordinates the shard:
// the deputy cannot write the shard, and a coordinator running micra's
// code gives its own subnets up on its deputy's conviction
// (takeConviction). It runs at the conviction and at each later audit of
// the node (answered "convicted" without a fetch), so a lost message is
// sent again; a failure is logged.
func (o *Overlay) tellConvicted(ctx context.Context, book tallies, author peer.ID, rq *pb.Audit, t *pb.AuditEntry) {
	if !book.deputy || !o.coord.convictedAt(t, time.Now()) {
		return
	}
	raw, err := proto.Marshal(t)
	if err != nil {
		return
	}
	m := newMsg(pb.Message_AUDIT)
	m.Audit = &pb.Audit{Snapshot: rq.GetSnapshot(), Addr: rq.GetAddr(), Url: rq.GetUrl(), Conviction: raw}
	if _, err := o.request(ctx, author, auditSpec, m, pb.Message_AUDIT_VERDICT); err != nil {
		o.log.Debug("conviction not taken by the convicted coordinator", "peer", author, "error", err)
	}
}

// takeConviction takes the tally raw, with which this node's deputy in the
// shard ref (from: one of the shard's replicas) convicted this node, which
// coordinates the shard. Kept as a deputy tally about itself (until the
// conviction runs out), it puts this node among the convicted nodes of
// every shard it coordinates: their maintenance gives its own subnets
// away ("convicted") and decisions leave it out.
func (o *Overlay) takeConviction(ctx context.Context, from peer.ID, ref shardRef, raw []byte) (*pb.Message, error) {
	c := o.coord
	sh, err := c.ensureOwner(ctx, ref)
	if err != nil {
		return nil, err
	}
	if set := c.replicaSet(c.view(sh.key)); from == c.self || !slices.Contains(set, from) {
		return nil, fmt.Errorf("%w: %s is not among the shard's replicas", ErrForbidden, from)
	}
	var t pb.AuditEntry
	if err := proto.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("%w: conviction: %v", ErrMalformed, err)
	}
	now := time.Now()
	at := time.UnixMilli(t.GetConvictedMs())
	if string(t.GetPeer()) != string(c.self) || !c.convictedAt(&t, now) || at.After(now.Add(time.Minute)) {
		return nil, fmt.Errorf("%w: not a current conviction of this node", ErrMalformed)
	}
	if err := c.st.putDeputy(sh.key, c.self, raw, o.cfg.audit.Conviction-now.Sub(at)); err != nil {
		return nil, err
	}
	c.log.Warn("this node was convicted by audits, its deputy found: giving its subnets up", "deputy", from, "shard", sh.ref.String(),
		"agreed", t.GetAgreed(), "disagreed", t.GetDisagreed())
	c.convictions.invalidate()
	select {
	case c.convictQ <- struct{}{}:
	default:
	}
	m := newMsg(pb.Message_AUDIT_VERDICT)
	m.AuditVerdict = &pb.AuditVerdict{Result: pb.AuditVerdict_INCONCLUSIVE, Node: []byte(c.self), Convicted: true,
		Agreed: t.GetAgreed(), Disagreed: t.GetDisagreed()}
	return m, nil
}
