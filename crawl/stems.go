package crawl

import (
	"sync"

	"github.com/micra-net/micra/crawl/internal/parse"
	"github.com/micra-net/micra/crawl/internal/textproc"
)

// MaxTitleBytes is the longest title a record carries.
const MaxTitleBytes = parse.MaxTitle

// analyzers pools textproc Builders, which are not safe for concurrent use
// and keep a stem cache worth reusing.
var analyzers = sync.Pool{New: func() any { return textproc.NewBuilder() }}

// HasTerms reports whether Stems(text, k) gives any term, for any k > 0,
// at a fraction of its cost. Safe for concurrent use.
func HasTerms(text string) bool { return textproc.HasTerms(text) }

// Stems returns the distinct terms of text as the crawler makes a page's
// keywords (its tokeniser, English stop words, Snowball stemmer, length
// bounds, identifiers joined), the most frequent first, at most k. An
// indexer turns query words, titles and anchors into terms with it, so
// that a word matches exactly the records whose pages contain it. Safe for
// concurrent use.
func Stems(text string, k int) []string {
	if text == "" {
		return nil
	}
	b := analyzers.Get().(*textproc.Builder)
	b.Reset()
	b.Add(text, textproc.Body)
	top := b.Top(k)
	analyzers.Put(b)
	out := make([]string, len(top))
	for i, t := range top {
		out[i] = t.Term
	}
	return out
}
