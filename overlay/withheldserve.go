package overlay

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

// Serving WITHHELD: a coordinator, or the deputy of one, decodes a
// withholding notice (decodeWithheld), decides on what it holds
// (routeNotice, then judgeNotice: pure functions of the notice and the
// state read) and applies each decision (noticeJudging): it answers, sends
// the holder a refused request, notes the notice, or has the page
// refetched and takes the subnet back (see the comment at the top of
// withhold.go).

// withheldNotice is a WITHHELD request, decoded and admitted.
type withheldNotice struct {
	judgeCase
	holder    peer.ID
	asked     time.Time // when holder took the request, by its receipt
	receipt   []byte
	refused   bool         // holder would not take the request: there is no receipt
	deputy    bool         // sent to holder's deputy: holder coordinates the shard
	confirmed bool         // holder's deputy confirmed it, and tells holder
	wire      *pb.Withheld // as it came (confirmToHolder sends it on)
}

// decodeWithheld decodes rq, a notice from peer from, and admits it: about
// another node than from, within from's rate of notices, and with its
// evidence — the holder's receipt of the request; a refused notice has
// none, and is taken only by a coordinator that sends crawl requests.
func (o *Overlay) decodeWithheld(from peer.ID, rq *pb.Withheld) (withheldNotice, error) {
	jc, err := o.openCase(rq.GetSnapshot(), rq.GetAddr(), rq.GetUrl())
	if err != nil {
		return withheldNotice{}, err
	}
	holder, err := peer.IDFromBytes(rq.GetHolder())
	if err != nil {
		return withheldNotice{}, fmt.Errorf("%w: holder id", ErrMalformed)
	}
	if holder == from {
		return withheldNotice{}, fmt.Errorf("%w: a notice about the sender itself", ErrForbidden)
	}
	if err := o.limit(o.withheldLimit, from, "withholding notice"); err != nil {
		return withheldNotice{}, err
	}
	n := withheldNotice{judgeCase: jc, holder: holder, asked: time.UnixMilli(rq.GetAskedMs()), receipt: rq.GetReceipt(),
		refused: rq.GetRefused(), deputy: rq.GetDeputy(), confirmed: rq.GetConfirmed(), wire: rq}
	// Evidence: the holder's receipt of the request. Without it a notice
	// would be any peer's word that a request was sent. A refused notice
	// has none: the coordinator asks the holder itself (askHolder).
	switch {
	case n.refused && len(n.receipt) > 0:
		return withheldNotice{}, fmt.Errorf("%w: a refused notice with a receipt", ErrMalformed)
	case n.refused && o.cfg.askCrawl == nil:
		return withheldNotice{}, fmt.Errorf("%w: this coordinator does not send crawl requests", ErrUnavailable)
	case !n.refused:
		if err := VerifyReceipt(holder, n.url, n.asked, n.receipt); err != nil {
			return withheldNotice{}, err
		}
	}
	return n, nil
}

// routeNotice decides, before its books are known, whether this node
// (self) judges notice n: a notice about self is its deputy's confirmed
// verdict, which it takes (toSelf: takeBackFromSelf), or else it recuses
// itself; a deputy's confirmation goes to the holder only.
func routeNotice(n withheldNotice, self peer.ID) (toSelf bool, err error) {
	switch {
	case n.holder == self && n.confirmed:
		return true, nil
	case n.holder == self:
		return false, recused(self)
	case n.confirmed:
		return false, fmt.Errorf("%w: a deputy's confirmation goes to the holder", ErrMalformed)
	}
	return false, nil
}

// noticeFacts are what judgeNotice decides on, as the judge read them.
type noticeFacts struct {
	now   time.Time
	grace time.Duration // WithholdConfig.Grace
	held  bool          // the delegation holding the notice's address is the holder's
	// refusedAgain: the holder refused the request of a refused notice
	// when the judge sent it (askHolder).
	refusedAgain bool
	first        time.Time // when the notice was first noted; zero before it is noted
}

