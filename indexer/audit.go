package indexer

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/internal/check"
	"github.com/micra-net/micra/internal/kv"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/results"
	"github.com/micra-net/micra/results/pb"
)

// Audits of the records an indexer stores (RELIABILITY.md scenario 7). After a
// batch is stored, a sample of its records — chosen by a keyed hash the
// nodes cannot predict, AuditShare of them, every record of a node with a
// disagreement on record — is sent with the whole signed batch as evidence
// to the coordinator of each record's subnet (overlay.Audit), within
// AuditsPerHour per node. A verdict that says the node is convicted flags
// it: the index leaves its records out of search (index.Distrust), and the
// flag and every node's tally are kept in badger and served at
// /api/audits. A record that disagreed is kept, in badger too, as a prior
// for the node's later audits (at most 5 a node, 16 MiB in all), so that
// neither priors nor the evidence behind a flag are lost to a restart.

// auditJob is one record to have audited.
type auditJob struct {
	node     peer.ID
	url      string
	host     string
	evidence []byte
	size     int64 // what the job counts against maxAuditBytes
}

// Bounds of the audit queue.
const (
	auditQueue     = 64       // records waiting for an audit
	maxAuditBytes  = 32 << 20 // evidence held by waiting audits (a batch shared by several counts for each)
	maxDispBytes   = 16 << 20 // evidence of disputed records kept as priors
	maxDisputes    = 5        // disputed records kept per node: one audit's record and overlay's limit of 4 priors
	maxSpreadHosts = 256      // hosts of a flagged node's pages whose coordinators are told
	maxPriors      = 4        // overlay's limit of priors in one audit
	spreadEvery    = time.Minute
	auditWorkers   = 2
	maxAuditNodes  = 4096 // nodes with an hourly audit budget kept
	auditTimeout   = 2 * time.Minute
)

// AuditShare sets the share of stored records the indexer has audited
// (default 0.02; 0 switches audits off), and AuditsPerHour how many audits
// one node's records may take in an hour (default 120), suspects included.
func Audits(share float64, perHour int) Option {
	return func(c *config) error {
		if err := cmp.Or(check.Range("audit share", share, 0, 1), check.AtLeast("audits an hour", perHour, 1)); err != nil {
			return err
		}
		c.auditShare, c.auditPerHour = share, perHour
		return nil
	}
}

// FlagFor sets how long a node stays flagged after a coordinator's verdict
// convicted it (default 7 days, the coordinators' default conviction).
func FlagFor(d time.Duration) Option {
	return func(c *config) error { return check.Set(&c.flagFor, d, check.AtLeast("flag duration", d, time.Minute)) }
}

// auditor is the indexer's audit state.
type auditor struct {
	key   [32]byte // the sampling key, fresh each start
	queue chan auditJob

	mu       sync.Mutex
	bytes    int64
	budgets  map[peer.ID]*auditBudget
	suspect  map[peer.ID]bool // a disagreement on record (or flagged)
	disputes map[peer.ID][]overlay.AuditPrior
	dbytes   int64                       // evidence held by disputes
	spread   map[peer.ID]map[string]bool // subnets whose coordinator said a flagged node is convicted
	spreadQ  chan peer.ID                // a node was flagged: tell the coordinators of its subnets

	// tmu orders the read-modify-write of stored tallies.
	tmu sync.Mutex
}

type auditBudget struct {
	tokens float64
	at     time.Time
}

func newAuditor() (*auditor, error) {
	a := &auditor{queue: make(chan auditJob, auditQueue), budgets: map[peer.ID]*auditBudget{}, suspect: map[peer.ID]bool{},
		disputes: map[peer.ID][]overlay.AuditPrior{}, spread: map[peer.ID]map[string]bool{},
		spreadQ: make(chan peer.ID, 16)}
	if _, err := rand.Read(a.key[:]); err != nil {
		return nil, fmt.Errorf("audit sampling key: %w", err)
	}
	return a, nil
}

