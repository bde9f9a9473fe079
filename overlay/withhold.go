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
	orDefault(&w.Grace, 10*time.Minute)
	orDefault(&w.Exclusion, 24*time.Hour)
	orDefault(&w.Rate, 1)
	orDefault(&w.Burst, 64)
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

func withheldKey(r subnet.Range, p peer.ID) []byte { return append(rangeKey(r), p...) }

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