// noticeStep is what judgeNotice decides to do with a notice.
type noticeStep int

const (
	noticeAnswer    noticeStep = iota // answer result now
	noticeAskHolder                   // send the holder the request of a refused notice, then judge again
	noticeNote                        // note the notice, then judge again with when it was first noted
	noticeRefetch                     // judge it: have the page refetched
)

// noticeDecision is judgeNotice's decision: a step and, for noticeAnswer,
// the result and, when it is NOTED, the milliseconds the asker waits
// before it asks again.
type noticeDecision struct {
	step    noticeStep
	result  pb.WithheldVerdict_Result
	retryMs int64
}

// judgeNotice decides what notice n comes to on facts f. A notice about a
// subnet its holder does not hold is answered NOT_HOLDER. A refused
// notice has the holder sent the request first: taking it ends the notice
// (its receipt goes to the asker, which holds the holder to it as to any),
// refusing it again is what is judged. The holder has had the request a
// grace at least before a notice is noted, and a grace more after the
// first notice before one is judged: till then the notice is answered
// NOTED with the time left.
func judgeNotice(n withheldNotice, f noticeFacts) noticeDecision {
	noted := func(left time.Duration) noticeDecision {
		return noticeDecision{step: noticeAnswer, result: pb.WithheldVerdict_NOTED, retryMs: left.Milliseconds() + 1}
	}
	switch {
	case !f.held:
		return noticeDecision{step: noticeAnswer, result: pb.WithheldVerdict_NOT_HOLDER}
	case n.refused && !f.refusedAgain:
		return noticeDecision{step: noticeAskHolder}
	}
	if young := f.grace - f.now.Sub(n.asked); young > 0 && !n.refused {
		return noted(young)
	}
	if f.first.IsZero() {
		return noticeDecision{step: noticeNote}
	}
	if left := f.grace - f.now.Sub(f.first); left > 0 {
		return noted(left)
	}
	return noticeDecision{step: noticeRefetch}
}

// handleWithheld notes or judges a withholding notice about a subnet of a
// shard this node coordinates, or, as deputy, of the shard its holder
// coordinates.
func (o *Overlay) handleWithheld(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
	n, err := o.decodeWithheld(from, req.GetWithheld())
	if err != nil {
		return nil, err
	}
	c := o.coord
	if toSelf, err := routeNotice(n, c.self); err != nil {
		return nil, err
	} else if toSelf {
		return o.takeBackFromSelf(ctx, from, n)
	}
	book, err := c.judgeIn(ctx, n.ref, n.holder, n.deputy)
	if err != nil {
		return nil, err
	}
	// The delegation holding the page's address: a part delegated apart
	// (Split) is judged against its own node, not the range's.
	_, d, ok, err := c.holding(book.sh, n.id, n.addr)
	if err != nil {
		return nil, err
	}
	f := noticeFacts{held: ok && d.Node == n.holder}
	if f.held {
		o.stats.withheldNotices.Add(1)
	}
	f.now, f.grace = time.Now(), o.cfg.withhold.Grace
	j := &noticeJudging{o: o, n: n, sh: book.sh, d: d, deputy: book.deputy,
		v: &pb.WithheldVerdict{Holder: []byte(n.holder), Deputy: book.deputy}}
	dec := judgeNotice(n, f)
	if dec.step == noticeAskHolder {
		if m := j.askHolder(ctx, f.now, f.grace); m != nil {
			return m, nil
		}
		f.refusedAgain = true
		dec = judgeNotice(n, f)
	}
	if dec.step == noticeNote {
		if f.first, err = j.note(ctx, f.now, f.grace); err != nil {
			return nil, err
		}
		dec = judgeNotice(n, f)
	}
	if dec.step == noticeRefetch {
		return j.refetch(ctx)
	}
	return j.answer(dec.result, dec.retryMs), nil
}