// loadAudits restores suspects and the distrusted nodes from the stored
// tallies, and the disputed records.
func (ix *Indexer) loadAudits() error {
	now := ix.cfg.now()
	var flagged []string
	err := ix.db.View(func(txn *badger.Txn) error {
		eachStored(ix, txn, auditPrefix(), parseAuditKey, "stored audit tally", func(node peer.ID, st *pb.AuditStats) {
			if st.GetDisagreed() > 0 {
				ix.aud.suspect[node] = true
			}
			if ix.flagged(st, now) {
				flagged = append(flagged, node.String())
			}
		})
		return nil
	})
	ix.x.Distrust(flagged...)
	if err != nil {
		return err
	}
	return ix.loadDisputes()
}

func (ix *Indexer) flagged(st *pb.AuditStats, now time.Time) bool {
	return st.GetFlaggedMs() != 0 && now.Sub(time.UnixMilli(st.GetFlaggedMs())) < ix.cfg.flagFor
}

// sampleAudits queues the audits of a stored batch's records.
func (ix *Indexer) sampleAudits(node peer.ID, digest [32]byte, auth results.SignedHeader, data []byte, recs []crawl.Record) {
	a := ix.aud
	if a == nil || ix.o == nil || ix.cfg.auditShare == 0 || len(data) > results.MaxEvidence-auth.Size()-64 {
		return
	}
	a.mu.Lock()
	suspect := a.suspect[node]
	a.mu.Unlock()
	var ev []byte
	for i := range recs {
		r := &recs[i]
		if r.Status < 200 || r.Status > 299 || r.Fingerprint == 0 || r.Change == crawl.ChangeGone {
			continue
		}
		if !suspect && !a.sampled(digest, i, ix.cfg.auditShare) {
			continue
		}
		host := ""
		if u, err := url.Parse(r.URL); err == nil {
			host = u.Hostname()
		}
		if host == "" || !a.spend(node, ix.cfg.auditPerHour, ix.cfg.now()) {
			continue
		}
		if ev == nil {
			var err error
			if ev, err = auth.Evidence(data); err != nil {
				ix.log.Warn("building audit evidence failed", "node", node, "error", err)
				return
			}
		}
		j := auditJob{node: node, url: r.URL, host: host, evidence: ev, size: int64(len(ev))}
		a.mu.Lock()
		room := a.bytes+j.size <= maxAuditBytes
		if room {
			a.bytes += j.size
		}
		a.mu.Unlock()
		if !room {
			ix.stats.auditsDropped.Add(1)
			continue
		}
		select {
		case a.queue <- j:
		default:
			a.release(j)
			ix.stats.auditsDropped.Add(1)
		}
	}
}

// sampled reports whether record i of the batch with digest is audited:
// HMAC-SHA256 under a key the nodes do not know, so that a node cannot
// tell which of its records will be checked.
func (a *auditor) sampled(digest [32]byte, i int, share float64) bool {
	if share >= 1 {
		return true
	}
	m := hmac.New(sha256.New, a.key[:])
	m.Write(digest[:])
	m.Write(binary.BigEndian.AppendUint64(nil, uint64(i)))
	v := binary.BigEndian.Uint64(m.Sum(nil))
	return float64(v) < share*(1<<64)
}

