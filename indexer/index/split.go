package index

import (
	"math"
	"slices"
	"unicode"

	"github.com/micra-net/micra/crawl"
)

// A query word no page has is often two words written as one: a negated
// option ("noaliases" for the option "aliases"), a name spelt without its
// separator ("readfile"), a compound. Before giving up on the word, the
// query splits it in two at the point where both halves are words some
// page has (or one half is a stop word), the best-attested split first, as
// compound splitters do (Koehn and Knight, 2003: the geometric mean of the
// parts' frequencies). The split words are searched in its place and the
// results say so (Results.Split).

// Split is a query word no page has, searched as the words it was split into.
type Split struct {
	Word string   // the word as the query wrote it
	As   []string // the words searched instead, in order
}

const (
	minSplitWord = 5  // shorter words are not split
	maxSplitWord = 40 // nor longer ones: the candidates are one per letter
	minSplitPart = 2  // letters of each half
)

// splitCandidate is one way to split a word: its halves and their terms
// (none for a stop word).
type splitCandidate struct {
	parts [2]string
	terms [2][]string
}

// splitCandidates returns the ways to split word in two halves of at least
// minSplitPart letters each giving at most one term, not both none. Only
// words of letters alone are split: others were already cut at their
// punctuation by the crawler's tokeniser.
func splitCandidates(word string) []splitCandidate {
	r := []rune(word)
	if len(r) < minSplitWord || len(r) > maxSplitWord || slices.ContainsFunc(r, func(c rune) bool { return !unicode.IsLetter(c) }) {
		return nil
	}
	var out []splitCandidate
	for i := minSplitPart; i <= len(r)-minSplitPart; i++ {
		c := splitCandidate{parts: [2]string{string(r[:i]), string(r[i:])}}
		ok := true
		for j, p := range c.parts {
			c.terms[j] = crawl.Stems(p, 2)
			ok = ok && len(c.terms[j]) <= 1 && !slices.ContainsFunc(c.terms[j], isHidden)
		}
		if ok && len(c.terms[0])+len(c.terms[1]) > 0 {
			out = append(out, c)
		}
	}
	return out
}

// splitUnknown splits the words of pq whose terms no page has, where a
// split into words some page has exists. df returns the document
// frequencies of the terms it is given (absent: none); it is asked for
// pq's terms and exclusions at once, so that a memo (memoDFs) has them
// all for the evaluation that follows. It returns pq unchanged when
// nothing was split.
func splitUnknown(pq parsedQuery, df func([]string) (map[string]int64, error)) (parsedQuery, []Split, error) {
	have, err := df(slices.Concat(pq.Terms, pq.Excluded))
	if err != nil {
		return pq, nil, err
	}
	cands := map[string][]splitCandidate{}
	var ask []string
	for _, t := range pq.Terms {
		if have[t] > 0 || isHidden(t) || isVerbatim(t) {
			continue
		}
		cs := splitCandidates(pq.Words[t])
		if len(cs) == 0 {
			continue
		}
		cands[t] = cs
		for _, c := range cs {
			for _, ts := range c.terms {
				ask = append(ask, ts...)
			}
		}
	}
	if len(cands) == 0 {
		return pq, nil, nil
	}
	slices.Sort(ask)
	parts, err := df(slices.Compact(ask))
	if err != nil {
		return pq, nil, err
	}
	out := parsedQuery{Excluded: pq.Excluded, Words: map[string]string{}}
	var splits []Split
	for _, t := range pq.order {
		best, ok := bestSplit(cands[t], parts)
		if !ok {
			if slices.Contains(pq.Terms, t) {
				out.Terms = append(out.Terms, t)
			}
			if _, seen := out.Words[t]; !seen {
				out.Words[t] = pq.Words[t]
				out.order = append(out.order, t)
			}
			continue
		}
		s := Split{Word: pq.Words[t]}
		for j, ts := range best.terms {
			s.As = append(s.As, best.parts[j])
			for _, pt := range ts {
				out.Terms = append(out.Terms, pt)
				if _, seen := out.Words[pt]; !seen {
					out.Words[pt] = best.parts[j]
					out.order = append(out.order, pt)
				}
			}
		}
		splits = append(splits, s)
	}
	if len(splits) == 0 {
		return pq, nil, nil
	}
	slices.Sort(out.Terms)
	out.Terms = slices.Compact(out.Terms)
	// A split term that is also excluded is not searched: the exclusion
	// was written, the split was guessed.
	out.Terms = slices.DeleteFunc(out.Terms, func(t string) bool {
		_, ex := slices.BinarySearch(out.Excluded, t)
		return ex
	})
	if len(out.Terms) == 0 {
		return pq, nil, nil
	}
	return out, splits, nil
}

// bestSplit returns the candidate whose terms are all on some page with
// the highest geometric mean of their frequencies; with equal means, the
// one with more terms (two words over a word and a stop word), then the
// one with the longer shorter half.
func bestSplit(cs []splitCandidate, df map[string]int64) (splitCandidate, bool) {
	var best splitCandidate
	bestScore, bestN, bestShort, found := 0.0, 0, 0, false
	for _, c := range cs {
		sum, n := 0.0, 0
		for _, ts := range c.terms {
			for _, t := range ts {
				if df[t] <= 0 {
					n = -1
					break
				}
				sum += math.Log(float64(df[t]))
				n++
			}
			if n < 0 {
				break
			}
		}
		if n <= 0 {
			continue
		}
		score := sum / float64(n)
		short := min(len([]rune(c.parts[0])), len([]rune(c.parts[1])))
		if !found || score > bestScore || (score == bestScore && (n > bestN || (n == bestN && short > bestShort))) {
			best, bestScore, bestN, bestShort, found = c, score, n, short, true
		}
	}
	return best, found
}

// searchedAs records in res that pq is the query searched after splits.
func (res *Results) searchedAs(pq parsedQuery, splits []Split) {
	if len(splits) == 0 {
		return
	}
	res.Terms, res.Words, res.Split = pq.Terms, pq.words(pq.Terms), splits
}

// memoDFs wraps a lookup of document frequencies so that each term is
// asked for once: the terms it was given before are answered from memory.
func memoDFs(lookup func([]string) (map[string]int64, error)) func([]string) (map[string]int64, error) {
	seen := map[string]int64{} // 0: looked up, on no page
	return func(ts []string) (map[string]int64, error) {
		var ask []string
		for _, t := range ts {
			if _, ok := seen[t]; !ok && !slices.Contains(ask, t) {
				ask = append(ask, t)
			}
		}
		if len(ask) > 0 {
			got, err := lookup(ask)
			if err != nil {
				return nil, err
			}
			for _, t := range ask {
				seen[t] = got[t]
			}
		}
		out := make(map[string]int64, len(ts))
		for _, t := range ts {
			if n := seen[t]; n > 0 {
				out[t] = n
			}
		}
		return out, nil
	}
}
