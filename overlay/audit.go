package overlay

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"

	"github.com/micra-net/micra/overlay/pb"
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
	orDefault(&a.Tolerance, 6)
	orDefault(&a.MinDisagreements, 3)
	orDefault(&a.MinHosts, 2)
	orDefault(&a.Window, 32)
	orDefault(&a.AuditBurst, 32)
	orDefault(&a.RefetchBurst, 16)
	orDefault(&a.Ratio, 0.09)
	orDefault(&a.Conviction, 7*24*time.Hour)
	orDefault(&a.AuditRate, 2)
	orDefault(&a.RefetchRate, 1)
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
