package overlay

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/bits"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

// Audits of volunteers' results (RELIABILITY.md scenario 7).
//
// Indexers sample the records they store and send each sampled record, with
// its author's signed batch as evidence, to the coordinator of the record's
// subnet (AUDIT). The coordinator verifies the evidence (EvidenceOpener),
// checks that the subnet is delegated to the author, and has the page
// fetched afresh (REFETCH) by the nodes nearest to the subnet after the
// author — by the probe results its shard stores, so the auditor is the
// subnet's second-best node — comparing fingerprints: within Tolerance bits
// the record agrees; beyond, a second auditor must confirm the difference
// before it counts, so that one lying auditor cannot frame a node, and a
// page that is gone, moved or no longer parsed says nothing. The author's
// tally (AuditEntry) lives in the shard's replicated state. A node whose
// confirmed disagreements among its last Window conclusive audits reach
// MinDisagreements and Ratio of them, on MinHosts hosts, is convicted (a
// window, so that a node turning bad after long honest service is caught
// as fast as a new one): this coordinator keeps it out
// of every decision for Conviction, re-delegates its subnets in every shard
// it coordinates (with the liveness check, so a coordinator that takes a
// shard over does the same), refuses its own-subnet claims, and answers
// every later audit of it with convicted = true, which is how indexers learn
// to flag its batches. Trust: the coordinator judges only what it verified
// itself (the author's signature, its own auditors' fetches); a coordinator
// is trusted for its shard, as for every delegation.
//
// No node judges itself. A coordinator asked about its own
// record recuses itself (ErrRecused), and the asker (Audit) takes no
// verdict about a node from that node, whatever it answers: it sends the
// audit, marked deputy, to the peer nearest the shard key after the
// author, which judges it with its own auditors against its replica of the
// shard's state and keeps the author's tally in its own store (a replica
// cannot write the shard's state, and the author would not), so that a
// fabricator coordinating its own shard is convicted by its deputy: the
// deputy answers its audits as convicted and re-delegates its subnets in
// the shards the deputy coordinates. Replicas refuse a coordinator's write
// of its own tally. Auditors are independent of the author and of each
// other by place (place.go): one in the author's /24, /48 or AS is not
// counted, and the second disagreement must come from another place than
// the first.

// AuditConfig sets how audits judge and convict. Zero fields take the
// defaults named.
type AuditConfig struct {
	// Tolerance is the largest fingerprint distance, in bits of 64, at
	// which a fresh fetch agrees with a record. Default 6: on the emulated
	// Internet (crawl.TestFingerprintDistances) a page refetched in the
	// same version is 0 bits off (counters and clocks do not count), after
	// a substantive change 30 days later within 6 bits for 93 % of pages,
	// while another page of the same site is within 6 bits 1 % of the time
	// and pages of other sites never (median 27). Audits come minutes
	// after the crawl, when nearly every page is in the same version.
	Tolerance int
	// MinDisagreements is the number of confirmed disagreements among a
	// node's last Window conclusive audits that convicts it. Default 3.
	MinDisagreements int
	// Window is the number of a node's latest conclusive audits that
	// MinDisagreements and Ratio look at, at most 64. Default 32.
	Window int
	// MinHosts is the number of distinct hosts those disagreements must
	// span, so that one site serving each address its own page cannot
	// convict the honest node that crawls it. Default 2.
	MinHosts int
	// Ratio is the share of those audits that must disagree. Default 0.09:
	// three disagreements in a full window of 32.
	Ratio float64
	// Conviction is how long a convicted node stays out of this
	// coordinator's decisions; its tally starts afresh after it. Default
	// 7 days.
	Conviction time.Duration
	// AuditRate and AuditBurst bound the audits one peer may ask for (per
	// second, at once); RefetchRate and RefetchBurst the refetches.
	// Defaults 2 and 32; 1 and 16.
	AuditRate, RefetchRate   float64
	AuditBurst, RefetchBurst int
}

