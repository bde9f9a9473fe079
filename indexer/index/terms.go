package index

import (
	"cmp"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/micra-net/micra/crawl"
)

// Text processing. Query words, profile keywords, titles and host names
// are turned into terms by the crawler's own text processing (crawl.Stems,
// which made the record keywords), so that a word matches exactly the
// records whose pages contain it.

const (
	maxTitleTerms = 32 // stems taken from a title
	maxHostTerms  = 8  // stems taken from a host name
	maxTitleBytes = crawl.MaxTitleBytes
	maxLangBytes  = 64
)

// minRecordTime is the earliest record time accepted: older times come
// from a broken clock or a forgery.
var minRecordTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// validTerm reports whether t can be a term the crawler produced: 2..64
// bytes of what its tokeniser keeps (lower-case letters, combining marks,
// digits, apostrophes), not starting with an apostrophe. Stemming may leave
// a trailing apostrophe ("run'ing" gives "run'") or only digits ("22's"
// gives "22"), so the check is on characters, not on re-tokenising.
func validTerm(t string) bool {
	if len(t) < 2 || len(t) > maxTermBytes || !utf8.ValidString(t) || t[0] == '\'' {
		return false
	}
	for _, r := range t {
		switch {
		case r == '\'', unicode.IsDigit(r), unicode.Is(unicode.Mn, r):
		case unicode.IsLetter(r) && unicode.ToLower(r) == r:
		default:
			return false
		}
	}
	return true
}

