// Package textproc turns text into weighted keywords (tokenising, English
// stop words, Snowball stemming, field and position weights) and computes
// the fingerprints used for change detection: a 64-bit SimHash over the
// weighted stems and a hash of the keyword set that ignores trivial edits.
//
// A Builder is not safe for concurrent use; the functions are.
package textproc

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
	"github.com/kljensen/snowball/english"
)

// Field says where text appeared; it selects the weight multiplier.
type Field uint8

// Fields, most important first.
const (
	Title Field = iota
	Heading1
	Heading2
	Heading3
	Meta
	Anchor
	Body
)

// multipliers per Field: a title word counts as much as six body words.
var multipliers = [...]float64{Title: 6, Heading1: 4, Heading2: 3, Heading3: 2, Meta: 3, Anchor: 1.5, Body: 1}

const (
	minWordLen = 2
	maxWordLen = 40
	// maxCompoundLen bounds an identifier's compound word (Tokens): the
	// longest term an indexer accepts.
	maxCompoundLen = 64
	// maxTokens bounds the work per document; text past it is ignored.
	maxTokens = 200000
	// maxTerms bounds the distinct terms kept per document.
	maxTerms = 50000
	// maxStemCache bounds the words whose stems a Builder remembers across
	// documents (about 1 MiB): stemming is the dearest step of Add, and a
	// site's pages share most of their vocabulary.
	maxStemCache = 16384
)

// Keyword is a stemmed term and its weight, scaled so that the heaviest
// term of a document weighs 65535.
type Keyword struct {
	Term   string
	Weight uint16
}

// Builder accumulates weighted terms of one document.
type Builder struct {
	w      map[string]float64
	stems  map[string]string
	pos    int // body tokens seen, for the position weight
	tokens int
	buf    []byte
}

// NewBuilder returns an empty Builder.
func NewBuilder() *Builder {
	return &Builder{w: make(map[string]float64, 256), stems: make(map[string]string, 256)}
}

// Reset empties b for the next document, keeping its memory.
func (b *Builder) Reset() {
	clear(b.w)
	if len(b.stems) > maxStemCache {
		b.stems = make(map[string]string, 256)
	}
	b.pos, b.tokens = 0, 0
}

// Add adds the words of text, found in field f.
func (b *Builder) Add(text string, f Field) {
	m := multipliers[f]
	Tokens(text, &b.buf, func(word []byte) bool {
		if b.tokens >= maxTokens {
			return false
		}
		b.tokens++
		stem, ok := b.stems[string(word)]
		if !ok {
			w := string(word)
			stem = stemOf(w)
			if len(b.stems) < maxTerms {
				b.stems[w] = stem
			}
		}
		if stem == "" {
			return true
		}
		weight := m
		if f == Body {
			// Words near the top of a page say more about it: the first
			// words count double, decaying towards 1.
			weight *= 1 + 1/(1+float64(b.pos)/64)
			b.pos++
		}
		if _, ok := b.w[stem]; ok || len(b.w) < maxTerms {
			b.w[stem] += weight
		}
		return true
	})
}

// stemOf is the term a word gives: its stem, or "" for a stop word or a
// stem shorter than minWordLen.
func stemOf(w string) string {
	if IsStopWord(w) {
		return ""
	}
	if stem := english.Stem(w, false); len(stem) >= minWordLen {
		return stem
	}
	return ""
}

// HasTerms reports whether text gives a Builder any term (Add), without
// building: whether a word of it has a term (stemOf).
func HasTerms(text string) bool {
	var scratch [64]byte
	buf, found := scratch[:0], false
	Tokens(text, &buf, func(word []byte) bool {
		found = stemOf(string(word)) != ""
		return !found
	})
	return found
}

// Top returns the k heaviest terms, heaviest first, ties by term. Weights
// grow sub-linearly with repetition (1+ln) so that keyword stuffing does not
// drown the title.
func (b *Builder) Top(k int) []Keyword {
	type tw struct {
		t string
		w float64
	}
	all := make([]tw, 0, len(b.w))
	for t, w := range b.w {
		if w < 1 {
			w = 1
		}
		all = append(all, tw{t, 1 + math.Log(w)})
	}
	slices.SortFunc(all, func(a, c tw) int {
		if a.w != c.w {
			return cmp.Compare(c.w, a.w)
		}
		return strings.Compare(a.t, c.t)
	})
	if len(all) > k {
		all = all[:k]
	}
	out := make([]Keyword, len(all))
	for i, x := range all {
		out[i] = Keyword{Term: x.t, Weight: uint16(math.Round(x.w / all[0].w * 65535))}
	}
	return out
}