func (a AuditConfig) withDefaults() AuditConfig {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&a.Tolerance, 6)
	def(&a.MinDisagreements, 3)
	def(&a.MinHosts, 2)
	def(&a.Window, 32)
	def(&a.AuditBurst, 32)
	def(&a.RefetchBurst, 16)
	if a.Ratio == 0 {
		a.Ratio = 0.09
	}
	if a.Conviction == 0 {
		a.Conviction = 7 * 24 * time.Hour
	}
	if a.AuditRate == 0 {
		a.AuditRate = 2
	}
	if a.RefetchRate == 0 {
		a.RefetchRate = 1
	}
	return a
}

func (a AuditConfig) validate() error {
	switch {
	case a.Tolerance < 0 || a.Tolerance >= 32:
		return fmt.Errorf("audits: tolerance %d is not in [0, 32)", a.Tolerance)
	case a.MinDisagreements < 1 || a.MinHosts < 1 || a.MinHosts > maxAuditHosts || a.Window < a.MinDisagreements || a.Window > 64:
		return fmt.Errorf("audits: need at least one disagreement on 1..%d hosts in a window of them up to 64", maxAuditHosts)
	case a.Ratio <= 0 || a.Ratio > 1:
		return fmt.Errorf("audits: ratio %g is not in (0, 1]", a.Ratio)
	case a.Conviction < time.Minute:
		return fmt.Errorf("audits: conviction of %v is shorter than a minute", a.Conviction)
	case a.AuditRate <= 0 || a.RefetchRate <= 0 || a.AuditBurst < 1 || a.RefetchBurst < 1:
		return errors.New("audits: rates must be positive and bursts at least 1")
	}
	return nil
}

// Audits sets how this node judges audits of the shards it coordinates.
func Audits(a AuditConfig) Option {
	return func(c *config) error {
		a = a.withDefaults()
		if err := a.validate(); err != nil {
			return err
		}
		c.audit = a
		return nil
	}
}

// WithEvidenceOpener sets what verifies audit evidence. Without one, this
// node refuses audits of the shards it coordinates with ErrUnavailable.
func WithEvidenceOpener(e EvidenceOpener) Option {
	return func(c *config) error { c.evidence = e; return nil }
}

// WithRefetcher sets what fetches pages afresh for audits. Without one,
// refetch requests are refused with ErrUnavailable and the node is never
// asked to audit.
func WithRefetcher(r Refetcher) Option {
	return func(c *config) error { c.refetcher = r; return nil }
}

const (
	maxAuditHosts    = 16 // distinct hosts kept in a tally
	maxAuditJudged   = 64 // URLs of priors judged kept in a tally
	maxAuditors      = 4  // refetches one audit asks for, at most
	maxAuditPriors   = 4  // priors one audit carries, at most
	convictionsCache = 2 * time.Second
)

// AuditResult is the outcome of one audit.
type AuditResult int

// Audit outcomes; the values are those of the wire.
const (
	AuditAgree        = AuditResult(pb.AuditVerdict_AGREE)
	AuditDisagree     = AuditResult(pb.AuditVerdict_DISAGREE)
	AuditInconclusive = AuditResult(pb.AuditVerdict_INCONCLUSIVE)
	AuditNotDelegated = AuditResult(pb.AuditVerdict_NOT_DELEGATED)
)

func (r AuditResult) String() string {
	switch r {
	case AuditAgree:
		return "agree"
	case AuditDisagree:
		return "disagree"
	case AuditInconclusive:
		return "inconclusive"
	case AuditNotDelegated:
		return "not-delegated"
	}
	return fmt.Sprintf("audit-result(%d)", int(r))
}

// AuditRequest asks for one record to be audited.
type AuditRequest struct {
	Addr     netip.Addr // an address of the URL's host: names the subnet, hence the coordinator
	URL      string     // the record's URL
	Evidence []byte     // the author's signed statement (results.Evidence)
	// Priors are records of the same author that disagreed at other
	// coordinators (at most 4): the coordinator judges them afresh, once
	// each, so that one holding few of the author's sites can convict it
	// on its own judgement. Together with Evidence they must fit the
	// audit protocol's 4 MiB frame.
	Priors []AuditPrior
	// Node is the record's author as the asker knows it (optional; the
	// verdict's otherwise). No verdict about it is taken from it: when
	// it answers as the coordinator, whatever it says, its deputy is
	// asked instead, and a verdict about another node is refused.
	Node peer.ID
}

