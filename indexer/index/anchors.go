package index

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/dgraph-io/badger/v4"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/internal/codec"
	"github.com/micra-net/micra/internal/kv"
)

// Anchor text. Only the indexer sees every link, so it describes each page
// by the words of the links to it, the classic signal for known-item
// search: a manual's pages link to an API's entry by its name, to a
// chapter by its title. A page's anchors describe the pages they point
// to, never the page itself (its links to itself, fragments included,
// are left out).
//
// Each page P keeps the count of the other live pages that link to it
// with each anchor term (/index/a/<id>: anchorCounts). One linking page
// counts once per term, however many of its links to P carry it. The
// anchorTop heaviest stems and anchorTopVerbatim heaviest verbatim terms
// (verbatim.go) count for P: they are merged into P's
// postings with the weight anchorWeight(count), beside the weight of P's
// own record (posting.Anchor; a term only anchors give has own weight 0).
// When a record is stored, replaced or removed, the counts of the pages
// its old and new links point to change by the difference, and, for those
// pages that are live, their postings with them; when P itself is stored,
// its counts are merged into its new postings. All of it in the record's
// transaction, so the index stays the same whatever order records arrive
// in, as long as no page is linked with more than maxAnchorTerms distinct
// terms (beyond it, terms that arrive later are not counted).

const (
	maxAnchorLinks = 200 // links of one record whose anchors count
	maxAnchorWords = 8   // terms of one anchor
	maxAnchorTerms = 256 // distinct anchor terms counted for one page
	anchorTop      = 32  // of them, the stems merged into the page's postings
	// anchorTopVerbatim is how many verbatim terms (verbatim.go) are
	// merged beside them.
	anchorTopVerbatim = 8
	// anchorUnit is the weight of a term that one page's links give: a
	// quarter of a page's heaviest keyword, growing with the log of the
	// linking pages (1 + ln n), at most 65535.
	anchorUnit = 16384
)

// anchorCounts is the number of linking pages per anchor term of a page.
type anchorCounts map[string]uint32

func anchorWeight(n uint32) uint16 {
	if n == 0 {
		return 0
	}
	return uint16(min(65535, math.Round(anchorUnit*(1+math.Log(float64(n))))))
}

// top returns the weights of the anchorTop stems and the
// anchorTopVerbatim verbatim terms with the most linking pages (ties by
// term): verbatim terms, stop words among them, take no stem's place.
func (a anchorCounts) top() map[string]uint16 {
	if len(a) == 0 {
		return nil
	}
	terms := make([]string, 0, len(a))
	for t := range a {
		terms = append(terms, t)
	}
	slices.SortFunc(terms, func(x, y string) int { return cmp.Or(cmp.Compare(a[y], a[x]), strings.Compare(x, y)) })
	out := make(map[string]uint16, min(len(terms), anchorTop+anchorTopVerbatim))
	stems, verbatim := 0, 0
	for _, t := range terms {
		switch {
		case isVerbatim(t) && verbatim < anchorTopVerbatim:
			verbatim++
		case !isVerbatim(t) && stems < anchorTop:
			stems++
		default:
			continue
		}
		out[t] = anchorWeight(a[t])
	}
	return out
}

// change counts a linking page whose anchor terms for this page change
// from o to n: terms beyond maxAnchorTerms are not counted.
func (a anchorCounts) change(o, n map[string]bool) {
	for t := range o {
		if !n[t] && a[t] > 0 {
			if a[t]--; a[t] == 0 {
				delete(a, t)
			}
		}
	}
	for t := range n {
		if !o[t] && (a[t] > 0 || len(a) < maxAnchorTerms) {
			a[t]++
		}
	}
}

func (a anchorCounts) encode() []byte {
	terms := make([]string, 0, len(a))
	for t := range a {
		terms = append(terms, t)
	}
	slices.Sort(terms)
	var e codec.Encoder
	e.Byte(1)
	e.Uvarint(uint64(len(terms)))
	for _, t := range terms {
		e.Str(t)
		e.Uvarint(uint64(a[t]))
	}
	return e
}

func decodeAnchorCounts(b []byte) (anchorCounts, error) {
	d := newDecoder(b)
	d.Version("anchor counts", 1)
	n := d.Count(maxAnchorTerms, 3)
	a := make(anchorCounts, n)
	prev := ""
	for i := range n {
		t := d.Str(maxTermBytes)
		c := d.Uvarint()
		if d.Err() == nil && (!validAnchorTerm(t) || (i > 0 && t <= prev) || c == 0 || c > math.MaxUint32) {
			d.Fail("anchor term %q count %d", t, c)
		}
		if d.Err() != nil {
			break
		}
		a[t] = uint32(c)
		prev = t
	}
	if err := d.Done(); err != nil {
		return nil, err
	}
	return a, nil
}

func getAnchorCounts(txn *badger.Txn, id docID) (anchorCounts, error) {
	a, found, err := kv.Decode(txn, anchorKey(id), decodeAnchorCounts)
	switch {
	case err != nil:
		return nil, fmt.Errorf("anchors of %x: %w", id, err)
	case !found:
		return anchorCounts{}, nil
	}
	return a, nil
}