// spend takes one audit from node's hourly budget.
func (a *auditor) spend(node peer.ID, perHour int, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	b := a.budgets[node]
	if b == nil {
		if len(a.budgets) >= maxAuditNodes {
			for k, v := range a.budgets { // forget the full ones (idle nodes)
				if v.tokens+now.Sub(v.at).Hours()*float64(perHour) >= float64(perHour) {
					delete(a.budgets, k)
				}
			}
			if len(a.budgets) >= maxAuditNodes {
				return false
			}
		}
		b = &auditBudget{tokens: float64(perHour), at: now}
		a.budgets[node] = b
	}
	b.tokens = min(float64(perHour), b.tokens+now.Sub(b.at).Hours()*float64(perHour))
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// spreadLoop tells the coordinators of a flagged node's subnets, as soon
// as it is flagged and then every spreadEvery while it stays flagged, what
// convicted it elsewhere: its disputed records go to each of them as an
// audit, judged there afresh (a coordinator counts each URL once), until
// each says the node is convicted. Without this a coordinator that holds
// only sites the node published nothing about since it turned bad would
// never hear of it.
func (ix *Indexer) spreadLoop() {
	t := time.NewTicker(spreadEvery)
	defer t.Stop()
	for {
		var nodes []peer.ID
		select {
		case <-ix.ctx.Done():
			return
		case n := <-ix.aud.spreadQ:
			nodes = []peer.ID{n}
		case <-t.C:
			for _, na := range ix.Audited() {
				if na.Flagged {
					nodes = append(nodes, na.Node)
				}
			}
		}
		for _, n := range nodes {
			ix.spreadConviction(ix.ctx, n)
		}
	}
}

// spreadConviction sends node's disputed records to the coordinators of
// the subnets of the hosts of its stored pages (index.HostsOf) that have
// not yet said it is convicted.
func (ix *Indexer) spreadConviction(ctx context.Context, node peer.ID) {
	a := ix.aud
	hosts, err := ix.x.HostsOf(ctx, node.String(), maxSpreadHosts)
	if err != nil {
		ix.log.Debug("finding a flagged node's hosts failed", "node", node, "error", err)
		return
	}
	a.mu.Lock()
	ds := slices.Clone(a.disputes[node])
	done := a.spread[node]
	if done == nil {
		done = map[string]bool{}
		a.spread[node] = done
	}
	a.mu.Unlock()
	ix.log.Debug("telling coordinators of a conviction", "node", node, "hosts", len(hosts), "disputes", len(ds))
	if len(ds) == 0 {
		return // nothing to show
	}
	slices.Sort(hosts)
	for _, h := range hosts {
		if ctx.Err() != nil {
			return
		}
		// Every address: a host may sit in several subnets, and the node
		// holds the one its requests.Submit or crawler happened to resolve.
		addrs, err := ix.cfg.lookupAll(ctx, h)
		if err != nil {
			continue
		}
		for _, addr := range addrs[:min(len(addrs), 8)] {
			ix.tellCoordinator(ctx, node, h, addr, ds, done)
		}
	}
}

// tellCoordinator sends node's disputed records ds to the coordinator of
// addr's subnet unless it said node is convicted already (done).
func (ix *Indexer) tellCoordinator(ctx context.Context, node peer.ID, h string, addr netip.Addr, ds []overlay.AuditPrior, done map[string]bool) {
	a := ix.aud
	tree := ix.o.Tree()
	key := tree.Range(tree.SmallestNonUnary(addr)).String()
	a.mu.Lock()
	skip := done[key]
	a.mu.Unlock()
	if skip || !a.spend(node, ix.cfg.auditPerHour, ix.cfg.now()) {
		return
	}
	var v overlay.AuditVerdict
	var err error
	for attempt := range 3 { // within the coordinator's budget of audits per asker
		actx, cancel := context.WithTimeout(ctx, auditTimeout)
		v, err = ix.o.Audit(actx, overlay.AuditRequest{Addr: addr, URL: ds[0].URL, Evidence: ds[0].Evidence, Priors: ds[1:], Node: node})
		cancel()
		if !errors.Is(err, overlay.ErrOverloaded) {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(attempt+1) * time.Second):
		}
	}
	ix.stats.audits.Add(1)
	if err != nil {
		ix.log.Debug("telling a coordinator of a conviction failed", "node", node, "host", h, "error", err)
		return
	}
	ix.log.Debug("coordinator told of a conviction", "node", node, "host", h, "subnet", key, "coordinator", v.Coordinator,
		"result", v.Result.String(), "convicted", v.Convicted, "disagreed", v.Disagreed)
	if v.Convicted {
		a.mu.Lock()
		done[key] = true
		a.mu.Unlock()
	}
}

// dispute remembers a record that disagreed, as a prior for the node's
// next audits, and makes the node a suspect. Of a full list it drops the
// oldest record of the new one's host, or else the oldest: coordinators
// convict only on disagreements on several hosts, so the kept records
// span as many as they can.
//
// It returns the lists it changed, to store (saveDisputes).
func (a *auditor) dispute(j auditJob) map[peer.ID][]overlay.AuditPrior {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.suspect[j.node] = true
	ds := a.disputes[j.node]
	if slices.ContainsFunc(ds, func(p overlay.AuditPrior) bool { return p.URL == j.url }) {
		return nil
	}
	changed := map[peer.ID][]overlay.AuditPrior{}
	ds = append(ds, overlay.AuditPrior{URL: j.url, Evidence: j.evidence})
	a.dbytes += int64(len(j.evidence))
	if len(ds) > maxDisputes {
		drop := slices.IndexFunc(ds[:len(ds)-1], func(p overlay.AuditPrior) bool { return egress.HostOf(p.URL) == j.host })
		drop = max(drop, 0)
		a.dbytes -= int64(len(ds[drop].Evidence))
		ds = slices.Delete(ds, drop, drop+1)
	}
	a.disputes[j.node] = ds
	changed[j.node] = slices.Clone(ds)
	a.trim(j.node, changed)
	return changed
}

