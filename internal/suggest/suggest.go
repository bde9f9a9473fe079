// Package suggest finds the name a mistyped one was probably meant to be,
// for "did you mean" hints on flags, configuration keys and environment
// variables.
package suggest

import "strings"

// Closest returns the candidate nearest to word by edit distance
// (insertions, deletions, substitutions and swaps of adjacent letters,
// ignoring case), when it is near enough to be a typo: at most a third of
// word's length, and at least 1. Ties go to the earlier candidate; ok is
// false when none is near enough or word is among the candidates.
func Closest(word string, candidates []string) (best string, ok bool) {
	w := strings.ToLower(word)
	limit := max(1, len([]rune(w))/3)
	bestD := limit + 1
	for _, c := range candidates {
		d := distance(w, strings.ToLower(c))
		if d == 0 {
			return "", false
		}
		if d < bestD {
			best, bestD = c, d
		}
	}
	return best, bestD <= limit
}

// distance is the optimal string alignment distance between a and b, in
// runes, bounded in work by their lengths (names are short).
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	if len(ra) > 256 || len(rb) > 256 {
		return max(len(ra), len(rb))
	}
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
