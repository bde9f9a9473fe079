package index

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/micra-net/micra/crawl"
)

// Verbatim terms. The crawler's analysis drops stop words, one-letter words
// and numbers, and records carry no others; but people look those up in
// manuals: a template tag "if", an HTTP method "GET", a command's option
// "-v", a regular expression's "\d", a weekday constant "MONDAY". Only
// titles and the anchors of links reach the indexer as text, and they are
// where such names are written as names, so the indexer keeps the words of
// titles and anchors that the analysis drops, as written (lower-cased,
// outer punctuation trimmed), each as a verbatim term: "=" and the word.
// A query of such words alone, which would otherwise search nothing,
// searches their verbatim terms (parseQuery). No record byte pays for it.

// verbatimMark starts every verbatim term: no keyword or hidden term starts
// with it (validTerm, isHidden).
const verbatimMark = "="

const (
	maxVerbatimBytes  = 32 // longer words are not kept verbatim
	maxTitleVerbatims = 16 // verbatim terms taken from a title
)

// verbatimTrim is the punctuation trimmed from both ends of a word.
const verbatimTrim = `.,;:!?"'()[]{}`

// verbatims returns the verbatim terms of text, in order of appearance, each
// once, at most k: for each word (text split at white space), lower-cased
// and trimmed of outer punctuation, the word itself when the crawler's
// analysis gives it no term, else those of its parts (cut at characters
// other than letters, digits, '_', '-' and '\') it gives none ("get" of
// "HttpRequest.GET"). A word or part must hold a letter or a digit and be
// at most maxVerbatimBytes.
func verbatims(text string, k int) []string {
	var out []string
	add := func(w string) bool {
		if len(out) >= k {
			return false
		}
		if len(w) == 0 || len(w) > maxVerbatimBytes || !utf8.ValidString(w) ||
			!strings.ContainsFunc(w, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) {
			return true
		}
		t := verbatimMark + w
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
		return true
	}
	for _, f := range strings.Fields(text) {
		w := strings.Trim(strings.ToLower(f), verbatimTrim)
		if len(w) > maxVerbatimBytes*4 {
			continue // no part of it is kept either: a URL, a hash
		}
		if !crawl.HasTerms(w) {
			// No part gives a term either: the word is kept whole.
			if !add(w) {
				break
			}
			continue
		}
		parts := strings.FieldsFunc(w, func(r rune) bool {
			return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' && r != '-' && r != '\\'
		})
		if len(parts) < 2 {
			continue
		}
		for _, p := range parts {
			if !crawl.HasTerms(p) && !add(p) {
				return out
			}
		}
	}
	return out
}

// isVerbatim reports whether t is a verbatim term.
func isVerbatim(t string) bool { return strings.HasPrefix(t, verbatimMark) }

// validVerbatim reports whether t is a verbatim term verbatims can give.
func validVerbatim(t string) bool {
	return isVerbatim(t) && len(t) > len(verbatimMark) && len(t) <= len(verbatimMark)+maxVerbatimBytes && utf8.ValidString(t)
}

// verbatimWord is the word a verbatim term stands for.
func verbatimWord(t string) string { return strings.TrimPrefix(t, verbatimMark) }