// trim drops other nodes' oldest disputed records than keep's while the
// evidence held is over its bound, noting the lists it changed in changed
// (when not nil). a.mu is held.
func (a *auditor) trim(keep peer.ID, changed map[peer.ID][]overlay.AuditPrior) {
	for n, old := range a.disputes {
		if a.dbytes <= maxDispBytes {
			break
		}
		if n != keep && len(old) > 0 {
			a.dbytes -= int64(len(old[0].Evidence))
			a.disputes[n] = old[1:]
			if len(old) == 1 {
				delete(a.disputes, n)
			}
			if changed != nil {
				changed[n] = slices.Clone(old[1:])
			}
		}
	}
}

// saveDisputes stores the disputed records of the nodes in changed (an
// empty list deletes the node's).
func (ix *Indexer) saveDisputes(changed map[peer.ID][]overlay.AuditPrior) {
	if len(changed) == 0 {
		return
	}
	err := ix.db.Update(func(txn *badger.Txn) error {
		for n, ds := range changed {
			if len(ds) == 0 {
				if err := txn.Delete(disputeKey(n)); err != nil {
					return err
				}
				continue
			}
			m := &pb.Disputes{}
			for _, d := range ds {
				m.Records = append(m.Records, &pb.Dispute{Url: d.URL, Evidence: d.Evidence})
			}
			b, err := proto.Marshal(m)
			if err != nil {
				return err
			}
			if err := txn.Set(disputeKey(n), b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		ix.log.Warn("storing disputed records failed; they are kept in memory", "nodes", len(changed), "error", err)
	}
}

// eachStored calls f with each node's message stored under prefix, whose
// keys parse gives the node of; a key that does not parse is skipped, and
// a value that does not decode is logged (what: the kind of value) and
// skipped.
func eachStored[T any, M interface {
	*T
	proto.Message
}](ix *Indexer, txn *badger.Txn, prefix []byte, parse func([]byte) (peer.ID, bool), what string, f func(peer.ID, M)) {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true})
	defer it.Close()
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		node, ok := parse(it.Item().Key())
		if !ok {
			continue
		}
		m := M(new(T))
		if err := it.Item().Value(func(v []byte) error { return proto.Unmarshal(v, m) }); err != nil {
			ix.log.Warn(what+" unreadable; ignored", "node", node, "error", err)
			continue
		}
		f(node, m)
	}
}

// loadDisputes restores the stored disputed records, within the bounds
// dispute keeps (a node's newest maxDisputes; maxDispBytes in all, nodes
// beyond it dropped), and makes their nodes suspects.
func (ix *Indexer) loadDisputes() error {
	a := ix.aud
	var over []peer.ID
	err := ix.db.View(func(txn *badger.Txn) error {
		eachStored(ix, txn, disputePrefix(), parseDisputeKey, "stored disputed records", func(node peer.ID, m *pb.Disputes) {
			recs := m.GetRecords()
			var ds []overlay.AuditPrior
			var size int64
			for _, d := range recs[max(len(recs)-maxDisputes, 0):] {
				if d.GetUrl() == "" || len(d.GetEvidence()) == 0 {
					continue
				}
				ds = append(ds, overlay.AuditPrior{URL: d.GetUrl(), Evidence: d.GetEvidence()})
				size += int64(len(d.GetEvidence()))
			}
			a.mu.Lock()
			fits := len(ds) > 0 && a.dbytes+size <= maxDispBytes && len(a.disputes) < maxAuditNodes
			if fits {
				a.disputes[node] = ds
				a.dbytes += size
				a.suspect[node] = true
			}
			a.mu.Unlock()
			if !fits {
				over = append(over, node)
			}
		})
		return nil
	})
	if err != nil {
		return err
	}
	drop := map[peer.ID][]overlay.AuditPrior{}
	for _, n := range over {
		drop[n] = nil
	}
	ix.saveDisputes(drop)
	return nil
}

