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

// auditFacts are what judgeAudit decides on, as the judge read them.
type auditFacts struct {
	convicted bool // the author is convicted here (auditJudging.convicted)
	delegated bool // the record's subnet is delegated to its author (read only when not convicted)
	judged    bool // the record's URL is among those the author's tally judged
	priors    int  // the number of priors the audit carries
}

// auditDecision is judgeAudit's decision: the result to answer, unless
// refetch, and whether the audit's priors are judged too.
type auditDecision struct {
	result  pb.AuditVerdict_Result
	refetch bool // have the record's page refetched (judge): its result is the answer
	priors  bool
}

// judgeAudit decides what an audit comes to on facts f. A convicted author
// is answered INCONCLUSIVE with nothing fetched; a record of a subnet not
// delegated to its author NOT_DELEGATED. An audit with more than
// maxAuditPriors priors is refused; a record judged before is counted
// once, not fetched again (INCONCLUSIVE), but its priors are judged; any
// other is refetched.
func judgeAudit(f auditFacts) (auditDecision, error) {
	switch {
	case f.convicted:
		return auditDecision{result: pb.AuditVerdict_INCONCLUSIVE}, nil
	case !f.delegated:
		return auditDecision{result: pb.AuditVerdict_NOT_DELEGATED}, nil
	case f.priors > maxAuditPriors:
		return auditDecision{}, fmt.Errorf("%w: %d priors, at most %d", ErrTooLarge, f.priors, maxAuditPriors)
	case f.judged:
		return auditDecision{result: pb.AuditVerdict_INCONCLUSIVE, priors: true}, nil
	}
	return auditDecision{refetch: true, priors: true}, nil
}

// conclusive reports whether an audit's result counts in its author's
// tally.
func conclusive(r pb.AuditVerdict_Result) bool {
	return r == pb.AuditVerdict_AGREE || r == pb.AuditVerdict_DISAGREE
}

// hasFingerprint reports whether a claim has a fingerprint to compare: a
// 2xx page.
func hasFingerprint(c Claim) bool { return c.Fingerprint != 0 && c.Status >= 200 && c.Status <= 299 }

// admitPrior reports whether prior pc, opened (with error err) from the
// evidence of u, is judged within an audit of author's record: author's
// record of u, of a URL with a host (returned), with a fingerprint to
// compare.
func admitPrior(pc Claim, err error, author peer.ID, u string) (host string, ok bool) {
	host = egress.HostOf(u)
	if err != nil || pc.Node != author || pc.URL != u || host == "" || !hasFingerprint(pc) {
		return "", false
	}
	return host, true
}

// handleAudit judges one record of a subnet of a shard this node
// coordinates, or of the shard whose coordinator, the record's author, it
// stands in for as deputy (see the comment at the top of audit.go).
func (o *Overlay) handleAudit(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
	rq := req.GetAudit()
	jc, err := o.openCase(rq.GetSnapshot(), rq.GetAddr(), rq.GetUrl())
	if err != nil {
		return nil, err
	}
	if err := o.limit(o.auditLimit, from, "audit"); err != nil {
		return nil, err
	}
	if len(rq.GetConviction()) > 0 {
		return o.takeConviction(ctx, from, jc.ref, rq.GetConviction())
	}
	if o.cfg.evidence == nil {
		return nil, fmt.Errorf("%w: this node does not verify audit evidence", ErrUnavailable)
	}
	c := o.coord
	var book tallies
	if !rq.GetDeputy() {
		// A node that does not coordinate the shard redirects the audit
		// before it opens the evidence.
		if book, err = c.judgeIn(ctx, jc.ref, "", false); err != nil {
			return nil, err
		}
	}
	claim, err := o.openClaim(from, rq.GetEvidence(), jc.url)
	if err != nil {
		return nil, err
	}
	if claim.Node == c.self {
		return nil, recused(claim.Node)
	}
	if rq.GetDeputy() {
		if book, err = c.judgeIn(ctx, jc.ref, claim.Node, true); err != nil {
			return nil, err
		}
	}
	o.stats.audits.Add(1)
	j := &auditJudging{o: o, book: book, jc: jc, claim: claim, rq: rq,
		v: &pb.AuditVerdict{Node: []byte(claim.Node), Deputy: book.deputy}}
	tally, err := book.get(claim.Node)
	if err != nil {
		return nil, err
	}
	f := auditFacts{convicted: j.convicted(tally), judged: slices.Contains(tally.GetJudged(), urlHash(jc.url)),
		priors: len(rq.GetPriors())}
	if !f.convicted {
		_, d, ok, err := c.lookup(book.sh, o.tree.Range(jc.id))
		if err != nil {
			return nil, err
		}
		f.delegated = ok && !d.Orphaned && d.Node == claim.Node
	}
	dec, err := judgeAudit(f)
	if err != nil {
		return nil, err
	}
	j.v.Result = dec.result
	if dec.refetch {
		j.v.Result, j.v.Pages = o.judge(ctx, book.sh, jc.id, claim)
	}
	if conclusive(j.v.Result) {
		if tally, err = c.recordAudit(ctx, book, claim.Node, jc.host, j.v.Result == pb.AuditVerdict_AGREE, urlHash(jc.url)); err != nil {
			return nil, err
		}
	}
	if dec.priors {
		if tally, err = j.judgePriors(ctx, from, tally); err != nil {
			return nil, err
		}
	}
	o.tellConvicted(ctx, book, claim.Node, rq, tally)
	return j.answer(tally), nil
}