// noticeJudging applies the decisions about notice n in its books: shard
// sh, whose delegation d holds the notice's address, judged by this node
// as its coordinator or as the holder's deputy (deputy); v is the verdict
// it answers.
type noticeJudging struct {
	o      *Overlay
	n      withheldNotice
	sh     *shard
	d      Delegation
	deputy bool
	v      *pb.WithheldVerdict
}

// answer returns v with result r (and retryMs, for NOTED).
func (j *noticeJudging) answer(r pb.WithheldVerdict_Result, retryMs int64) *pb.Message {
	j.v.Result, j.v.RetryMs = r, retryMs
	m := newMsg(pb.Message_WITHHELD_VERDICT)
	m.WithheldVerdict = j.v
	return m
}

// key names the notice in the coordinator's notes: its subnet, holder
// and URL.
func (j *noticeJudging) key() string {
	return string(rangeKey(j.d.Subnet)) + string(j.n.holder) + "\x00" + j.n.url
}

// askHolder sends the holder the request of a refused notice and returns
// the answer when that ends the notice: TAKEN, with the holder's receipt,
// or NOTED when a request of the same host was sent to it within the
// grace; nil when the holder refused it again.
func (j *noticeJudging) askHolder(ctx context.Context, now time.Time, grace time.Duration) *pb.Message {
	c, n := j.o.coord, j.n
	// One request of a host per grace: a node that took one is busy with
	// the host until it is due (a receipt notice judges it), and the next
	// notice of the host comes back then. Else whoever keeps the host's
	// room full at the node and sends refused notices would have the
	// coordinator ask until the node's room for judges was full too, and
	// the honest node would lose the subnet as a refuser.
	hk := string(n.holder) + "\x00" + n.host
	if left, ok := c.hostAsks.Use(hk, now, grace); !ok {
		return j.answer(pb.WithheldVerdict_NOTED, left.Milliseconds()+1)
	}
	rc, at := j.o.cfg.askCrawl(ctx, n.holder, n.url)
	if len(rc) == 0 || VerifyReceipt(n.holder, n.url, at, rc) != nil {
		c.hostAsks.Forget(hk)
		return nil
	}
	// A refusal noted before is over: a notice of the request taken now
	// waits its two graces afresh (the stored note is overwritten by one
	// that ran out long ago).
	c.withheld.drop(j.key())
	if _, ok := c.storedNote(j.sh, j.d.Subnet, n.holder, n.url, now, grace+withheldNoteLife); ok && !j.deputy {
		c.writeNote(ctx, j.sh, j.d.Subnet, n.holder, n.url, time.UnixMilli(0))
	}
	j.v.Receipt, j.v.ReceiptMs = rc, at.UnixMilli()
	return j.answer(pb.WithheldVerdict_TAKEN, 0)
}

// note notes the notice and returns when it was first noted. A
// coordinator keeps what it noted in the shard's state too, so that the
// grace runs on after its restart or at the replica taking over; a
// deputy, which cannot write the shard, only in memory. ErrOverloaded
// when the notes are full.
func (j *noticeJudging) note(ctx context.Context, now time.Time, grace time.Duration) (time.Time, error) {
	c, n, r := j.o.coord, j.n, j.d.Subnet
	life := grace + withheldNoteLife
	first := now
	if !j.deputy {
		if at, ok := c.storedNote(j.sh, r, n.holder, n.url, now, life); ok {
			first = at
		}
	}
	nt, ok := c.withheld.note(j.key(), first, now, life)
	if !ok {
		return time.Time{}, fmt.Errorf("%w: %d withholding notices waiting", ErrOverloaded, maxWithheldNotes)
	}
	if nt.first.Equal(now) && !j.deputy {
		c.writeNote(ctx, j.sh, r, n.holder, n.url, now)
	}
	return nt.first, nil
}

