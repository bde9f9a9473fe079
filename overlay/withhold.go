package overlay

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

// Withholding. A node that holds a subnet but produces no
// records for it keeps the pages of its sites out of the index as surely as
// one that dies, while answering heartbeats. The indexers see it: a crawl
// request they submitted stays unanswered past their patience. The indexer
// then tells the coordinator of the page's subnet (WITHHELD, on the audit
// protocol), naming the node it sent the request to. The coordinator notes
// the first notice against the subnet's current node and answers NOTED with
// the time left of its grace (WithholdConfig.Grace); a notice carries the
// node's receipt of the request (receipt.go), without which it is refused,
// and one whose receipt is younger than the grace is not noted yet, so the
// node has had the request two graces before it is judged. The indexer
// asks again once the grace is over if still no record has come (a record
// that comes meanwhile ends it: the indexer does not ask again). A notice that comes
// again after the grace is judged: an auditor — a node that may refetch,
// not the holder and not of the holder's place (place.go) — fetches the
// page, so that a dead web server is not blamed on the volunteer. When the
// page is there, the subnet is taken back ("withheld", Stats.TakenBack) and
// goes to the next-best node, and the holder is kept out of it for
// WithholdConfig.Exclusion, in the shard's replicated state (WITHHELD
// entries: a replica that takes the shard over keeps the exclusion). It can
// win it again once the exclusion ends, or win others by delivering.
//
// A node can also refuse the requests: answer that it would not crawl
// them now (requests.ErrNotTaken), or let its crawl protocol fail. There
// is no receipt then. An indexer whose request a node refused through its
// patience sends a refused notice (WithheldNotice.Refused); the
// coordinator, which hears nothing but the indexer's word, sends the node
// the request itself (AskCrawl). The node takes it: TAKEN, with its
// receipt, which the indexer keeps as the request's, and from there it is
// judged as any. It refuses: the notice is noted, and one after the grace
// whose request the node refuses again is judged as above and the subnet
// taken back ("refused"). An honest node refuses a host's requests only
// while its queue for the host is full (crawl.Crawler.Promise); one whose
// queue stays full through the patience and the grace holds more than it
// crawls, and the subnet goes to the next-best node.
//
// No node judges itself: a coordinator that is the holder recuses itself
// (ErrRecused), and the asker (Withheld) takes no answer about a node from
// that node; it asks the holder's deputy, the peer nearest the shard key
// after it, which judges against its replica but cannot write the shard:
// it answers CONFIRMED, and the subnet stays where it is (left open).

// WithholdConfig sets how a coordinator judges withholding notices. Zero
// fields take the defaults named.
type WithholdConfig struct {
	// Grace is how long after the first notice about a node's page the
	// coordinator waits before judging a second one. Default 10 minutes.
	Grace time.Duration
	// Exclusion is how long a node that withheld a subnet is kept out of
	// it. Default 24 hours.
	Exclusion time.Duration
	// Rate and Burst bound the notices one peer may send (per second, at
	// once). Defaults 1 and 64.
	Rate  float64
	Burst int
}

// AskCrawlFunc sends node p a crawl request for link, asking for its
// receipt: it returns p's receipt (SignReceipt of link at at), or a nil
// receipt when p did not take it or could not be asked.
type AskCrawlFunc func(ctx context.Context, p peer.ID, link string) (receipt []byte, at time.Time)

// AskCrawl sets how this node, as a coordinator, sends a node the crawl
// request of a refused withholding notice (the node wires the results
// package's crawl protocol). Without it, refused notices are answered
// ErrUnavailable.
func AskCrawl(f AskCrawlFunc) Option {
	return func(c *config) error { c.askCrawl = f; return nil }
}

func (w WithholdConfig) withDefaults() WithholdConfig {
	if w.Grace == 0 {
		w.Grace = 10 * time.Minute
	}
	if w.Exclusion == 0 {
		w.Exclusion = 24 * time.Hour
	}
	if w.Rate == 0 {
		w.Rate = 1
	}
	if w.Burst == 0 {
		w.Burst = 64
	}
	return w
}