// openClaim opens the evidence of an audit of u, sent by from, into the
// claim it holds: its author's record of u, with a fingerprint to compare.
func (o *Overlay) openClaim(from peer.ID, evidence []byte, u string) (Claim, error) {
	claim, err := o.cfg.evidence.OpenEvidence(evidence, u)
	if err != nil {
		if !errors.Is(err, ErrBadEvidence) {
			err = fmt.Errorf("%w: %v", ErrBadEvidence, err)
		}
		o.log.Debug("audit evidence refused", "peer", from, "url", u, "error", err)
		return Claim{}, err
	}
	if claim.URL != u {
		return Claim{}, fmt.Errorf("%w: the evidence is about %q", ErrBadEvidence, claim.URL)
	}
	if !hasFingerprint(claim) {
		return Claim{}, fmt.Errorf("%w: the record has no fingerprint to compare (status %d)", ErrMalformed, claim.Status)
	}
	return claim, nil
}

// auditJudging applies the decisions about the audit rq of claim, of case
// jc, in its books; v is the verdict it answers.
type auditJudging struct {
	o     *Overlay
	book  tallies
	jc    judgeCase
	claim Claim
	rq    *pb.Audit
	v     *pb.AuditVerdict
}

// convicted reports whether the claim's author is convicted here: by its
// tally t in this shard, or in another shard this node coordinates (or
// judged as a deputy).
func (j *auditJudging) convicted(t *pb.AuditEntry) bool {
	c := j.o.coord
	return c.convictedAt(t, time.Now()) || c.convicted()[j.claim.Node]
}

// answer returns v with the author's tally t.
func (j *auditJudging) answer(t *pb.AuditEntry) *pb.Message {
	j.v.Agreed, j.v.Disagreed = t.GetAgreed(), t.GetDisagreed()
	j.v.Convicted = j.convicted(t)
	m := newMsg(pb.Message_AUDIT_VERDICT)
	m.AuditVerdict = j.v
	return m
}

// judgePriors judges the audit's priors, the same author's records that
// disagreed elsewhere, each once, by this coordinator's own auditors, until
// the author is convicted, and returns its tally t after them.
func (j *auditJudging) judgePriors(ctx context.Context, from peer.ID, t *pb.AuditEntry) (*pb.AuditEntry, error) {
	o, author := j.o, j.claim.Node
	for _, pr := range j.rq.GetPriors() {
		if j.convicted(t) || ctx.Err() != nil {
			break
		}
		pc, err := o.cfg.evidence.OpenEvidence(pr.GetEvidence(), pr.GetUrl())
		host, ok := admitPrior(pc, err, author, pr.GetUrl())
		if !ok {
			o.log.Debug("audit prior refused", "peer", from, "url", pr.GetUrl(), "error", err)
			continue
		}
		uh := urlHash(pc.URL)
		if slices.Contains(t.GetJudged(), uh) {
			continue
		}
		res, _ := o.judge(ctx, j.book.sh, j.jc.id, pc)
		if !conclusive(res) {
			continue
		}
		if t, err = o.coord.recordAudit(ctx, j.book, author, host, res == pb.AuditVerdict_AGREE, uh); err != nil {
			return nil, err
		}
	}
	return t, nil
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
	sh, err := c.fromDeputy(ctx, ref, from)
	if err != nil {
		return nil, err
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
