package index

import (
	"cmp"
	"context"
	"math/bits"
	"slices"

	"github.com/dgraph-io/badger/v4"
)

// maxSubsetTerms is the most words a partial match is found by subsets
// for (2^n − 2 of them): with three, the largest subsets are pairs, which
// impact lists answer; with more, they are joins of three words or more,
// and a merge of every list costs less than several of them.
const maxSubsetTerms = 3

// bySubsets finds the k best partial matches of known, an all-words query
// whose terms are all on some page but never all on one, each page's
// score scaled by the square of its share of coord terms. Merging every
// list would read every posting of its most frequent word; instead each
// proper subset of the words is an all-words query, most promising first:
// a page with exactly the words S is found with its whole score by the
// query S, and no page found by S can score more than the subset's bound
// (the share of S squared times the most each word of S adds), so the
// search stops when the k-th best page found beats the next subset's
// bound. Results.Total counts the pages with any word, estimated as a
// join would.
func (x *Index) bySubsets(ctx context.Context, txn *badger.Txn, known parsedQuery, coord, k int, res *Results) ([]scored, error) {
	cnt, err := readCounts(txn)
	if err != nil {
		return nil, err
	}
	n := len(known.Terms)
	most := make([]float64, n) // the most each term adds to a score
	for i, t := range known.Terms {
		st, err := getTermState(txn, t)
		if err != nil {
			return nil, err
		}
		q, err := headImpact(txn, t, st)
		if err != nil {
			return nil, err
		}
		most[i] = impactBound(q, idf(cnt.Docs, int64(st.df)), x.cfg.titleBoost)
	}
	type subset struct {
		mask  uint
		bound float64
	}
	var subs []subset
	for mask := uint(1); mask < 1<<n-1; mask++ {
		var sum float64
		for i := range n {
			if mask&(1<<i) != 0 {
				sum += most[i]
			}
		}
		share := float64(bits.OnesCount(mask)) / float64(coord)
		subs = append(subs, subset{mask, sum * share * share})
	}
	slices.SortStableFunc(subs, func(a, b subset) int { return cmp.Compare(b.bound, a.bound) })
	best := make(map[docID]float64)
	kth := func() (float64, bool) {
		if len(best) < k {
			return 0, false
		}
		all := make([]float64, 0, len(best))
		for _, s := range best {
			all = append(all, s)
		}
		slices.SortFunc(all, func(a, b float64) int { return cmp.Compare(b, a) })
		return all[k-1], true
	}
	for _, s := range subs {
		if v, full := kth(); full && v > s.bound {
			break
		}
		sub := known
		sub.Terms = nil
		for i, t := range known.Terms {
			if s.mask&(1<<i) != 0 {
				sub.Terms = append(sub.Terms, t)
			}
		}
		var r Results
		top, err := x.evaluate(ctx, txn, sub, false, coord, k, &r)
		if err != nil {
			return nil, err
		}
		for _, h := range top {
			if v, ok := best[h.id]; !ok || h.score > v {
				best[h.id] = h.score
			}
		}
	}
	t := &topK{k: k}
	for id, s := range best {
		t.offer(scored{id: id, score: s})
	}
	if len(best) == 0 {
		res.Total = 0
		return nil, nil
	}
	// The total is that of the merge, counted from the start of the id
	// space.
	qts, err := x.queryTerms(txn, known, cnt)
	if err != nil {
		return nil, err
	}
	ex, err := excludedTerms(txn, known)
	if err != nil {
		return nil, err
	}
	j := joiner{qts: qts, ex: ex, any: true, coord: coord, n: n, hidden: x.hiddenIn(txn)}
	if _, err := x.join(ctx, txn, j, 0, min(countBudget, x.cfg.maxScan), res); err != nil {
		return nil, err
	}
	res.Total = max(res.Total, len(best))
	return t.sorted(), nil
}

// headImpact is the largest impact of a term's postings: the head of its
// impact list, or, for a term without one, the largest there is.
func headImpact(txn *badger.Txn, t string, st termState) (float64, error) {
	if !st.impact {
		return maxImpact, nil
	}
	p := impactPrefix(t)
	it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: p})
	defer it.Close()
	it.Seek(p)
	if !it.ValidForPrefix(p) {
		return 0, nil
	}
	q, _, ok := parseImpactKey(p, it.Item().Key())
	if !ok {
		return 0, corruptImpactKey(it.Item().Key())
	}
	return q, nil
}
