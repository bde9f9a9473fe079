package requests

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/internal/p2ptest"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/subnet"
)

// memStore is an outgoing store in memory; links are told apart by Link.
type memStore struct {
	mu      sync.Mutex
	links   []crawl.Outlink
	kept    []string
	handed  []string
	dropped []string
	stored  chan struct{}
}

func (s *memStore) add(ls ...crawl.Outlink) {
	s.mu.Lock()
	s.links = append(s.links, ls...)
	s.mu.Unlock()
	select {
	case s.stored <- struct{}{}:
	default:
	}
}

func (s *memStore) Outgoing(after crawl.Outlink, n int) ([]crawl.Outlink, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := 0
	if after.Link != "" {
		i = slices.IndexFunc(s.links, func(l crawl.Outlink) bool { return l.Link > after.Link })
		if i < 0 {
			return nil, nil
		}
	}
	return slices.Clone(s.links[i:min(len(s.links), i+n)]), nil
}

func (s *memStore) remove(ls []crawl.Outlink, to *[]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range ls {
		if i := slices.IndexFunc(s.links, func(x crawl.Outlink) bool { return x.Link == l.Link }); i >= 0 {
			s.links = slices.Delete(s.links, i, i+1)
			*to = append(*to, l.Link)
		}
	}
}

func (s *memStore) Handed(ls ...crawl.Outlink) error { s.remove(ls, &s.handed); return nil }
func (s *memStore) Keep(ls ...crawl.Outlink) error   { s.remove(ls, &s.kept); return nil }
func (s *memStore) Discard(ls ...crawl.Outlink) error {
	s.remove(ls, &s.dropped)
	return nil
}
func (s *memStore) OutgoingStored() <-chan struct{} { return s.stored }

func (s *memStore) state() (waiting int, kept, handed []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.links), slices.Clone(s.kept), slices.Clone(s.handed)
}

// fakeOwners knows the owners of some subnets; the others are delegated
// to delegateTo, which takes a while.
type fakeOwners struct {
	mu         sync.Mutex
	tree       *subnet.Tree
	cache      map[subnet.Range]overlay.Delegation
	held       map[subnet.Range]peer.ID // what the coordinators would answer
	delegateTo peer.ID
	delegated  map[subnet.Range]int
	policy     egress.Policy
}

func (f *fakeOwners) EgressPolicy() egress.Policy { return f.policy }
func (f *fakeOwners) Tree() *subnet.Tree          { return f.tree }

func (f *fakeOwners) rng(a netip.Addr) subnet.Range { return f.tree.Range(f.tree.SmallestNonUnary(a)) }

func (f *fakeOwners) Cached(a netip.Addr) (overlay.Delegation, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.cache[f.rng(a)]
	return d, ok
}

func (f *fakeOwners) Resolve(ctx context.Context, a netip.Addr) (overlay.Delegation, bool, error) {
	time.Sleep(20 * time.Millisecond) // a round trip
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.rng(a)
	p, ok := f.held[r]
	if !ok {
		return overlay.Delegation{}, false, nil
	}
	d := overlay.Delegation{Subnet: r, Node: p}
	f.cache[r] = d
	return d, true, nil
}

func (f *fakeOwners) Delegate(ctx context.Context, link string, a netip.Addr) (overlay.Delegation, error) {
	time.Sleep(2 * time.Second) // probes
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.rng(a)
	f.delegated[r]++
	f.held[r] = f.delegateTo
	d := overlay.Delegation{Subnet: r, Node: f.delegateTo}
	f.cache[r] = d
	return d, nil
}

func (f *fakeOwners) Invalidate(r subnet.Range) {
	f.mu.Lock()
	delete(f.cache, r)
	f.mu.Unlock()
}