// refetch judges the notice, unless another notice of the request is
// being judged (NOTED, ask again in a minute): auditors fetch the page
// (pageReachable); one that is not reachable is not held against the
// holder (UNCONFIRMED); else the subnet is taken back (TAKEN_BACK), or,
// judged as a deputy, which cannot write the shard, the holder is told
// (confirmToHolder): one that gives the subnet up answers TAKEN_BACK, one
// that keeps it CONFIRMED.
func (j *noticeJudging) refetch(ctx context.Context) (*pb.Message, error) {
	c, n, r := j.o.coord, j.n, j.d.Subnet
	if !c.withheld.take(j.key()) {
		return j.answer(pb.WithheldVerdict_NOTED, time.Minute.Milliseconds()), nil // being judged
	}
	defer c.withheld.drop(j.key())
	if !j.o.pageReachable(ctx, j.sh, n.id, n.holder, n.url) {
		j.o.log.Info("page said withheld not confirmed reachable; not held against its node", "peer", n.holder, "url", n.url)
		if !j.deputy {
			c.writeNote(ctx, j.sh, r, n.holder, n.url, time.Now()) // a later notice waits a grace again
		}
		return j.answer(pb.WithheldVerdict_UNCONFIRMED, 0), nil
	}
	if j.deputy {
		// A replica cannot write the shard: the holder coordinates it.
		// The deputy tells it its verdict, and a holder running micra's
		// coordinator takes the subnet back from itself; one that does
		// not keeps it, confirmed.
		if j.o.confirmToHolder(ctx, n.holder, n.wire) {
			j.o.log.Warn("node withheld a subnet of the shard it coordinates; judged as its deputy, it gave the subnet up", "peer", n.holder,
				"subnet", r.String(), "url", n.url)
			return j.answer(pb.WithheldVerdict_TAKEN_BACK, 0), nil
		}
		j.o.log.Warn("node withholds a subnet of the shard it coordinates and kept it after its deputy's verdict", "peer", n.holder,
			"subnet", r.String(), "url", n.url)
		return j.answer(pb.WithheldVerdict_CONFIRMED, 0), nil
	}
	if err := c.takeBackWithheld(ctx, j.sh, j.d, n.url, n.refused); err != nil {
		return nil, err
	}
	return j.answer(pb.WithheldVerdict_TAKEN_BACK, 0), nil
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

// takeBackFromSelf takes the subnet of n's address from this node, which
// coordinates its shard and holds it, on its deputy's confirmed verdict n
// that it left a crawl request for n's URL unanswered (no node judges
// itself: the deputy, a replica of the shard, judged with the auditors;
// n.refused: it would not take the request). from must be in the shard's
// replica set (fromDeputy). The
// exclusion that keeps the node out of the subnet is kept by this node
// (selfWithheld, in memory and its database): the replicas take no
// WITHHELD entry from a coordinator about itself.
func (o *Overlay) takeBackFromSelf(ctx context.Context, from peer.ID, n withheldNotice) (*pb.Message, error) {
	c := o.coord
	sh, err := c.fromDeputy(ctx, n.ref, from)
	if err != nil {
		return nil, err
	}
	v := &pb.WithheldVerdict{Holder: []byte(c.self), Result: pb.WithheldVerdict_NOT_HOLDER}
	_, d, ok, err := c.holding(sh, n.id, n.addr)
	if err != nil {
		return nil, err
	}
	if r := d.Subnet; ok && d.Node == c.self {
		if err := c.selfWithheld.exclude(c.st, r, time.Now().Add(o.cfg.withhold.Exclusion)); err != nil {
			o.log.Warn("storing that this node gave a subnet up failed; kept in memory only", "subnet", r.String(), "error", err)
		}
		reason := "withheld"
		if n.refused {
			reason = "refused"
		}
		o.log.Warn("subnet given up: its deputy found this node "+reason+" a crawl request past the grace", "deputy", from,
			"subnet", r.String(), "url", n.url)
		if err := c.orphan(ctx, sh, d, nil, reason); err != nil {
			return nil, err
		}
		v.Result = pb.WithheldVerdict_TAKEN_BACK
	}
	m := newMsg(pb.Message_WITHHELD_VERDICT)
	m.WithheldVerdict = v
	return m, nil
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