func (w WithholdConfig) validate() error {
	switch {
	case w.Grace < time.Second || w.Grace > 24*time.Hour:
		return fmt.Errorf("withholding: grace %v is not within a second and a day", w.Grace)
	case w.Exclusion < time.Minute:
		return fmt.Errorf("withholding: exclusion %v is shorter than a minute", w.Exclusion)
	case w.Rate <= 0 || w.Burst < 1:
		return errors.New("withholding: the rate must be positive and the burst at least 1")
	}
	return nil
}

// Withholding sets how this node judges withholding notices about the
// shards it coordinates.
func Withholding(w WithholdConfig) Option {
	return func(c *config) error {
		w = w.withDefaults()
		if err := w.validate(); err != nil {
			return err
		}
		c.withhold = w
		return nil
	}
}

// Bounds of the notices a coordinator keeps.
const (
	maxWithheldNotes    = 4096 // notices noted and not judged yet
	maxWithheldAuditors = 3    // auditors asked to fetch a page said withheld
	// withheldNoteLife is how long a notice waits for its second beyond
	// the grace; then a later one starts afresh.
	withheldNoteLife = 2 * time.Hour
)

// WithheldResult is a coordinator's answer to a withholding notice.
type WithheldResult int

// Withholding outcomes; the values are those of the wire.
const (
	WithheldNoted       = WithheldResult(pb.WithheldVerdict_NOTED)
	WithheldTakenBack   = WithheldResult(pb.WithheldVerdict_TAKEN_BACK)
	WithheldNotHolder   = WithheldResult(pb.WithheldVerdict_NOT_HOLDER)
	WithheldUnconfirmed = WithheldResult(pb.WithheldVerdict_UNCONFIRMED)
	WithheldConfirmed   = WithheldResult(pb.WithheldVerdict_CONFIRMED)
	WithheldTaken       = WithheldResult(pb.WithheldVerdict_TAKEN)
)

func (r WithheldResult) String() string {
	switch r {
	case WithheldNoted:
		return "noted"
	case WithheldTakenBack:
		return "taken-back"
	case WithheldNotHolder:
		return "not-holder"
	case WithheldUnconfirmed:
		return "unconfirmed"
	case WithheldConfirmed:
		return "confirmed"
	case WithheldTaken:
		return "taken"
	}
	return fmt.Sprintf("withheld-result(%d)", int(r))
}

// WithheldNotice says that a crawl request for URL, which Holder took at
// AskedAt, has had no record past the asker's patience. Receipt is
// Holder's receipt of it (SignReceipt of URL at AskedAt, by Holder's
// clock): a notice is judged only on it. A refused notice (Refused) says
// instead that Holder would not take the request through the asker's
// patience: it has no receipt, and the coordinator asks Holder itself.
type WithheldNotice struct {
	Addr    netip.Addr // an address of the URL's host: names the subnet, hence the coordinator
	URL     string
	Holder  peer.ID
	AskedAt time.Time
	Receipt []byte
	Refused bool
}

// WithheldVerdict is the answer to a notice.
type WithheldVerdict struct {
	Result      WithheldResult
	Holder      peer.ID
	Retry       time.Duration // WithheldNoted: ask again after it if still no record came
	Coordinator peer.ID
	Deputy      bool // judged by Holder's deputy: Holder coordinates the shard
	// WithheldTaken: Holder's receipt of the request, verified (SignReceipt
	// of the notice's URL at ReceiptAt).
	Receipt   []byte
	ReceiptAt time.Time
}