// TestHandOn: links whose owner is known go to it and are deleted once it
// acknowledged them; links of this node's subnets are kept; links of a
// subnet nobody holds wait while it is delegated, once, in the
// background, then go to the owner found; links for an owner that does
// not answer wait, are not sent again within the back-off, and go once it
// answers. Nothing is lost and nothing is sent twice. A link to an address
// the egress policy refuses is dropped, never delegated.
func TestHandOn(t *testing.T) {
	tree := p2ptest.Tree(t)
	p2ptest.Bubble(t, func(t *testing.T) {
		self, owner, late, down := peer.ID("self"), peer.ID("owner"), peer.ID("late"), peer.ID("down")
		addr := func(b, c byte) netip.Addr { return netip.AddrFrom4([4]byte{127, b, c, 9}) }
		link := func(i int, a netip.Addr) crawl.Outlink {
			return crawl.Outlink{Request: crawl.Request{Link: "http://h" + string(rune('a'+i)) + ".test/", Depth: 1}, Addr: a}
		}
		// The emulated Internet's sites, 127.0.0.0/15, are allowed; the
		// rest of 127/8 is loopback.
		policy := egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/15")}}
		fo := &fakeOwners{tree: tree, cache: map[subnet.Range]overlay.Delegation{}, held: map[subnet.Range]peer.ID{},
			delegateTo: late, delegated: map[subnet.Range]int{}, policy: policy}
		fo.held[fo.rng(addr(0, 1))] = owner
		fo.held[fo.rng(addr(0, 2))] = self
		fo.held[fo.rng(addr(0, 3))] = down
		for _, a := range []netip.Addr{addr(0, 1), addr(0, 2), addr(0, 3)} {
			_, _, _ = fo.Resolve(t.Context(), a) // known: in the cache
		}
		st := &memStore{stored: make(chan struct{}, 1)}
		var mu sync.Mutex
		sent := map[peer.ID][]string{}
		downUp := false
		attempts := map[peer.ID]int{}
		joined := make(chan struct{})
		h := &HandOn{store: st, ov: fo, self: self, log: slog.New(slog.DiscardHandler), joined: joined,
			send: func(ctx context.Context, p peer.ID, reqs []crawl.Request) ([]Receipt, error) {
				mu.Lock()
				defer mu.Unlock()
				attempts[p]++
				if p == down && !downUp {
					return nil, errors.New("no answer")
				}
				for _, r := range reqs {
					sent[p] = append(sent[p], r.Link)
				}
				return nil, nil
			},
			queue: make(chan delegation, delegateQueue), wake: make(chan struct{}, 1),
			asked: map[subnet.Range]time.Time{}, failed: map[peer.ID]backoff{}}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { h.Run(ctx); close(done) }()

		// Stored before the node joined: nothing moves until it has.
		tooDeep := link(7, addr(0, 1))
		tooDeep.Depth = 1000           // beyond the crawl-request protocol: dropped, not retried forever
		special := link(8, addr(2, 5)) // refused by the policy: dropped, never delegated
		st.add(link(0, addr(0, 1)), link(1, addr(0, 2)), link(2, addr(1, 7)), link(3, addr(1, 7)), link(4, addr(0, 3)), tooDeep, special)
		time.Sleep(time.Minute)
		if n, _, _ := st.state(); n != 7 {
			t.Fatalf("%d links waiting before the join, want 7", n)
		}
		close(joined)
		time.Sleep(time.Second)
		synctest.Wait()
		n, kept, handed := st.state()
		if !slices.Equal(kept, []string{"http://hb.test/"}) || !slices.Equal(handed, []string{"http://ha.test/"}) || n != 3 {
			t.Fatalf("after the first pass: kept %v, handed %v, %d waiting", kept, handed, n)
		}
		if st.mu.Lock(); !slices.Equal(st.dropped, []string{tooDeep.Link, special.Link}) {
			t.Errorf("dropped %v, want the link beyond the protocol's depth and the special-purpose one", st.dropped)
		}
		st.mu.Unlock()
		// The unknown subnet is delegated in the background (2 s of
		// probes); its links, one more found meanwhile, then go to the
		// owner found.
		st.add(link(6, addr(1, 7)))
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if _, _, handed = st.state(); !slices.Contains(handed, "http://hc.test/") || !slices.Contains(handed, "http://hd.test/") ||
			!slices.Contains(handed, "http://hg.test/") {
			t.Fatalf("links of the delegated subnet not handed on: %v", handed)
		}
		mu.Lock()
		if got := sent[late]; len(got) != 3 {
			t.Errorf("sent to the delegated owner: %v", got)
		}
		mu.Unlock()
		if got := fo.delegated[fo.rng(addr(1, 7))]; got != 1 {
			t.Errorf("the unknown subnet was delegated %d times, want once", got)
		}
		if got := fo.delegated[fo.rng(special.Addr)]; got != 0 {
			t.Errorf("the refused link's subnet was delegated %d times", got)
		}
		// The owner that does not answer: tried, then left alone for the
		// back-off although passes run and new links arrive.
		mu.Lock()
		first := attempts[down]
		mu.Unlock()
		if first == 0 {
			t.Fatal("the silent owner was never tried")
		}
		st.add(link(5, addr(0, 1)))
		time.Sleep(10 * time.Second)
		synctest.Wait()
		mu.Lock()
		if attempts[down] != first {
			t.Errorf("the silent owner was tried %d times within its back-off", attempts[down]-first)
		}
		downUp = true
		mu.Unlock()
		time.Sleep(delegateRetry + handOnTick)
		synctest.Wait()
		n, _, handed = st.state()
		if n != 0 || !slices.Contains(handed, "http://he.test/") || !slices.Contains(handed, "http://hf.test/") {
			t.Fatalf("after the owner answered: %d waiting, handed %v", n, handed)
		}
		mu.Lock()
		for p, links := range sent {
			if len(links) != len(slices.Compact(slices.Sorted(slices.Values(links)))) {
				t.Errorf("%s got a link twice: %v", p, links)
			}
		}
		mu.Unlock()
		cancel()
		<-done
	})
}