// AuditPrior is an earlier disputed record: its URL and evidence.
type AuditPrior struct {
	URL      string
	Evidence []byte
}

// AuditPage is what one auditor saw.
type AuditPage struct {
	Peer peer.ID
	Page
	Distance int    // bits differing from the record's fingerprint; -1 when not compared
	Err      string // why the auditor could not fetch the page
}

// AuditVerdict is a coordinator's answer to an audit.
type AuditVerdict struct {
	Result      AuditResult
	Node        peer.ID // the record's author
	Pages       []AuditPage
	Agreed      int  // the author's tally at the coordinator
	Disagreed   int  //
	Convicted   bool // the author is convicted at the coordinator
	Coordinator peer.ID
	// Deputy: the author coordinates the shard, and Coordinator, the
	// next peer nearest the shard key, judged in its stead.
	Deputy bool
}

// Audit has the record the evidence holds for r.URL checked by the
// coordinator of the subnet of r.Addr, which answers with its verdict
// (after up to four refetches by other nodes: up to a minute and a half).
func (o *Overlay) Audit(ctx context.Context, r AuditRequest) (AuditVerdict, error) {
	size := len(r.Evidence) + len(r.URL)
	for _, p := range r.Priors {
		size += len(p.Evidence) + len(p.URL) + 16
		if p.URL == "" || len(p.URL) > maxURLLen || len(p.Evidence) == 0 {
			return AuditVerdict{}, fmt.Errorf("audit: %w: a prior's URL or evidence", ErrMalformed)
		}
	}
	if !r.Addr.IsValid() || r.URL == "" || len(r.URL) > maxURLLen || len(r.Evidence) == 0 || len(r.Priors) > maxAuditPriors ||
		size > maxAuditMsg-256 {
		return AuditVerdict{}, fmt.Errorf("audit: %w: address, URL, priors or evidence size (%d bytes)", ErrMalformed, size)
	}
	req := newMsg(pb.Message_AUDIT)
	req.Audit = &pb.Audit{Snapshot: o.sid[:], Addr: addrBytes(r.Addr), Url: r.URL, Evidence: r.Evidence}
	for _, p := range r.Priors {
		req.Audit.Priors = append(req.Audit.Priors, &pb.AuditPrior{Url: p.URL, Evidence: p.Evidence})
	}
	ref := o.coord.rangeShard(o.tree.SmallestNonUnary(r.Addr))
	resp, from, err := o.askCoordinatorFrom(ctx, auditSpec, ref, req, pb.Message_AUDIT_VERDICT)
	author := r.Node
	if author == "" && err == nil {
		author, _ = peer.IDFromBytes(resp.GetAuditVerdict().GetNode())
	}
	if author == "" && errors.Is(err, ErrRecused) {
		author = from
	}
	// No node judges itself: whatever the author answers as the
	// coordinator (an honest one recuses itself, a fabricator would
	// agree), its deputy judges.
	deputy := author != "" && from == author
	if deputy {
		req.Audit.Deputy = true
		resp, from, err = o.askDeputy(ctx, ref, author, req, pb.Message_AUDIT_VERDICT)
	}
	if err != nil {
		return AuditVerdict{}, fmt.Errorf("audit: %w", err)
	}
	v, err := verdictFromPB(resp.GetAuditVerdict())
	if err == nil && (v.Node == from || (r.Node != "" && v.Node != r.Node)) {
		err = fmt.Errorf("audit verdict: %w: about %s from %s", ErrMalformed, v.Node, from)
	}
	v.Coordinator, v.Deputy = from, deputy
	return v, err
}