// Withheld tells the coordinator of the subnet of n.Addr that n.Holder left
// a crawl request unanswered (see the comment at the top of this file).
// When n.Holder answers as the coordinator, its deputy is asked instead.
func (o *Overlay) Withheld(ctx context.Context, n WithheldNotice) (WithheldVerdict, error) {
	if !n.Addr.IsValid() || n.URL == "" || len(n.URL) > maxURLLen || egress.HostOf(n.URL) == "" || n.Holder == "" {
		return WithheldVerdict{}, fmt.Errorf("withheld: %w: address, URL or holder", ErrMalformed)
	}
	if n.Holder == o.h.ID() {
		return WithheldVerdict{}, fmt.Errorf("withheld: %w: a notice about this node itself", ErrMalformed)
	}
	switch {
	case n.Refused && len(n.Receipt) > 0:
		return WithheldVerdict{}, fmt.Errorf("withheld: %w: a refused notice with a receipt", ErrMalformed)
	case !n.Refused:
		if err := VerifyReceipt(n.Holder, n.URL, n.AskedAt, n.Receipt); err != nil {
			return WithheldVerdict{}, fmt.Errorf("withheld: %w", err)
		}
	}
	req := newMsg(pb.Message_WITHHELD)
	req.Withheld = &pb.Withheld{Snapshot: o.sid[:], Addr: addrBytes(n.Addr), Url: n.URL, Holder: []byte(n.Holder),
		AskedMs: n.AskedAt.UnixMilli(), Receipt: n.Receipt, Refused: n.Refused}
	ref := o.coord.rangeShard(o.tree.SmallestNonUnary(n.Addr))
	resp, from, err := o.askCoordinatorFrom(ctx, auditSpec, ref, req, pb.Message_WITHHELD_VERDICT)
	deputy := from == n.Holder
	if deputy {
		req.Withheld.Deputy = true
		resp, from, err = o.askDeputy(ctx, ref, n.Holder, req, pb.Message_WITHHELD_VERDICT)
	}
	if err != nil {
		return WithheldVerdict{}, fmt.Errorf("withheld: %w", err)
	}
	v, err := withheldVerdictFromPB(resp.GetWithheldVerdict())
	switch {
	case err != nil:
	case v.Holder != n.Holder:
		err = fmt.Errorf("withheld verdict: %w: about %s from %s", ErrMalformed, v.Holder, from)
	case v.Result == WithheldTaken && !n.Refused:
		err = fmt.Errorf("withheld verdict: %w: taken, of a notice that was not refused, from %s", ErrMalformed, from)
	case v.Result == WithheldTaken:
		if verr := VerifyReceipt(n.Holder, n.URL, v.ReceiptAt, v.Receipt); verr != nil {
			err = fmt.Errorf("withheld verdict: taken, from %s: %w", from, verr)
		}
	}
	v.Coordinator, v.Deputy = from, deputy
	return v, err
}

// withheldVerdictFromPB decodes a verdict; the retry is capped at a day.
func withheldVerdictFromPB(m *pb.WithheldVerdict) (WithheldVerdict, error) {
	h, err := peer.IDFromBytes(m.GetHolder())
	if err != nil {
		return WithheldVerdict{}, fmt.Errorf("withheld verdict: %w: holder id", ErrMalformed)
	}
	if _, ok := pb.WithheldVerdict_Result_name[int32(m.GetResult())]; !ok || m.GetResult() == pb.WithheldVerdict_UNKNOWN {
		return WithheldVerdict{}, fmt.Errorf("withheld verdict: %w: result %d", ErrMalformed, m.GetResult())
	}
	retry := time.Duration(min(max(m.GetRetryMs(), 0), (24*time.Hour).Milliseconds())) * time.Millisecond
	return WithheldVerdict{Result: WithheldResult(m.GetResult()), Holder: h, Retry: retry,
		Receipt: m.GetReceipt(), ReceiptAt: time.UnixMilli(m.GetReceiptMs())}, nil
}

// A coordinator asks a node for one page of a host per grace on refused
// notices (handleWithheld): a node that took such a request is held to it
// by its receipt; another of the same host is not asked of it within the
// grace. maxHostAsks bounds the table of those asks: when it is full of
// asks younger than the grace, no node is asked until one is older, so a
// peer that fills it with notices delays the judging of refusals, never
// makes a node refuse a judge.
const maxHostAsks = 16384