// ownerRig is a joined hand-on loop whose links of address a go to
// owner, known already: the frames it sends are answered with
// receipts(reqs), and every frame is sampled for a watch, its link
// pick(n) of n; the watches sent are collected. receipts and pick run
// under mu.
type ownerRig struct {
	mu      sync.Mutex
	h       *HandOn
	st      *memStore
	owner   peer.ID
	a       netip.Addr
	watched []Watch
}

func newOwnerRig(tree *subnet.Tree, receipts func(reqs []crawl.Request) []Receipt, pick func(n int) int) *ownerRig {
	r := &ownerRig{st: &memStore{stored: make(chan struct{}, 1)}, owner: peer.ID("owner"), a: netip.AddrFrom4([4]byte{127, 0, 1, 9})}
	fo := &fakeOwners{tree: tree, cache: map[subnet.Range]overlay.Delegation{}, held: map[subnet.Range]peer.ID{},
		delegated: map[subnet.Range]int{}, policy: egress.Policy{AllowPrivate: true}}
	fo.held[fo.rng(r.a)] = r.owner
	_, _, _ = fo.Resolve(context.Background(), r.a)
	joined := make(chan struct{})
	close(joined)
	r.h = &HandOn{store: r.st, ov: fo, self: peer.ID("self"), log: slog.New(slog.DiscardHandler), joined: joined,
		send: func(ctx context.Context, p peer.ID, reqs []crawl.Request) ([]Receipt, error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			return receipts(reqs), nil
		},
		watch: func(ctx context.Context, w Watch) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.watched = append(r.watched, w)
			return nil
		},
		watches: make(chan Watch, watchQueue),
		rng: func(n int) int {
			if n == watchEvery {
				return 0
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			return pick(n)
		},
		queue: make(chan delegation, delegateQueue), wake: make(chan struct{}, 1),
		asked: map[subnet.Range]time.Time{}, failed: map[peer.ID]backoff{}}
	return r
}