// anchorsOf returns the terms a record's links give the pages they point
// to: per page, the set of terms of the anchors of the first
// maxAnchorLinks links (maxAnchorWords stems and as many verbatim terms
// each), links to the record's own page left out. nil for a removed record.
func anchorsOf(r *crawl.Record) map[docID]map[string]bool {
	if r == nil || r.Change == crawl.ChangeGone {
		return nil
	}
	self, final := idOf(r.URL), idOf(r.FinalURL)
	var out map[docID]map[string]bool
	terms := map[string][]string{} // of each anchor text: pages repeat theirs
	for _, l := range r.Links[:min(len(r.Links), maxAnchorLinks)] {
		if l.Anchor == "" || validURL(l.URL) != nil {
			continue
		}
		id := idOf(l.URL)
		if id == self || id == final {
			continue
		}
		ts, ok := terms[l.Anchor]
		if !ok {
			ts = slices.Concat(crawl.Stems(l.Anchor, maxAnchorWords), verbatims(l.Anchor, maxAnchorWords))
			terms[l.Anchor] = ts
		}
		for _, t := range ts {
			if !validAnchorTerm(t) {
				continue
			}
			if out == nil {
				out = make(map[docID]map[string]bool)
			}
			if out[id] == nil {
				out[id] = make(map[string]bool)
			}
			out[id][t] = true
		}
	}
	return out
}

// validAnchorTerm reports whether t can be an anchor term: a stem or a
// verbatim term.
func validAnchorTerm(t string) bool { return validTerm(t) || validVerbatim(t) }

// withAnchors returns own (sorted by term) with the page's anchor weights
// merged in: a sorted list of every term the page has.
func withAnchors(own []posting, top map[string]uint16) []posting {
	if len(top) == 0 {
		return own
	}
	out := make([]posting, 0, len(own)+len(top))
	for _, p := range own {
		p.Anchor = top[p.Term]
		out = append(out, p)
	}
	for t, w := range top {
		if _, found := slices.BinarySearchFunc(own, t, func(p posting, t string) int { return strings.Compare(p.Term, t) }); !found {
			out = append(out, posting{Term: t, Anchor: w})
		}
	}
	slices.SortFunc(out, func(a, b posting) int { return strings.Compare(a.Term, b.Term) })
	return out
}

// updateAnchors changes the anchor counts of the pages a record's links
// point to from what its old version gave (old) to what its new one gives
// (new), and the postings of those pages that are live.
func (x *Index) updateAnchors(w *wtxn, old, new map[docID]map[string]bool) error {
	targets := sortedKeys(old, new, func(a, b docID) int { return bytes.Compare(a[:], b[:]) })
	for _, id := range targets {
		o, n := old[id], new[id]
		if maps.Equal(o, n) {
			continue
		}
		a, err := getAnchorCounts(w.txn, id)
		if err != nil {
			return err
		}
		before := a.top()
		a.change(o, n)
		if len(a) == 0 {
			err = w.del(anchorKey(id))
		} else {
			err = w.set(anchorKey(id), a.encode())
		}
		if err != nil {
			return err
		}
		m, ok, err := getMeta(w.txn, id)
		if err != nil {
			return err
		}
		if !ok || m.Gone {
			continue // merged into the page's postings when it is stored
		}
		if err := x.reweighAnchors(w, id, before, a.top()); err != nil {
			return err
		}
	}
	return nil
}

// reweighAnchors changes the anchor weights of a live page's postings from
// before to after.
func (x *Index) reweighAnchors(w *wtxn, id docID, before, after map[string]uint16) error {
	for _, t := range sortedKeys(before, after, strings.Compare) {
		if before[t] == after[t] {
			continue
		}
		k := postingKey(t, id)
		var own, anchor uint16
		var flags uint8
		item, err := w.txn.Get(k)
		had := err == nil
		switch {
		case err == badger.ErrKeyNotFound:
		case err != nil:
			return err
		default:
			err = item.Value(func(v []byte) error {
				var err error
				own, flags, anchor, err = decodePostingValue(v)
				return err
			})
			if err != nil {
				return err
			}
		}
		has := flags&ownFlags != 0 || after[t] > 0
		was, is := &posting{Term: t, Weight: own, Flags: flags, Anchor: anchor}, &posting{Term: t, Weight: own, Flags: flags, Anchor: after[t]}
		switch {
		case had && !has:
			err = w.del(k)
			w.noteChange(t, id, was, nil)
			w.df[t]--
			w.cnt.Postings--
		case has:
			err = w.set(k, encodePostingValue(own, flags, after[t]))
			if !had {
				was = nil
				w.df[t]++
				w.cnt.Postings++
			}
			w.noteChange(t, id, was, is)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// sortedKeys returns the keys of a and b, each once, sorted by cmp.
func sortedKeys[K comparable, V any](a, b map[K]V, cmp func(K, K) int) []K {
	keys := slices.Collect(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, cmp)
	return keys
}