// withheldNotes are the notices a coordinator noted and has not judged.
type withheldNotes struct {
	mu sync.Mutex
	m  map[string]*withheldNote
}

type withheldNote struct {
	first   time.Time
	judging bool
}

// note returns the notice of key, noting it as first noted at first when
// there is none (or the old one, older than life at now, ran out); false
// when the table is full.
func (w *withheldNotes) note(key string, first, now time.Time, life time.Duration) (*withheldNote, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]*withheldNote{}
	}
	if n, ok := w.m[key]; ok && (n.judging || now.Sub(n.first) < life) {
		return n, true
	}
	if len(w.m) >= maxWithheldNotes {
		for k, n := range w.m {
			if !n.judging && now.Sub(n.first) >= life {
				delete(w.m, k)
			}
		}
		if len(w.m) >= maxWithheldNotes {
			return nil, false
		}
	}
	n := &withheldNote{first: first}
	w.m[key] = n
	return n, true
}

// take marks the notice of key as being judged; false when it is already.
func (w *withheldNotes) take(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.m[key]
	if n == nil || n.judging {
		return false
	}
	n.judging = true
	return true
}

func (w *withheldNotes) drop(key string) {
	w.mu.Lock()
	delete(w.m, key)
	w.mu.Unlock()
}

// handleWithheld notes or judges a withholding notice about a subnet of a
// shard this node coordinates, or, as deputy, of the shard its holder
// coordinates.
func (o *Overlay) handleWithheld(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
	rq := req.GetWithheld()
	c := o.coord
	if err := c.checkSnapshot(rq.GetSnapshot()); err != nil {
		return nil, err
	}
	a, err := addrFromWire(rq.GetAddr())
	if err != nil {
		return nil, err
	}
	u := rq.GetUrl()
	if u == "" || len(u) > maxURLLen || egress.HostOf(u) == "" {
		return nil, fmt.Errorf("%w: URL of %d bytes or without a host", ErrMalformed, len(u))
	}
	holder, err := peer.IDFromBytes(rq.GetHolder())
	if err != nil {
		return nil, fmt.Errorf("%w: holder id", ErrMalformed)
	}
	if holder == from {
		return nil, fmt.Errorf("%w: a notice about the sender itself", ErrForbidden)
	}
	if err := o.limit(o.withheldLimit, from, "withholding notice"); err != nil {
		return nil, err
	}
	// Evidence: the holder's receipt of the request. Without it a notice
	// would be any peer's word that a request was sent. A refused notice
	// has none: the coordinator asks the holder itself (below).
	asked := time.UnixMilli(rq.GetAskedMs())
	refused := rq.GetRefused()
	switch {
	case refused && len(rq.GetReceipt()) > 0:
		return nil, fmt.Errorf("%w: a refused notice with a receipt", ErrMalformed)
	case refused && o.cfg.askCrawl == nil:
		return nil, fmt.Errorf("%w: this coordinator does not send crawl requests", ErrUnavailable)
	case !refused:
		if err := VerifyReceipt(holder, u, asked, rq.GetReceipt()); err != nil {
			return nil, err
		}
	}
	if holder == c.self {
		if rq.GetConfirmed() {
			return o.takeBackFromSelf(ctx, from, a, u, refused)
		}
		return nil, fmt.Errorf("%w: %s", ErrRecused, holder)
	}
	if rq.GetConfirmed() {
		return nil, fmt.Errorf("%w: a deputy's confirmation goes to the holder", ErrMalformed)
	}
	id := o.tree.SmallestNonUnary(a)
	ref := c.rangeShard(id)
	deputy := false
	var sh *shard
	if rq.GetDeputy() {
		b, err := c.deputyFor(ctx, ref, holder)
		if err != nil {
			return nil, err
		}
		sh, deputy = b.sh, b.deputy
	} else if sh, err = c.ensureOwner(ctx, ref); err != nil {
		return nil, err
	}
	v := &pb.WithheldVerdict{Holder: []byte(holder), Deputy: deputy}
	answer := func(r pb.WithheldVerdict_Result) (*pb.Message, error) {
		v.Result = r
		m := newMsg(pb.Message_WITHHELD_VERDICT)
		m.WithheldVerdict = v
		return m, nil
	}
	// The delegation holding the page's address: a part delegated apart
	// (Split) is judged against its own node, not the range's.
	_, d, ok, err := c.holding(sh, id, a)
	if err != nil {
		return nil, err
	}
	if !ok || d.Node != holder {
		return answer(pb.WithheldVerdict_NOT_HOLDER)
	}
	r := d.Subnet
	o.stats.withheldNotices.Add(1)
	// A refused notice: the holder is sent the request. Taking it ends
	// the notice (its receipt goes to the asker, which holds the holder
	// to it as to any); refusing it again is what is judged.
	key := string(rangeKey(r)) + string(holder) + "\x00" + u
	now := time.Now()
	grace := o.cfg.withhold.Grace
	if refused {
		// One request of a host per grace: a node that took one is busy
		// with the host until it is due (a receipt notice judges it), and
		// the next notice of the host comes back then. Else whoever keeps
		// the host's room full at the node and sends refused notices
		// would have the coordinator ask until the node's room for
		// judges was full too, and the honest node would lose the subnet
		// as a refuser.
		hk := string(holder) + "\x00" + egress.HostOf(u)
		if left, ok := c.hostAsks.Use(hk, now, grace); !ok {
			v.RetryMs = left.Milliseconds() + 1
			return answer(pb.WithheldVerdict_NOTED)
		}
		rc, at := o.cfg.askCrawl(ctx, holder, u)
		if len(rc) == 0 || VerifyReceipt(holder, u, at, rc) != nil {
			c.hostAsks.Forget(hk)
		} else {
			// A refusal noted before is over: a notice of the request
			// taken now waits its two graces afresh (the stored note is
			// overwritten by one that ran out long ago).
			c.withheld.drop(key)
			if _, ok := c.storedNote(sh, r, holder, u, now, grace+withheldNoteLife); ok && !deputy {
				c.writeNote(ctx, sh, r, holder, u, time.UnixMilli(0))
			}
			v.Receipt, v.ReceiptMs = rc, at.UnixMilli()
			return answer(pb.WithheldVerdict_TAKEN)
		}
	}
	// The holder has had the request a grace at least before a notice
	// is noted, and a grace more before one is judged: nothing is noted
	// of a request it took moments ago.
	if young := grace - now.Sub(asked); young > 0 && !refused {
		v.RetryMs = young.Milliseconds() + 1
		return answer(pb.WithheldVerdict_NOTED)
	}
	life := grace + withheldNoteLife
	// A coordinator keeps what it noted in the shard's state too, so that
	// the grace runs on after its restart or at the replica taking over; a
	// deputy, which cannot write the shard, only in memory.
	first := now
	if !deputy {
		if at, ok := c.storedNote(sh, r, holder, u, now, life); ok {
			first = at
		}
	}
	n, ok := c.withheld.note(key, first, now, life)
	if !ok {
		return nil, fmt.Errorf("%w: %d withholding notices waiting", ErrOverloaded, maxWithheldNotes)
	}
	if n.first.Equal(now) && !deputy {
		c.writeNote(ctx, sh, r, holder, u, now)
	}
	if left := grace - now.Sub(n.first); left > 0 {
		v.RetryMs = left.Milliseconds() + 1
		return answer(pb.WithheldVerdict_NOTED)
	}
	if !c.withheld.take(key) {
		v.RetryMs = time.Minute.Milliseconds() // being judged
		return answer(pb.WithheldVerdict_NOTED)
	}
	defer c.withheld.drop(key)
	if !o.pageReachable(ctx, sh, id, holder, u) {
		o.log.Info("page said withheld not confirmed reachable; not held against its node", "peer", holder, "url", u)
		if !deputy {
			c.writeNote(ctx, sh, r, holder, u, time.Now()) // a later notice waits a grace again
		}
		return answer(pb.WithheldVerdict_UNCONFIRMED)
	}
	if deputy {
		// A replica cannot write the shard: the holder coordinates it.
		// The deputy tells it its verdict, and a holder running micra's
		// coordinator takes the subnet back from itself; one that does
		// not keeps it, confirmed.
		if o.confirmToHolder(ctx, holder, rq) {
			o.log.Warn("node withheld a subnet of the shard it coordinates; judged as its deputy, it gave the subnet up", "peer", holder,
				"subnet", r.String(), "url", u)
			return answer(pb.WithheldVerdict_TAKEN_BACK)
		}
		o.log.Warn("node withholds a subnet of the shard it coordinates and kept it after its deputy's verdict", "peer", holder,
			"subnet", r.String(), "url", u)
		return answer(pb.WithheldVerdict_CONFIRMED)
	}
	if err := c.takeBackWithheld(ctx, sh, d, u, refused); err != nil {
		return nil, err
	}
	return answer(pb.WithheldVerdict_TAKEN_BACK)
}