// askDeputy sends an audit (or a withholding notice) of author, the coordinator of ref, to its
// deputy: the peer nearest ref's key after it, as this node sees them,
// following a redirect to a nearer one, never to author, and trying the
// next peer when one cannot be reached.
func (o *Overlay) askDeputy(ctx context.Context, ref shardRef, author peer.ID, req *pb.Message, want pb.Message_Type) (*pb.Message, peer.ID, error) {
	key := ref.key(o.sid)
	var queue []peer.ID
	for _, p := range o.coord.closestPeers(ctx, key, false) {
		if p != author && len(queue) < maxDeputyTries {
			queue = append(queue, p)
		}
	}
	tried := map[peer.ID]bool{author: true}
	err := fmt.Errorf("%w: no peer but the audited one near the shard", ErrNoPeers)
	for len(queue) > 0 && len(tried) <= maxDeputyTries {
		target := queue[0]
		queue = queue[1:]
		if tried[target] {
			continue
		}
		tried[target] = true
		var resp *pb.Message
		resp, err = o.askPeer(ctx, auditSpec, target, req, want, 0)
		if err == nil {
			return resp, target, nil
		}
		if ctx.Err() != nil {
			return nil, target, err
		}
		if next, perr := peer.IDFromBytes(resp.GetError().GetHint().GetId()); errors.Is(err, ErrNotCoordinator) && perr == nil {
			if addrs := hintAddrs(resp.GetError().GetHint()); len(addrs) > 0 && next != o.h.ID() {
				o.h.Peerstore().AddAddrs(next, addrs, peerstore.TempAddrTTL)
			}
			queue = append([]peer.ID{next}, queue...)
			continue
		}
		if isRemote(err) && !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrOverloaded) {
			return nil, target, err // the deputy's answer: bad evidence, a malformed request
		}
	}
	return nil, "", err
}

// maxDeputyTries bounds the peers askDeputy asks.
const maxDeputyTries = 3

func verdictFromPB(m *pb.AuditVerdict) (AuditVerdict, error) {
	node, err := peer.IDFromBytes(m.GetNode())
	if err != nil {
		return AuditVerdict{}, fmt.Errorf("audit verdict: %w: node id", ErrMalformed)
	}
	if len(m.GetPages()) > maxAuditors {
		return AuditVerdict{}, fmt.Errorf("audit verdict: %w: %d pages", ErrTooLarge, len(m.GetPages()))
	}
	v := AuditVerdict{Result: AuditResult(m.GetResult()), Node: node, Agreed: int(m.GetAgreed()),
		Disagreed: int(m.GetDisagreed()), Convicted: m.GetConvicted()}
	for _, p := range m.GetPages() {
		id, err := peer.IDFromBytes(p.GetPeer())
		if err != nil {
			return AuditVerdict{}, fmt.Errorf("audit verdict: %w: auditor id", ErrMalformed)
		}
		v.Pages = append(v.Pages, AuditPage{Peer: id, Page: pageFromPB(p), Distance: int(p.GetDistance()), Err: p.GetError()})
	}
	return v, nil
}

func pageFromPB(p *pb.Page) Page {
	return Page{URL: p.GetUrl(), FinalURL: p.GetFinalUrl(), Status: int(p.GetStatus()), Fingerprint: p.GetFingerprint(),
		At: time.UnixMilli(p.GetAtMs()), NoIndex: p.GetNoindex()}
}

func pageToPB(p Page) *pb.Page {
	return &pb.Page{Url: p.URL, FinalUrl: p.FinalURL, Status: uint32(max(p.Status, 0)), Fingerprint: p.Fingerprint,
		AtMs: p.At.UnixMilli(), Distance: -1, Noindex: p.NoIndex}
}

// limitAudit and limitRefetch refuse requests beyond p's budget.
func (o *Overlay) limitAudit(p peer.ID) error {
	if p == o.h.ID() || o.auditLimit.allow(p, 1) {
		return nil
	}
	return fmt.Errorf("%w: audit rate limit of %g a second reached", ErrOverloaded, o.auditLimit.rate)
}

