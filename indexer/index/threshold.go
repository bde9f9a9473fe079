package index

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/dgraph-io/badger/v4"
)

// A query of frequent terms runs on their impact lists (impact.go) by the
// threshold algorithm (Fagin, Lotem and Naor, 2001): it reads the lists
// heaviest posting first, scores each page it meets exactly by looking up
// its other postings, and stops as soon as its k-th best page scores more
// than any page not met yet can: the sum of what the next posting of each
// list adds. The hits are those of the join, in the same order, read from
// a few thousand postings instead of every posting of the terms.

// plan says whether the impact lists should answer a query, and how many
// pages the threshold algorithm may score before the join takes over. The
// join must be long: its rarest list, or all lists for any term, of at
// least config.impactMin postings. Every term needs an impact list, or few
// enough postings (below config.impactMin) to sort them in memory. The
// algorithm scores the pages it meets one lookup per word (a binary
// search in a term's blocks, read whole once, or a badger read for a term
// without); so for all words they must be three at most (with more it
// reads deep into every list before no page it has not met can rank),
// the pages with all of them a large share (an eighth, if the words were
// independent) of those with the rarest, and it scores at most an eighth
// of the join's postings.
func (c *config) plan(qts []qterm, any bool, docs int64) (budget int, ok bool) {
	var sum, least uint64
	for i, q := range qts {
		if !q.state.impact && q.state.df >= uint64(c.impactMin) {
			return 0, false // its list is still to be built
		}
		sum += q.state.df
		if i == 0 || q.state.df < least {
			least = q.state.df
		}
	}
	cost := least
	if any {
		cost = sum
	}
	switch {
	case cost < uint64(c.impactMin):
		return 0, false
	case !any && len(qts) > 3:
		return 0, false
	case !any && len(qts) > 1:
		// The share of the rarest term's pages that have the others, were
		// the terms independent.
		share, rarest := 1.0, 0
		for i, q := range qts {
			if q.state.df < qts[rarest].state.df {
				rarest = i
			}
		}
		for i, q := range qts {
			if i != rarest {
				share *= float64(q.state.df) / float64(max(docs, 1))
			}
		}
		if share < 1.0/8 {
			return 0, false
		}
	}
	return int(max(cost/8, 256)), true
}

// threshold is one run of the threshold algorithm.
type threshold struct {
	x       *Index
	ctx     context.Context
	txn     *badger.Txn
	qts     []qterm
	ex      []string
	hidden  func(docID) bool // nil: none
	any     bool
	coord   int
	boost   float64
	budget  int               // pages to score before the join takes over
	contrib []float64         // per query term, summed in query order as the join does
	runs    map[int]runLookup // the runs of the terms looked up, by position in the query

	matches int // pages met that match
	reads   int // postings read from the lists
	lookups int // postings looked up
}

// impactSource reads one term's postings by descending impact: its impact
// list, or for a term without one its postings sorted in memory.
type impactSource struct {
	q      *qterm
	it     *badger.Iterator // the impact list; nil: mem
	prefix []byte
	mem    []impactEntry
	at     int

	id    docID   // the next posting's page
	bound float64 // the most the next posting adds; 0 when the list is read
	done  bool
	err   error
}

type impactEntry struct {
	s  float64
	id docID
}

// openImpactSource opens the postings of q by impact.
func (th *threshold) openImpactSource(q *qterm, boost float64) (*impactSource, error) {
	txn := th.txn
	s := &impactSource{q: q}
	if q.state.impact {
		s.prefix = impactPrefix(q.t)
		s.it = txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: s.prefix})
		s.it.Seek(s.prefix)
	} else {
		c, err := th.x.openCursor(txn, q.t, q.state, q.pos)
		if err != nil {
			return nil, err
		}
		for ; c.ok; c.next() {
			s.mem = append(s.mem, impactEntry{s: impactOf(c.w, c.flags, c.a), id: c.id})
		}
		c.close()
		if c.err != nil {
			return nil, c.err
		}
		slices.SortFunc(s.mem, func(a, b impactEntry) int {
			return cmp.Or(cmp.Compare(b.s, a.s), bytes.Compare(a.id[:], b.id[:]))
		})
	}
	s.load(boost)
	return s, nil
}