// confirmToHolder tells holder, the coordinator of the shard of the notice
// rq, that this node, its deputy, confirmed the notice, and reports
// whether holder took the subnet back from itself.
func (o *Overlay) confirmToHolder(ctx context.Context, holder peer.ID, rq *pb.Withheld) bool {
	m := newMsg(pb.Message_WITHHELD)
	m.Withheld = &pb.Withheld{Snapshot: rq.GetSnapshot(), Addr: rq.GetAddr(), Url: rq.GetUrl(), Holder: rq.GetHolder(),
		AskedMs: rq.GetAskedMs(), Receipt: rq.GetReceipt(), Refused: rq.GetRefused(), Confirmed: true}
	resp, err := o.request(ctx, holder, auditSpec, m, pb.Message_WITHHELD_VERDICT)
	if err != nil {
		o.log.Debug("deputy's withholding verdict not taken by the holder", "peer", holder, "error", err)
		return false
	}
	v, err := withheldVerdictFromPB(resp.GetWithheldVerdict())
	return err == nil && v.Holder == holder && v.Result == WithheldTakenBack
}

// takeBackFromSelf takes the subnet of a from this node, which coordinates
// its shard and holds it, on its deputy's confirmed verdict that it left a
// crawl request for u unanswered (no node judges itself: the deputy, a
// replica of the shard, judged with the auditors; refused: it would not
// take the request). from must be in the shard's replica set. The
// exclusion that keeps the node out of the subnet is kept by this node
// (selfWithheld, in memory and its database): the replicas take no
// WITHHELD entry from a coordinator about itself.
func (o *Overlay) takeBackFromSelf(ctx context.Context, from peer.ID, a netip.Addr, u string, refused bool) (*pb.Message, error) {
	c := o.coord
	id := o.tree.SmallestNonUnary(a)
	sh, err := c.ensureOwner(ctx, c.rangeShard(id))
	if err != nil {
		return nil, err
	}
	if set := c.replicaSet(c.view(sh.key)); from == c.self || !slices.Contains(set, from) {
		return nil, fmt.Errorf("%w: %s is not among the shard's replicas", ErrForbidden, from)
	}
	v := &pb.WithheldVerdict{Holder: []byte(c.self), Result: pb.WithheldVerdict_NOT_HOLDER}
	_, d, ok, err := c.holding(sh, id, a)
	if err != nil {
		return nil, err
	}
	if r := d.Subnet; ok && d.Node == c.self {
		if err := c.selfWithheld.exclude(c.st, r, time.Now().Add(o.cfg.withhold.Exclusion)); err != nil {
			o.log.Warn("storing that this node gave a subnet up failed; kept in memory only", "subnet", r.String(), "error", err)
		}
		reason := "withheld"
		if refused {
			reason = "refused"
		}
		o.log.Warn("subnet given up: its deputy found this node "+reason+" a crawl request past the grace", "deputy", from,
			"subnet", r.String(), "url", u)
		if err := c.orphan(ctx, sh, d, nil, reason); err != nil {
			return nil, err
		}
		v.Result = pb.WithheldVerdict_TAKEN_BACK
	}
	m := newMsg(pb.Message_WITHHELD_VERDICT)
	m.WithheldVerdict = v
	return m, nil
}