func (o *Overlay) limitRefetch(p peer.ID) error {
	if p == o.h.ID() || o.refetchLimit.allow(p, 1) {
		return nil
	}
	return fmt.Errorf("%w: refetch rate limit of %g a second reached", ErrOverloaded, o.refetchLimit.rate)
}

// handleRefetch fetches a page afresh for an auditing coordinator, inside
// this node's probing windows.
func (o *Overlay) handleRefetch(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
	if o.cfg.refetcher == nil {
		return nil, fmt.Errorf("%w: this node does not refetch", ErrUnavailable)
	}
	u := req.GetRefetch().GetUrl()
	if u == "" || len(u) > maxURLLen {
		return nil, fmt.Errorf("%w: URL of %d bytes", ErrMalformed, len(u))
	}
	if err := o.limitRefetch(from); err != nil {
		return nil, err
	}
	pg, err := o.localRefetch(ctx, u)
	if err != nil {
		return nil, err
	}
	m := newMsg(pb.Message_PAGE)
	m.Page = pageToPB(pg)
	return m, nil
}

func (o *Overlay) localRefetch(ctx context.Context, u string) (Page, error) {
	if o.cfg.refetcher == nil {
		return Page{}, fmt.Errorf("%w: this node does not refetch", ErrUnavailable)
	}
	ctx, cancel := context.WithTimeout(ctx, auditDeadline/3)
	defer cancel()
	if err := o.waitWindow(ctx); err != nil {
		return Page{}, err
	}
	o.stats.refetches.Add(1)
	pg, err := o.cfg.refetcher.Refetch(ctx, u)
	if err != nil {
		return Page{}, fmt.Errorf("%w: %v", ErrFetchFailed, err)
	}
	return pg, nil
}

// refetch asks p to fetch u afresh.
func (o *Overlay) refetch(ctx context.Context, p peer.ID, u string) (Page, error) {
	if p == o.h.ID() {
		return o.localRefetch(ctx, u)
	}
	req := newMsg(pb.Message_REFETCH)
	req.Refetch = &pb.Refetch{Url: u}
	o.stats.requests.Add(1)
	resp, err := o.request(ctx, p, auditSpec, req, pb.Message_PAGE)
	if err != nil {
		return Page{}, err
	}
	return pageFromPB(resp.GetPage()), nil
}

// handleAudit judges one record of a subnet of a shard this node
// coordinates, or of the shard whose coordinator, the record's author, it
// stands in for as deputy (see the comment at the top of this file).
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
	host := hostOf(u)
	if host == "" {
		return nil, fmt.Errorf("%w: URL %q has no host", ErrMalformed, u)
	}
	if err := o.limitAudit(from); err != nil {
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
		ph := hostOf(pr.GetUrl())
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

// urlHash names a prior's URL in a tally's judged list.
func urlHash(u string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(u))
	return h.Sum64()
}