func (s *impactSource) load(boost float64) {
	var q float64
	switch {
	case s.it == nil && s.at < len(s.mem):
		q, s.id = s.mem[s.at].s, s.mem[s.at].id
	case s.it == nil || !s.it.ValidForPrefix(s.prefix):
		s.done, s.bound = true, 0
		return
	default:
		var ok bool
		if q, s.id, ok = parseImpactKey(s.prefix, s.it.Item().Key()); !ok {
			s.done, s.bound, s.err = true, 0, corruptImpactKey(s.it.Item().Key())
			return
		}
	}
	s.bound = impactBound(q, s.q.weight, boost)
}

func (s *impactSource) next(boost float64) {
	if s.it != nil {
		s.it.Next()
	} else {
		s.at++
	}
	s.load(boost)
}

func (s *impactSource) close() {
	if s.it != nil {
		s.it.Close()
	}
}

// run returns the k best pages, and false when the budget ran out first
// (the caller joins instead).
func (th *threshold) run(k int) ([]scored, bool, error) {
	srcs := make([]*impactSource, 0, len(th.qts))
	defer func() {
		for _, s := range srcs {
			s.close()
		}
	}()
	for i := range th.qts {
		s, err := th.openImpactSource(&th.qts[i], th.boost)
		if err != nil {
			return nil, false, err
		}
		srcs = append(srcs, s)
		th.reads += len(s.mem) // a term without a list is read whole
	}
	// Lookups go rarest term first: an AND misses soonest there.
	order := make([]*qterm, len(th.qts))
	for i := range th.qts {
		order[i] = &th.qts[i]
	}
	slices.SortStableFunc(order, func(a, b *qterm) int { return cmp.Compare(a.state.df, b.state.df) })
	top := &topK{k: k}
	seen := make(map[docID]struct{})
	for steps := 0; ; steps++ {
		if steps&255 == 0 {
			if err := th.ctx.Err(); err != nil {
				return nil, false, err
			}
		}
		var next *impactSource
		for _, s := range srcs {
			if s.err != nil {
				return nil, false, s.err
			}
			if s.done && !th.any {
				// Every page with all terms has this one: all met.
				return top.sorted(), true, nil
			}
			if !s.done && (next == nil || s.bound > next.bound) {
				next = s
			}
		}
		if next == nil || (len(top.h) == k && th.beats(top.h[0].score, srcs)) {
			return top.sorted(), true, nil
		}
		if len(seen) >= th.budget {
			return nil, false, nil
		}
		id, own := next.id, next.bound
		next.next(th.boost)
		th.reads++
		if _, ok := seen[id]; ok {
			continue
		}
		seen[id] = struct{}{}
		if !th.any && len(top.h) == k && th.hopeless(top.h[0].score, own, next, srcs) {
			continue // no lookup for a page that cannot enter the top k
		}
		s, ok, err := th.score(id, order)
		if err != nil {
			return nil, false, err
		}
		if ok {
			th.matches++
			top.offer(scored{id: id, score: s})
		}
	}
}

// beats reports whether a page of score kth ranks above every page not
// met yet. Bounds are a billionth above the sum they bound, so that no
// rounding of a page's sum can exceed them; but one word's list, at the
// impacts' own title boost, is in the order of the hits (score, then id),
// so there a page not met ties at best and loses on its id.
func (th *threshold) beats(kth float64, srcs []*impactSource) bool {
	b := th.bound(srcs)
	if len(srcs) == 1 && th.boost == impactBoost {
		return kth >= b
	}
	return kth > b*(1+1e-9)
}