// selfExclusions are the subnets this node gave up on its deputies'
// verdicts (takeBackFromSelf), until when it stays out of each. They are
// kept in the node's database too (not in the shard's state: the replicas
// take no WITHHELD entry from a coordinator about itself), so that a
// restart within the exclusion does not let the node take the subnet
// again.
type selfExclusions struct {
	mu sync.Mutex
	m  map[string]time.Time // rangeKey -> until
}

// exclude keeps this node out of r until then, in memory and in st; a
// failure to store is returned (the memory holds it all the same).
func (s *selfExclusions) exclude(st store, r subnet.Range, until time.Time) error {
	s.set(rangeKey(r), until)
	return st.putSelfWithheld(rangeKey(r), time.Until(until))
}

// load takes the exclusions st keeps (after a restart).
func (s *selfExclusions) load(st store) error {
	return st.scanSelfWithheld(func(rk []byte, until time.Time) { s.set(rk, until) })
}

func (s *selfExclusions) set(rk []byte, until time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]time.Time{}
	}
	now := time.Now()
	for k, t := range s.m {
		if !now.Before(t) {
			delete(s.m, k)
		}
	}
	if now.Before(until) {
		s.m[string(rk)] = until
	}
}

func (s *selfExclusions) excluded(r subnet.Range, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return now.Before(s.m[string(rangeKey(r))])
}