// judge has auditors near subnet id refetch the claimed page: the first
// usable fetch that agrees settles it, a disagreement needs a second from
// another place (place.go). An auditor in the author's place is not asked,
// or, when its place shows only once it is connected, not counted: one
// operator's nodes neither clear nor confirm each other.
func (o *Overlay) judge(ctx context.Context, sh *shard, id subnet.ID, claim Claim) (pb.AuditVerdict_Result, []*pb.Page) {
	var pages []*pb.Page
	author := o.placeOf(claim.Node)
	var first place // the place of the first auditor that disagreed
	disagreed := false
	for _, p := range o.coord.auditors(sh, id, claim) {
		if len(pages) == maxAuditors || ctx.Err() != nil {
			break
		}
		if pl := o.placeOf(p); pl.known() && pl.same(author) {
			continue
		}
		pg, err := o.refetch(ctx, p, claim.URL)
		pl := o.placeOf(p)
		m := pageToPB(pg)
		m.Peer = []byte(p)
		pages = append(pages, m)
		switch {
		case pl.same(author):
			m.Error = "not counted: the author's place (one /24, /48 or AS)"
			continue
		case err != nil:
			m.Error = truncate(err.Error(), 256)
			continue
		case pg.Status < 200 || pg.Status > 299 || pg.Fingerprint == 0:
			continue // gone, moved or no longer parsed since: says nothing
		}
		dist := distance(pg.Fingerprint, claim.Fingerprint)
		m.Distance = int32(dist)
		o.log.Debug("audit refetch", "url", claim.URL, "peer", claim.Node, "auditor", p, "distance", dist)
		agrees := dist <= o.cfg.audit.Tolerance
		switch {
		case agrees && !disagreed:
			return pb.AuditVerdict_AGREE, pages
		case agrees:
			// The auditors differ: one of them, or the page, is not
			// what it seems. Neither side is counted.
			o.log.Info("auditors differ", "url", claim.URL, "peer", claim.Node)
			return pb.AuditVerdict_INCONCLUSIVE, pages
		case disagreed && pl.same(first):
			m.Error = "not counted: the first disagreeing auditor's place (one /24, /48 or AS)"
			continue
		case disagreed:
			return pb.AuditVerdict_DISAGREE, pages
		}
		disagreed, first = true, pl
	}
	return pb.AuditVerdict_INCONCLUSIVE, pages
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func distance(a, b uint64) int {
	n := 0
	for x := a ^ b; x != 0; x &= x - 1 {
		n++
	}
	return n
}

// hostOf returns the lower-case host of a URL, "" when it has none.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Hostname())
}

// auditors lists the nodes to ask to refetch a page of subnet id, best
// first: the peers that may crawl and refetch, the claim's author left out,
// in the order of their stored probes of the subnet (the author's runners-
// up), then the others in an order that depends on the URL, so that
// audits of one subnet without probes spread over the peers.
func (c *coordinator) auditors(sh *shard, id subnet.ID, claim Claim) []peer.ID {
	e := &env{c: c, sh: sh, subnet: id}
	rtt := map[peer.ID]time.Duration{}
	for _, p := range e.Probes(id) {
		if p.RTT >= 0 {
			if old, ok := rtt[p.Peer]; !ok || p.RTT < old {
				rtt[p.Peer] = p.RTT
			}
		}
	}
	spread := func(p peer.ID) uint64 {
		h := fnv.New64a()
		h.Write([]byte(claim.URL))
		h.Write([]byte(p))
		return h.Sum64()
	}
	var out []peer.ID
	for _, pi := range e.Peers() {
		if pi.ID == claim.Node || (pi.ID == c.self && c.o.cfg.refetcher == nil) {
			continue
		}
		out = append(out, pi.ID)
	}
	slices.SortFunc(out, func(a, b peer.ID) int {
		ra, oka := rtt[a]
		rb, okb := rtt[b]
		switch {
		case oka && okb && ra != rb:
			return int(ra - rb)
		case oka != okb:
			if oka {
				return -1
			}
			return 1
		}
		sa, sb := spread(a), spread(b)
		switch {
		case sa < sb:
			return -1
		case sa > sb:
			return 1
		}
		return 0
	})
	return out
}

// tallies is where a judge keeps the tallies of a shard's audits: the
// shard's replicated state (AUDIT entries) when it coordinates the shard,
// its own store when it is the deputy of the coordinator, which no
// replica's state can hold (the coordinator writes it).
type tallies struct {
	c      *coordinator
	sh     *shard
	deputy bool
}

// get returns p's tally (empty when there is none).
func (b tallies) get(p peer.ID) (*pb.AuditEntry, error) {
	var raw []byte
	if b.deputy {
		v, err := b.c.st.getDeputy(b.sh.key, p)
		if err != nil || v == nil {
			return &pb.AuditEntry{Peer: []byte(p)}, err
		}
		raw = v
	} else {
		e, err := b.c.st.getEntry(b.sh.key, pb.Entry_AUDIT, []byte(p))
		if err != nil || e == nil {
			return &pb.AuditEntry{Peer: []byte(p)}, err
		}
		raw = e.GetValue()
	}
	var t pb.AuditEntry
	if err := proto.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("audit entry: %w", err)
	}
	return &t, nil
}