// priors returns the disputed records of j's node to send with j (not j's
// own URL), as many as fit the audit frame with j's evidence.
func (a *auditor) priors(j auditJob) []overlay.AuditPrior {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []overlay.AuditPrior
	size := len(j.evidence) + len(j.url) + 8<<10
	for _, p := range a.disputes[j.node] {
		if p.URL == j.url || size+len(p.Evidence)+len(p.URL)+16 > results.MaxEvidence || len(out) == maxPriors {
			continue
		}
		size += len(p.Evidence) + len(p.URL) + 16
		out = append(out, p)
	}
	return out
}

func (a *auditor) release(j auditJob) {
	a.mu.Lock()
	a.bytes -= j.size
	a.mu.Unlock()
}

// auditWorker runs the queued audits.
func (ix *Indexer) auditWorker() {
	a := ix.aud
	for {
		var j auditJob
		select {
		case <-ix.ctx.Done():
			return
		case j = <-a.queue:
		}
		a.release(j)
		ix.runAudit(ix.ctx, j)
	}
}

// runAudit has one record audited and records the verdict.
func (ix *Indexer) runAudit(ctx context.Context, j auditJob) {
	ctx, cancel := context.WithTimeout(ctx, auditTimeout)
	defer cancel()
	ix.stats.audits.Add(1)
	addr, err := ix.cfg.resolve(ctx, j.host)
	var v overlay.AuditVerdict
	// A coordinator refuses audits beyond this indexer's budget
	// (OVERLOADED), or has no quorum for a moment (UNAVAILABLE): the
	// audit waits and tries again, twice.
	for attempt := 0; err == nil; attempt++ {
		v, err = ix.o.Audit(ctx, overlay.AuditRequest{Addr: addr, URL: j.url, Evidence: j.evidence, Priors: ix.aud.priors(j), Node: j.node})
		if err == nil || attempt == 2 || !(errors.Is(err, overlay.ErrOverloaded) || errors.Is(err, overlay.ErrUnavailable)) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt+1) * time.Second):
			err = nil
		}
	}
	if err != nil {
		if ctx.Err() != nil && ix.ctx.Err() != nil {
			return // shutting down
		}
		ix.log.Debug("audit failed", "node", j.node, "url", j.url, "error", err)
	} else if v.Node != j.node || v.Coordinator == j.node {
		// Overlay.Audit refuses both; a node's word about itself is
		// never a verdict.
		err = fmt.Errorf("verdict about %s by %s, for %s", v.Node, v.Coordinator, j.node)
		ix.log.Warn("audit verdict about another node, or by the node itself", "node", j.node, "url", j.url, "error", err)
	}
	ix.noteVerdict(j, v, err)
}

// noteVerdict updates node's stored tally, and flags it when the verdict
// says it is convicted.
func (ix *Indexer) noteVerdict(j auditJob, v overlay.AuditVerdict, verr error) {
	a := ix.aud
	a.tmu.Lock()
	defer a.tmu.Unlock()
	now := ix.cfg.now()
	st, err := ix.auditStats(j.node)
	if err != nil {
		ix.log.Warn("reading an audit tally failed", "node", j.node, "error", err)
		return
	}
	st.LastMs = now.UnixMilli()
	newFlag := false
	switch {
	case verr != nil:
		st.Failed++
	default:
		st.Audited++
		switch v.Result {
		case overlay.AuditAgree:
			st.Agreed++
		case overlay.AuditDisagree:
			st.Disagreed++
			ix.saveDisputes(a.dispute(j))
			ix.log.Info("audited record disagrees with other nodes' fetches", "node", j.node, "url", j.url,
				"coordinator", v.Coordinator, "tally_agreed", v.Agreed, "tally_disagreed", v.Disagreed)
		case overlay.AuditNotDelegated:
			st.NotDelegated++
		default:
			st.Inconclusive++
		}
		if v.Convicted && !ix.flagged(st, now) {
			st.FlaggedMs, st.FlaggedBy, newFlag = now.UnixMilli(), []byte(v.Coordinator), true
		}
	}
	b, err := proto.Marshal(st)
	if err == nil {
		err = ix.db.Update(func(txn *badger.Txn) error { return txn.Set(auditKey(j.node), b) })
	}
	if err != nil {
		ix.log.Warn("storing an audit tally failed", "node", j.node, "error", err)
	}
	if newFlag {
		ix.stats.flagged.Add(1)
		ix.log.Warn("node flagged: a coordinator convicted it by audits; its records leave search", "node", j.node,
			"coordinator", v.Coordinator, "agreed", st.Agreed, "disagreed", st.Disagreed)
		a.mu.Lock()
		a.suspect[j.node] = true
		a.mu.Unlock()
		ix.refreshDistrust()
		select {
		case a.spreadQ <- j.node:
		default: // the minute's round reaches it
		}
	}
}