// pageReachable asks up to three auditors — nodes that refetch, not holder
// and not of holder's place, nearest the subnet first — to fetch u, and
// reports whether one of them got it: a 2xx page that parses and does not
// ask not to be indexed (of which the crawler makes no record). A page
// robots.txt forbids fails to refetch.
func (o *Overlay) pageReachable(ctx context.Context, sh *shard, id subnet.ID, holder peer.ID, u string) bool {
	hp := o.placeOf(holder)
	asked := 0
	for _, p := range o.coord.auditors(sh, id, Claim{Node: holder, URL: u}) {
		if asked == maxWithheldAuditors || ctx.Err() != nil {
			break
		}
		if pl := o.placeOf(p); pl.same(hp) {
			continue // one operator's nodes neither clear nor blame each other
		}
		asked++
		pg, err := o.refetch(ctx, p, u)
		o.log.Debug("withheld page refetched", "url", u, "peer", holder, "auditor", p, "status", pg.Status, "error", err)
		if err == nil && pg.Status >= 200 && pg.Status <= 299 && pg.Fingerprint != 0 && !pg.NoIndex {
			return true
		}
	}
	return false
}

// takeBackWithheld keeps d's node out of d's subnet for the exclusion (a
// WITHHELD entry of sh) and orphans the subnet, which goes to the next
// node; refused says the node would not take the request for u (reason
// "refused"), else it took it and left it unanswered ("withheld").
func (c *coordinator) takeBackWithheld(ctx context.Context, sh *shard, d Delegation, u string, refused bool) error {
	now := time.Now()
	we := &pb.WithheldEntry{Subnet: rangeToPB(d.Subnet), Peer: []byte(d.Node),
		UntilMs: now.Add(c.o.cfg.withhold.Exclusion).UnixMilli(), Url: u, AtMs: now.UnixMilli()}
	v, err := proto.Marshal(we)
	if err != nil {
		return err
	}
	if _, err := c.write(ctx, sh, 1, func(int, uint64, uint64) (*pb.Entry, error) {
		return &pb.Entry{Kind: pb.Entry_WITHHELD, Key: withheldKey(d.Subnet, d.Node), Value: v}, nil
	}); err != nil {
		return err
	}
	reason, why := "withheld", "left a crawl request unanswered"
	if refused {
		reason, why = "refused", "would not take a crawl request"
	}
	c.log.Warn("subnet taken back: its node "+why+" past the grace", "peer", d.Node,
		"subnet", d.Subnet.String(), "url", u, "until", time.UnixMilli(we.GetUntilMs()).UTC())
	return c.orphan(ctx, sh, d, nil, reason)
}