// validURL checks an absolute http(s) URL as the crawler emits them.
func validURL(s string) error {
	if s == "" || len(s) > maxURLBytes {
		return fmt.Errorf("url of %d bytes", len(s))
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f {
			return fmt.Errorf("url with a control or space character")
		}
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("url: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("url scheme %q", u.Scheme)
	}
	if u.Hostname() == "" || u.User != nil {
		return fmt.Errorf("url without a host or with credentials")
	}
	return nil
}

// clip cuts s to at most n bytes on a rune boundary, after replacing
// invalid UTF-8.
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// prepared is a record checked, bounded and encoded outside the write lock.
type prepared struct {
	rec      crawl.Record
	id       docID
	enc      []byte    // crawl.AppendRecord form, nil for gone records
	hash     uint64    // content hash of enc (of the URL for gone records)
	postings []posting // sorted by term, nil for gone records
	dropped  int       // keywords and statements dropped as malformed or over the cap
	err      error     // why the record is rejected
}

// prepare validates r and derives what storing it needs. It never fails:
// a rejected record has err set.
func (c *config) prepare(r crawl.Record, now time.Time) prepared {
	p := prepared{rec: r}
	fail := func(format string, a ...any) prepared {
		p.err = fmt.Errorf("%w: %s", ErrInvalidRecord, fmt.Sprintf(format, a...))
		return p
	}
	if err := validURL(r.URL); err != nil {
		return fail("%v", err)
	}
	p.id = idOf(r.URL)
	if r.Time.IsZero() || r.Time.Before(minRecordTime) {
		return fail("time %v", r.Time)
	}
	if r.Time.After(now.Add(c.clockSkew)) {
		return fail("time %v is in the future", r.Time.UTC())
	}
	r.Time = r.Time.Round(0)
	switch r.Change {
	case crawl.ChangeNew, crawl.ChangeModified:
	case crawl.ChangeGone:
		// Only the page's identity and time matter: the tombstone keeps
		// no content.
		p.rec = crawl.Record{URL: r.URL, FinalURL: r.URL, Time: r.Time, Status: r.Status, Change: r.Change}
		if r.FinalURL != "" && validURL(r.FinalURL) == nil {
			p.rec.FinalURL = r.FinalURL
		}
		p.hash = contentHash(crawl.AppendRecord(nil, &p.rec))
		return p
	default:
		return fail("change kind %d", r.Change)
	}
	if r.Status < 100 || r.Status > 599 {
		return fail("status %d", r.Status)
	}
	if r.FinalURL == "" {
		r.FinalURL = r.URL
	} else if err := validURL(r.FinalURL); err != nil {
		return fail("final %v", err)
	}
	if r.Canonical != "" && validURL(r.Canonical) != nil {
		r.Canonical = "" // page-supplied: drop, do not reject
	}
	r.Title = clip(r.Title, maxTitleBytes)
	r.Lang = clip(r.Lang, maxLangBytes)
	r.Size = max(r.Size, 0)

	// Keywords: malformed terms dropped, weights quantised as a record's
	// encoding quantises them (so that postings and the stored record
	// agree), duplicates merged (heaviest wins), heaviest first (ties by
	// term), the heaviest maxKeywords kept.
	kws := make([]crawl.Keyword, 0, len(r.Keywords))
	for _, k := range r.Keywords {
		if !validTerm(k.Term) {
			p.dropped++
			continue
		}
		kws = append(kws, crawl.Keyword{Term: k.Term, Weight: crawl.QuantiseWeight(k.Weight)})
	}
	slices.SortFunc(kws, func(a, b crawl.Keyword) int {
		return cmp.Or(strings.Compare(a.Term, b.Term), cmp.Compare(b.Weight, a.Weight))
	})
	kws = slices.CompactFunc(kws, func(a, b crawl.Keyword) bool {
		if a.Term == b.Term {
			p.dropped++
			return true
		}
		return false
	})
	slices.SortFunc(kws, func(a, b crawl.Keyword) int {
		return cmp.Or(cmp.Compare(b.Weight, a.Weight), strings.Compare(a.Term, b.Term))
	})
	if len(kws) > c.maxKeywords {
		p.dropped += len(kws) - c.maxKeywords
		kws = kws[:c.maxKeywords]
	}
	r.Keywords = slices.Clip(kws)
	if len(r.Links) > c.maxLinks {
		r.Links = r.Links[:c.maxLinks:c.maxLinks]
	}
	var dropped int
	r.Statements, dropped = cleanStatements(r.Statements, c.maxStatements)
	p.dropped += dropped
	p.rec = r
	p.enc = crawl.AppendRecord(nil, &p.rec)
	if len(p.enc) > c.maxRecordBytes {
		return fail("%d bytes encoded, over the %d byte cap", len(p.enc), c.maxRecordBytes)
	}
	p.hash = contentHash(p.enc)
	p.postings = indexTerms(&p.rec)
	return p
}

// indexTerms derives the postings of a valid record: its keywords with their
// weights; the stems and verbatim terms (verbatim.go) of its title, flagged,
// and added with the record's lowest keyword weight when they are not
// keywords; likewise the stems of its host name (without "www" and the
// top-level domain); and the hidden terms of its statements, flagged, with
// the lowest keyword weight. The result is sorted by term.
func indexTerms(r *crawl.Record) []posting {
	ps := make([]posting, 0, len(r.Keywords)+8)
	minW := uint16(65535)
	for _, k := range r.Keywords {
		ps = append(ps, posting{Term: k.Term, Weight: k.Weight, Flags: inKeyword})
		minW = min(minW, k.Weight)
	}
	slices.SortFunc(ps, func(a, b posting) int { return strings.Compare(a.Term, b.Term) })
	add := func(t string, flag uint8) {
		i, ok := slices.BinarySearchFunc(ps, t, func(p posting, t string) int { return strings.Compare(p.Term, t) })
		if ok {
			ps[i].Flags |= flag
			return
		}
		ps = slices.Insert(ps, i, posting{Term: t, Weight: minW, Flags: flag})
	}
	for _, t := range crawl.Stems(r.Title, maxTitleTerms) {
		add(t, inTitle)
	}
	for _, t := range verbatims(r.Title, maxTitleVerbatims) {
		add(t, inTitle)
	}
	for _, t := range hostStems(r.URL) {
		add(t, inHost)
	}
	for _, t := range structTerms(r.Statements) {
		add(t, inStruct)
	}
	return ps
}

// hostStems returns the stems of the labels of a URL's host name, except
// "www" and the top-level domain; none for IP addresses.
func hostStems(raw string) []string {
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	h := strings.ToLower(u.Hostname())
	if _, err := netip.ParseAddr(h); err == nil || h == "" {
		return nil
	}
	labels := strings.Split(strings.TrimSuffix(h, "."), ".")
	if len(labels) < 2 {
		return nil
	}
	labels = labels[:len(labels)-1]
	if labels[0] == "www" {
		labels = labels[1:]
	}
	return crawl.Stems(strings.Join(labels, " "), maxHostTerms)
}

// Query is one search.
type Query struct {
	Text   string // words to find; "-word" excludes pages with word
	Any    bool   // match pages with any word instead of all of them
	Limit  int    // hits per page; 0 means the default
	Offset int    // hits to skip
}

// parsedQuery is a query reduced to terms.
type parsedQuery struct {
	Terms    []string          // terms to find, distinct and sorted
	Excluded []string          // terms to exclude, distinct and sorted
	Words    map[string]string // each term's word as the query wrote it (the first, when several stem alike)
	order    []string          // the terms in the order the query wrote them
}

// words returns the words the query wrote for those of terms, in the
// query's order, each once.
func (q parsedQuery) words(terms []string) []string {
	var out []string
	for _, t := range q.order {
		if w := q.Words[t]; slices.Contains(terms, t) && !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out
}

// parseQuery turns query text into terms. Words are separated by white
// space outside double quotes (which are removed); a word starting with
// one '-' excludes, one starting with '+' or "--" is an ordinary word, and
// a query of exclusions alone searches for them. Each word goes
// through the crawler's text processing, so one word may give several
// terms ("e-mail" gives "mail") or none (stop words). A word that is a
// statement condition, type:TYPE or PROP=VALUE (parseTyped), gives hidden
// terms; a negated PROP=VALUE of several words excludes pages with any of
// them. A query whose words give no term (stop words, one letter, numbers,
// options) searches their verbatim terms (verbatim.go), the words as
// written, excluding none.
func parseQuery(text string, maxBytes, maxTerms int) (parsedQuery, error) {
	var q parsedQuery
	if len(text) > maxBytes {
		return q, fmt.Errorf("%w: longer than %d bytes", ErrBadQuery, maxBytes)
	}
	toks := tokens(text)
	q.Words = map[string]string{}
	note := func(t, w string) {
		if _, ok := q.Words[t]; !ok {
			q.Words[t] = w
			q.order = append(q.order, t)
		}
	}
	var plus, minus, verb []string
	for _, f := range toks {
		if f == "" {
			continue
		}
		written := f
		neg := false
		switch {
		case strings.HasPrefix(f, "--"):
			// A command-line option ("--add-location"), not an exclusion.
		case f[0] == '-':
			neg, f = true, f[1:]
		case f[0] == '+':
			f = f[1:]
			written = f
		}
		tq, typed, err := parseTyped(f)
		if err != nil {
			return parsedQuery{}, err
		}
		if !typed {
			for _, t := range verbatims(written, maxTerms+1) {
				if _, ok := q.Words[t]; !ok {
					q.Words[t] = verbatimWord(t)
				}
				verb = append(verb, t)
			}
			for _, t := range crawl.Stems(f, maxTerms+1) {
				note(t, strings.ToLower(strings.Trim(f, `"'.,;:!?()[]{}`)))
				if neg {
					minus = append(minus, t)
				} else {
					plus = append(plus, t)
				}
			}
			continue
		}
		for _, t := range tq.terms {
			note(t, tq.word)
			if neg {
				minus = append(minus, t)
			} else {
				plus = append(plus, t)
			}
		}
	}
	if len(plus) == 0 {
		// Only exclusions ("-p", "-O2"): nothing to exclude them from,
		// so they are what the query looks for.
		plus, minus = minus, nil
	}
	if len(plus) == 0 {
		// No word gives a term ("if", "GET", "-v", "\\d"): the titles and
		// anchors that have them as written.
		plus = verb
		for _, t := range verb {
			if !slices.Contains(q.order, t) {
				q.order = append(q.order, t)
			}
		}
	}
	slices.Sort(plus)
	slices.Sort(minus)
	q.Terms, q.Excluded = slices.Compact(plus), slices.Compact(minus)
	if len(q.Terms)+len(q.Excluded) > maxTerms {
		return parsedQuery{}, fmt.Errorf("%w: more than %d distinct terms", ErrBadQuery, maxTerms)
	}
	for _, t := range q.Excluded {
		if _, ok := slices.BinarySearch(q.Terms, t); ok {
			return parsedQuery{}, fmt.Errorf("%w: %q is both searched and excluded", ErrBadQuery, q.Words[t])
		}
	}
	if len(q.Terms) == 0 {
		if strings.TrimSpace(text) == "" {
			return parsedQuery{}, fmt.Errorf("%w: empty", ErrBadQuery)
		}
		return parsedQuery{}, fmt.Errorf("%w: no searchable word", ErrBadQuery)
	}
	return q, nil
}

// tokens splits query text at white space outside double quotes, and
// removes the quotes; a quote left open runs to the end, as in web search
// engines.
func tokens(text string) []string {
	var out []string
	var b strings.Builder
	quoted, started := false, false
	for _, r := range text {
		switch {
		case r == '"':
			quoted, started = !quoted, true
		case !quoted && unicode.IsSpace(r):
			if started {
				out = append(out, b.String())
				b.Reset()
				started = false
			}
		default:
			b.WriteRune(r)
			started = true
		}
	}
	if started {
		out = append(out, b.String())
	}
	return out
}