// put stores t: a write of the shard, replicated to a majority, or a
// deputy's own record, kept for twice the conviction (then the judgement
// it holds has run out).
func (b tallies) put(ctx context.Context, t *pb.AuditEntry) error {
	v, err := proto.Marshal(t)
	if err != nil {
		return err
	}
	if b.deputy {
		return b.c.st.putDeputy(b.sh.key, peer.ID(t.GetPeer()), v, 2*b.c.o.cfg.audit.Conviction)
	}
	_, err = b.c.write(ctx, b.sh, 1, func(int, uint64, uint64) (*pb.Entry, error) {
		return &pb.Entry{Kind: pb.Entry_AUDIT, Key: t.GetPeer(), Value: v}, nil
	})
	return err
}

// deputyFor returns the tallies with which this node judges an audit of
// author as its deputy in shard ref: author is nearer ref's key than this
// node (it coordinates the shard, or it would not have been passed over),
// and this node is the nearest peer after it. The shard's state is this
// node's replica of it: the delegation judged is the one the coordinator
// replicated. When author is not nearer the key than this node, there is
// no one to stand in for, and the audit is judged as by any coordinator.
func (c *coordinator) deputyFor(ctx context.Context, ref shardRef, author peer.ID) (tallies, error) {
	key := ref.key(c.sid)
	if !closer(author, c.self, key) {
		sh, err := c.ensureOwner(ctx, ref)
		return tallies{c: c, sh: sh}, err
	}
	for _, p := range c.view(key) {
		if p == author {
			continue
		}
		if p != c.self {
			return tallies{}, &notCoordinatorError{closer: c.addrInfo(p)}
		}
		break
	}
	sh, err := c.shard(ref)
	if err != nil {
		return tallies{}, err
	}
	return tallies{c: c, sh: sh, deputy: true}, nil
}

// convictedAt reports whether tally t convicts its node at now.
func (c *coordinator) convictedAt(t *pb.AuditEntry, now time.Time) bool {
	at := t.GetConvictedMs()
	return at != 0 && now.Sub(time.UnixMilli(at)) < c.o.cfg.audit.Conviction
}

// recordAudit adds one conclusive audit of p's record of a URL (FNV-64a
// uh) on host to p's tally in sh, convicting p when the tally says so, and
// returns the new tally. A URL the tally judged already (among its last
// 64) is not counted again.
func (c *coordinator) recordAudit(ctx context.Context, b tallies, p peer.ID, host string, agreed bool, uh uint64) (*pb.AuditEntry, error) {
	c.auditMu.Lock()
	defer c.auditMu.Unlock()
	t, err := b.get(p)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if at := t.GetConvictedMs(); at != 0 && !c.convictedAt(t, now) {
		t = &pb.AuditEntry{Peer: []byte(p)} // the conviction ran out: a fresh start
	}
	if slices.Contains(t.Judged, uh) {
		return t, nil // counted once: an asker replaying a record gains nothing
	}
	t.Judged = append(t.Judged, uh)
	if len(t.Judged) > maxAuditJudged {
		t.Judged = t.Judged[len(t.Judged)-maxAuditJudged:]
	}
	t.Recent <<= 1
	t.RecentN = min(t.RecentN+1, 64)
	if agreed {
		t.Agreed++
	} else {
		t.Disagreed++
		t.Recent |= 1
		if !slices.Contains(t.Hosts, host) {
			t.Hosts = append(t.Hosts, host)
			if len(t.Hosts) > maxAuditHosts {
				t.Hosts = t.Hosts[1:]
			}
		}
	}
	t.AtMs = now.UnixMilli()
	ac := c.o.cfg.audit
	n := min(int(t.RecentN), ac.Window)
	bad := bits.OnesCount64(t.Recent & (1<<n - 1))
	convicts := t.GetConvictedMs() == 0 && bad >= ac.MinDisagreements && len(t.Hosts) >= ac.MinHosts &&
		float64(bad) >= ac.Ratio*float64(n)
	if convicts {
		t.ConvictedMs = now.UnixMilli()
	}
	if err := b.put(ctx, t); err != nil {
		return nil, err
	}
	if convicts {
		c.o.stats.convictions.Add(1)
		c.log.Warn("node convicted by audits: its results disagree with other nodes' fetches", "peer", p,
			"agreed", t.Agreed, "disagreed", t.Disagreed, "hosts", strings.Join(t.Hosts, ","), "shard", b.sh.ref.String(),
			"deputy", b.deputy)
		c.convictions.invalidate()
		select {
		case c.convictQ <- struct{}{}:
		default: // a round is pending already
		}
	}
	return t, nil
}