func withheldKey(r subnet.Range, p peer.ID) []byte { return append(rangeKey(r), p...) }

// storedNote returns when the notice that holder withheld u of subnet r
// was first noted, by sh's state: a noted-only WITHHELD entry for r and
// holder with u, younger than life at now.
func (c *coordinator) storedNote(sh *shard, r subnet.Range, holder peer.ID, u string, now time.Time, life time.Duration) (time.Time, bool) {
	e, err := c.st.getEntry(sh.key, pb.Entry_WITHHELD, withheldKey(r, holder))
	if err != nil || e == nil {
		return time.Time{}, false
	}
	var we pb.WithheldEntry
	if proto.Unmarshal(e.GetValue(), &we) != nil || we.GetUntilMs() != 0 || we.GetUrl() != u {
		return time.Time{}, false
	}
	at := time.UnixMilli(we.GetAtMs())
	if at.After(now) || now.Sub(at) >= life {
		return time.Time{}, false
	}
	return at, true
}

// writeNote records in sh's replicated state that the notice that holder
// withheld u of subnet r was noted at (storedNote); a failure is logged
// (the notice is still noted in memory).
func (c *coordinator) writeNote(ctx context.Context, sh *shard, r subnet.Range, holder peer.ID, u string, at time.Time) {
	v, err := proto.Marshal(&pb.WithheldEntry{Subnet: rangeToPB(r), Peer: []byte(holder), Url: u, AtMs: at.UnixMilli()})
	if err == nil {
		_, err = c.write(ctx, sh, 1, func(int, uint64, uint64) (*pb.Entry, error) {
			return &pb.Entry{Kind: pb.Entry_WITHHELD, Key: withheldKey(r, holder), Value: v}, nil
		})
	}
	if err != nil {
		c.log.Debug("withholding notice not recorded in the shard's state", "peer", holder, "subnet", r.String(), "error", err)
	}
}

// withheldFrom returns the nodes kept out of subnet r of sh at now.
func (c *coordinator) withheldFrom(sh *shard, r subnet.Range, now time.Time) []peer.ID {
	rk := string(rangeKey(r))
	var out []peer.ID
	if c.selfWithheld.excluded(r, now) {
		out = append(out, c.self)
	}
	_ = c.st.scan(sh.key, pb.Entry_WITHHELD, func(e *pb.Entry) bool {
		if len(e.GetKey()) <= len(rk) || string(e.GetKey()[:len(rk)]) != rk {
			return true
		}
		var we pb.WithheldEntry
		if proto.Unmarshal(e.GetValue(), &we) == nil && now.UnixMilli() < we.GetUntilMs() {
			if p, err := peer.IDFromBytes(we.GetPeer()); err == nil && !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
		return len(out) < maxEnvList
	})
	return out
}

// checkWithheldEntry verifies a replicated WITHHELD entry.
func checkWithheldEntry(e *pb.Entry) error {
	var we pb.WithheldEntry
	if err := proto.Unmarshal(e.GetValue(), &we); err != nil {
		return fmt.Errorf("%w: withheld entry: %v", ErrMalformed, err)
	}
	r, err := rangeFromPB(we.GetSubnet())
	if err != nil {
		return fmt.Errorf("%w: withheld entry: %v", ErrMalformed, err)
	}
	p, err := peer.IDFromBytes(we.GetPeer())
	if err != nil {
		return fmt.Errorf("%w: withheld entry: %v", ErrMalformed, err)
	}
	if string(withheldKey(r, p)) != string(e.GetKey()) || len(we.GetUrl()) > maxURLLen {
		return fmt.Errorf("%w: withheld entry not keyed by its subnet and peer, or its URL too long", ErrMalformed)
	}
	return nil
}