// SimHash is the 64-bit SimHash (Charikar) of the accumulated terms,
// weighted by their weights.
func (b *Builder) SimHash() uint64 {
	var v [64]float64
	for t, w := range b.w {
		h := xxhash.Sum64String(t)
		for i := range 64 {
			if h&(1<<i) != 0 {
				v[i] += w
			} else {
				v[i] -= w
			}
		}
	}
	var s uint64
	for i := range 64 {
		if v[i] > 0 {
			s |= 1 << i
		}
	}
	return s
}

// Hamming is the number of differing bits of two fingerprints.
func Hamming(a, b uint64) int { return bits.OnesCount64(a ^ b) }

// Tokens calls fn with each lower-cased word of text (letters, digits and
// inner apostrophes; words made only of digits, and words outside 2..40
// bytes, are skipped: counters and dates must not look like content). Words
// joined by '_' or '.' without spaces, as identifiers are written
// (DEFAULT_AUTO_FIELD, os.path.join, python3.11), are also given joined into
// one compound word after their last part ("defaultautofield"), when it has
// a letter and at most maxCompoundLen bytes: a query that writes the
// identifier finds where it is written whole. buf is scratch space reused
// between calls; fn must not keep word. fn returns false to stop.
func Tokens(text string, buf *[]byte, fn func(word []byte) bool) {
	w := (*buf)[:0]
	letters := false
	var compBuf [maxCompoundLen]byte
	comp, parts, compLetters := compBuf[:0], 0, false
	// flush ends the current word; joined says an identifier's joiner
	// follows it directly, with a word character after the joiner.
	flush := func(joined bool) bool {
		// Trim apostrophes at the ends.
		for len(w) > 0 && w[len(w)-1] == '\'' {
			w = w[:len(w)-1]
		}
		ok := true
		if len(w) > 0 {
			if len(comp)+len(w) <= maxCompoundLen && parts >= 0 {
				comp = append(comp, w...)
				parts++
				compLetters = compLetters || letters
			} else {
				parts = -1 // too long: no compound
			}
		}
		if letters && len(w) >= minWordLen && len(w) <= maxWordLen {
			ok = fn(w)
		}
		if ok && !joined {
			if parts >= 2 && compLetters {
				ok = fn(comp)
			}
			comp, parts, compLetters = comp[:0], 0, false
		}
		w = w[:0]
		letters = false
		return ok
	}
	wordAt := func(i int) bool {
		if i >= len(text) {
			return false
		}
		c := text[i]
		if c >= utf8.RuneSelf {
			r, _ := utf8.DecodeRuneInString(text[i:])
			return unicode.IsLetter(r) || unicode.IsDigit(r)
		}
		return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
	}
	for i := 0; i < len(text); {
		c := text[i]
		if c < utf8.RuneSelf {
			i++
			switch {
			case 'a' <= c && c <= 'z':
				w = append(w, c)
				letters = true
			case 'A' <= c && c <= 'Z':
				w = append(w, c+'a'-'A')
				letters = true
			case '0' <= c && c <= '9':
				w = append(w, c)
			case c == '\'' && len(w) > 0:
				w = append(w, c)
			default:
				joined := (c == '_' || c == '.') && len(w) > 0 && wordAt(i)
				if (len(w) > 0 || len(comp) > 0) && !flush(joined) {
					*buf = w
					return
				}
			}
			continue
		}
		r, n := utf8.DecodeRuneInString(text[i:])
		i += n
		switch {
		case r == '\u2019' && len(w) > 0:
			w = append(w, '\'')
		case unicode.IsLetter(r) || unicode.Is(unicode.Mn, r):
			w = utf8.AppendRune(w, unicode.ToLower(r))
			letters = true
		case unicode.IsDigit(r):
			w = utf8.AppendRune(w, r)
		default:
			if (len(w) > 0 || len(comp) > 0) && !flush(false) {
				*buf = w
				return
			}
		}
	}
	if len(w) > 0 || len(comp) > 0 {
		flush(false)
	}
	*buf = w
}

// Digest hashes what an indexer would receive about a page: title, the
// keyword terms with their weights quantised to 16 levels, and the links. Two
// versions of a page with equal digests differ only trivially.
func Digest(title string, kws []Keyword, links []string) uint64 {
	h := xxhash.New()
	var buf []byte
	Tokens(title, &buf, func(w []byte) bool {
		if !IsStopWord(string(w)) {
			h.Write(w)
			h.Write([]byte{' '})
		}
		return true
	})
	h.Write([]byte{0})
	for _, k := range kws {
		h.WriteString(k.Term)
		h.Write([]byte{byte(k.Weight >> 12), 0})
	}
	h.Write([]byte{0})
	sorted := slices.Clone(links)
	slices.Sort(sorted)
	for _, l := range slices.Compact(sorted) {
		h.WriteString(l)
		h.Write([]byte{0})
	}
	return h.Sum64()
}