// hopeless reports whether a page met in from's list, where it adds own,
// scores no more than kth even with the most the other lists' next
// postings add (all words: it has every one; bounds only fall).
func (th *threshold) hopeless(kth, own float64, from *impactSource, srcs []*impactSource) bool {
	up := own
	for _, s := range srcs {
		if s != from {
			up += s.bound
		}
	}
	if th.coord > 0 {
		share := float64(len(srcs)) / float64(th.coord)
		up *= share * share
	}
	return kth > up*(1+1e-9)
}

// bound is the most a page not met yet can score. It has none of the terms
// whose lists are read whole, and from each other term at most what the
// term's next posting adds. Scaled by its share of the terms (coord), its
// score is at most the best, over m, of the m largest bounds' sum scaled
// by the share of m terms.
func (th *threshold) bound(srcs []*impactSource) float64 {
	var bs []float64
	for _, s := range srcs {
		if !s.done {
			bs = append(bs, s.bound)
		}
	}
	if th.coord == 0 || !th.any {
		var sum float64
		for _, b := range bs {
			sum += b
		}
		if th.coord > 0 {
			share := float64(len(srcs)) / float64(th.coord)
			sum *= share * share
		}
		return sum
	}
	slices.SortFunc(bs, func(a, b float64) int { return cmp.Compare(b, a) })
	var best, sum float64
	for m, b := range bs {
		sum += b
		share := float64(m+1) / float64(th.coord)
		best = max(best, sum*share*share)
	}
	return best
}

// score looks up every term's posting of a page and scores it as the join
// does; it reports false for a page that does not match.
func (th *threshold) score(id docID, order []*qterm) (float64, bool, error) {
	clear(th.contrib)
	on := 0
	for _, q := range order {
		w, fl, a, found, err := th.lookup(q, id)
		th.lookups++
		if err != nil {
			return 0, false, err
		}
		if !found {
			if !th.any {
				return 0, false, nil
			}
			continue
		}
		th.contrib[q.pos] = termScore(q.weight, w, fl, a, th.boost)
		on++
	}
	for _, t := range th.ex {
		if _, _, _, found, err := getPosting(th.txn, t, id); err != nil || found {
			return 0, false, err
		}
	}
	if th.hidden != nil && th.hidden(id) {
		return 0, false, nil
	}
	var s float64
	for _, v := range th.contrib {
		s += v
	}
	if th.coord > 0 {
		share := float64(on) / float64(th.coord)
		s *= share * share
	}
	return s, true, nil
}

// runLookup is a term's run with its delta, read for lookups.
type runLookup struct {
	run   *runTable
	delta delta
}

// lookup reads the posting of q for page id: from the term's run and
// delta, read whole at its first lookup, or from badger for a term
// without a run.
func (th *threshold) lookup(q *qterm, id docID) (w uint16, flags uint8, anchor uint16, found bool, err error) {
	if q.state.gen == 0 {
		return getPosting(th.txn, q.t, id)
	}
	r, ok := th.runs[q.pos]
	if !ok {
		if r.run, err = th.x.table(th.txn, q.t, q.state); err != nil {
			return 0, 0, 0, false, err
		}
		if r.delta, err = loadDelta(th.txn, q.t, q.state.gen); err != nil {
			return 0, 0, 0, false, err
		}
		if th.runs == nil {
			th.runs = make(map[int]runLookup)
		}
		th.runs[q.pos] = r
	}
	w, flags, anchor, found = r.run.lookup(r.delta, id)
	return w, flags, anchor, found, nil
}

func corruptImpactKey(k []byte) error { return fmt.Errorf("%w: impact key %q", ErrCorruptValue, k) }

// getPosting reads the posting of term t for page id.
func getPosting(txn *badger.Txn, t string, id docID) (w uint16, flags uint8, anchor uint16, found bool, err error) {
	item, err := txn.Get(postingKey(t, id))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, 0, false, err
	}
	err = item.Value(func(v []byte) error {
		w, flags, anchor, err = decodePostingValue(v)
		return err
	})
	return w, flags, anchor, err == nil, err
}