// refreshDistrust hands the index the nodes flagged now.
func (ix *Indexer) refreshDistrust() {
	var nodes []string
	for _, na := range ix.Audited() {
		if na.Flagged {
			nodes = append(nodes, na.Node.String())
		}
	}
	ix.x.Distrust(nodes...)
}

func (ix *Indexer) auditStats(node peer.ID) (*pb.AuditStats, error) {
	st := &pb.AuditStats{}
	err := ix.db.View(func(txn *badger.Txn) error {
		_, err := kv.Proto(txn, auditKey(node), st)
		return err
	})
	return st, err
}

// NodeAudits is an indexer's account of the audits of one node's records.
type NodeAudits struct {
	Node         peer.ID   `json:"node"`
	Audited      uint64    `json:"audited"`
	Agreed       uint64    `json:"agreed"`
	Disagreed    uint64    `json:"disagreed"`
	Inconclusive uint64    `json:"inconclusive"`
	NotDelegated uint64    `json:"not_delegated"`
	Failed       uint64    `json:"failed"`
	Flagged      bool      `json:"flagged"` // its records are out of search
	FlaggedAt    time.Time `json:"flagged_at,omitzero"`
	FlaggedBy    peer.ID   `json:"flagged_by,omitempty"` // the coordinator whose verdict convicted it
	Last         time.Time `json:"last"`
	// DisputedHosts are the hosts of its disputed records kept as priors
	// (at most 5): coordinators convict only on disagreements on two
	// hosts or more, so a node disputed on one host is not flagged.
	DisputedHosts []string `json:"disputed_hosts,omitempty"`
}

// Audited returns the indexer's audit tallies, by node id, at most 4096.
func (ix *Indexer) Audited() []NodeAudits {
	now := ix.cfg.now()
	var out []NodeAudits
	_ = ix.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: auditPrefix(), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid() && len(out) < maxAuditNodes; it.Next() {
			node, ok := parseAuditKey(it.Item().Key())
			if !ok {
				continue
			}
			var st pb.AuditStats
			if it.Item().Value(func(v []byte) error { return proto.Unmarshal(v, &st) }) != nil {
				continue
			}
			na := NodeAudits{Node: node, Audited: st.GetAudited(), Agreed: st.GetAgreed(), Disagreed: st.GetDisagreed(),
				Inconclusive: st.GetInconclusive(), NotDelegated: st.GetNotDelegated(), Failed: st.GetFailed(),
				Flagged: ix.flagged(&st, now), Last: time.UnixMilli(st.GetLastMs()).UTC()}
			if st.GetFlaggedMs() != 0 {
				na.FlaggedAt = time.UnixMilli(st.GetFlaggedMs()).UTC()
				na.FlaggedBy, _ = peer.IDFromBytes(st.GetFlaggedBy())
			}
			out = append(out, na)
		}
		return nil
	})
	slices.SortFunc(out, func(a, b NodeAudits) int { return strings.Compare(string(a.Node), string(b.Node)) })
	ix.aud.mu.Lock()
	for i := range out {
		for _, d := range ix.aud.disputes[out[i].Node] {
			if h := egress.HostOf(d.URL); h != "" && !slices.Contains(out[i].DisputedHosts, h) {
				out[i].DisputedHosts = append(out[i].DisputedHosts, h)
			}
		}
	}
	ix.aud.mu.Unlock()
	return out
}