// convictionLoop re-delegates the subnets of convicted nodes in every
// range shard this node coordinates as soon as a node is convicted, rather
// than at the next maintenance round (which does it too: see
// checkLiveness).
func (c *coordinator) convictionLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.convictQ:
		}
		for _, s := range c.heldShards() {
			s.mu.Lock()
			owned := s.owned
			s.mu.Unlock()
			if owned && s.ref.kind == pb.ShardRef_RANGE {
				c.checkLiveness(ctx, s)
			}
		}
	}
}

// convictionSet caches the nodes convicted in the shards this node
// coordinates.
type convictionSet struct {
	mu  sync.Mutex
	at  time.Time
	set map[peer.ID]bool
}

func (s *convictionSet) invalidate() {
	s.mu.Lock()
	s.at = time.Time{}
	s.mu.Unlock()
}

// convicted returns the nodes convicted, by audits, in any range shard this
// node coordinates (a shard taken over brings its tallies) or as the
// deputy of a shard's coordinator. The map must not be modified.
func (c *coordinator) convicted() map[peer.ID]bool {
	s := &c.convictions
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if now.Sub(s.at) < convictionsCache {
		return s.set
	}
	set := map[peer.ID]bool{}
	for _, sh := range c.heldShards() {
		sh.mu.Lock()
		owned := sh.owned
		sh.mu.Unlock()
		if !owned || sh.ref.kind != pb.ShardRef_RANGE {
			continue
		}
		_ = c.st.scan(sh.key, pb.Entry_AUDIT, func(e *pb.Entry) bool {
			var t pb.AuditEntry
			if proto.Unmarshal(e.GetValue(), &t) == nil && c.convictedAt(&t, now) {
				if p, err := peer.IDFromBytes(t.GetPeer()); err == nil {
					set[p] = true
				}
			}
			return len(set) < maxEnvList
		})
	}
	_ = c.st.scanDeputies(func(v []byte) bool {
		var t pb.AuditEntry
		if proto.Unmarshal(v, &t) == nil && c.convictedAt(&t, now) {
			if p, err := peer.IDFromBytes(t.GetPeer()); err == nil {
				set[p] = true
			}
		}
		return len(set) < maxEnvList
	})
	s.set, s.at = set, now
	return set
}

// Convicted reports the nodes this node, as a coordinator, convicted by
// audits (or took over convicted with a shard), for the dashboard.
func (o *Overlay) Convicted() []peer.ID {
	var out []peer.ID
	for p := range o.coord.convicted() {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// checkAuditEntry verifies a replicated audit entry.
func checkAuditEntry(e *pb.Entry) error {
	var t pb.AuditEntry
	if err := proto.Unmarshal(e.GetValue(), &t); err != nil {
		return fmt.Errorf("%w: audit entry: %v", ErrMalformed, err)
	}
	if string(t.GetPeer()) != string(e.GetKey()) || len(t.GetHosts()) > maxAuditHosts || len(t.GetJudged()) > maxAuditJudged {
		return fmt.Errorf("%w: audit entry of %d hosts and %d judged URLs, or not keyed by its peer", ErrMalformed, len(t.GetHosts()), len(t.GetJudged()))
	}
	if _, err := peer.IDFromBytes(t.GetPeer()); err != nil {
		return fmt.Errorf("%w: audit entry: %v", ErrMalformed, err)
	}
	return nil
}