// run starts the loop until the test ends.
func (r *ownerRig) run(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { r.h.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// frame stores links to hosts names (of address a) and lets a pass run.
func (r *ownerRig) frame(names ...string) {
	var ls []crawl.Outlink
	for _, n := range names {
		ls = append(ls, crawl.Outlink{Request: crawl.Request{Link: "http://" + n + ".test/", Depth: 1}, Addr: r.a})
	}
	r.st.add(ls...)
	time.Sleep(handOnTick + handOnGap)
	synctest.Wait()
}

// signAll answers a receipt of each request.
func signAll(reqs []crawl.Request) []Receipt {
	rs := make([]Receipt, len(reqs))
	for i, r := range reqs {
		rs[i] = Receipt{At: time.Now(), Sig: []byte("sig of " + r.Link)}
	}
	return rs
}

// TestHandOnWatches: a link handed on to its owner is reported,
// with the owner's receipt, to the indexers of its shard about one frame
// in watchEvery; the owner's receipts come with every frame, so it cannot
// tell which; a frame without receipts has none watched, and watches
// beyond watchPerHour are dropped.
func TestHandOnWatches(t *testing.T) {
	tree := p2ptest.Tree(t)
	p2ptest.Bubble(t, func(t *testing.T) {
		withReceipts := true
		r := newOwnerRig(tree, func(reqs []crawl.Request) []Receipt {
			if !withReceipts {
				return nil
			}
			return signAll(reqs)
		}, func(n int) int { return min(1, n-1) }) // the second link watched
		r.run(t)
		r.frame("a", "b")
		r.mu.Lock()
		if w := r.watched; len(w) != 1 || w[0].Request.Link != "http://b.test/" || w[0].Holder != r.owner || string(w[0].Receipt.Sig) != "sig of http://b.test/" {
			t.Fatalf("watched %+v, want b's link with the owner's receipt", w)
		}
		r.mu.Unlock()
		// Within the hour's budget of watchPerHour: the next is dropped.
		r.frame("c", "d")
		r.mu.Lock()
		if len(r.watched) != 1 {
			t.Errorf("watched %d, want the second dropped within %v of the first", len(r.watched), time.Hour/watchPerHour)
		}
		withReceipts = false
		r.mu.Unlock()
		time.Sleep(time.Hour / watchPerHour)
		r.frame("e", "f")
		r.mu.Lock()
		if len(r.watched) != 1 {
			t.Errorf("a frame without receipts was watched: %+v", r.watched[1:])
		}
		withReceipts = true
		r.mu.Unlock()
		r.frame("g", "h")
		r.mu.Lock()
		if len(r.watched) != 2 || r.watched[1].Request.Link != "http://h.test/" {
			t.Errorf("watched %+v, want h's link second", r.watched)
		}
		r.mu.Unlock()
	})
}

// TestHandOnNotTaken: a link its owner did not take now (an
// empty receipt: it would not crawl it in time) stays in the outgoing
// store and is handed on in a later pass; only links taken are watched.
func TestHandOnNotTaken(t *testing.T) {
	tree := p2ptest.Tree(t)
	p2ptest.Bubble(t, func(t *testing.T) {
		full := true // the owner's queue for host "full" is full
		r := newOwnerRig(tree, func(reqs []crawl.Request) []Receipt {
			rs := signAll(reqs)
			for i, q := range reqs {
				if full && strings.Contains(q.Link, "full") {
					rs[i] = Receipt{}
				}
			}
			return rs
		}, func(n int) int { return n - 1 }) // the last link watched
		r.run(t)
		r.frame("open", "full")
		n, _, handed := r.st.state()
		r.mu.Lock()
		if w := r.watched; n != 1 || !slices.Equal(handed, []string{"http://open.test/"}) || len(w) != 1 || w[0].Request.Link != "http://open.test/" {
			t.Fatalf("%d waiting, handed %v, watched %+v; want the full host's link waiting, the other handed and watched", n, handed, w)
		}
		full = false
		r.mu.Unlock()
		time.Sleep(time.Hour)
		synctest.Wait()
		if n, _, handed := r.st.state(); n != 0 || !slices.Contains(handed, "http://full.test/") {
			t.Fatalf("after the owner had room: %d waiting, handed %v", n, handed)
		}
	})
}
