package index

import (
	"context"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
	"github.com/micra-net/micra/crawl"
)

// Verify reads the whole index once and checks that its counters, document
// frequencies, postings and profile annotations agree with the stored
// records. It is meant for tests and for operators after an incident; it
// needs memory for one counter per distinct term.
func (x *Index) Verify(ctx context.Context) error {
	c, err := x.scanCounts(ctx)
	if err != nil {
		return err
	}
	x.mu.RLock()
	s := x.cnt
	x.mu.RUnlock()
	if c.Docs != s.Docs || c.Tombstones != s.Tombstones || c.Terms != s.Terms || c.Postings != s.Postings || c.Matches != s.Matches {
		return fmt.Errorf("%w: counters say %d docs, %d tombstones, %d terms, %d postings, %d matches; the data %d, %d, %d, %d, %d",
			ErrCorruptValue, s.Docs, s.Tombstones, s.Terms, s.Postings, s.Matches, c.Docs, c.Tombstones, c.Terms, c.Postings, c.Matches)
	}
	return nil
}

// scanCounts counts what the database holds, checking its structure on
// the way. Run it while no writer is active for exact counters.
func (x *Index) scanCounts(ctx context.Context) (counts, error) {
	var c counts
	var errs []error
	bad := func(format string, a ...any) {
		if len(errs) < 10 {
			errs = append(errs, fmt.Errorf(format, a...))
		}
	}
	each := func(txn *badger.Txn, prefix []byte, f func(k, v []byte) error) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: prefix})
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			k := it.Item().Key()
			if err := it.Item().Value(func(v []byte) error { return f(k, v) }); err != nil {
				return err
			}
		}
		return nil
	}
	err := x.db.View(func(txn *badger.Txn) error {
		live := make(map[docID]bool)
		err := each(txn, prefixDoc, func(k, v []byte) error {
			m, err := decodeDocMeta(v)
			id, ok := parseIDKey(prefixDoc, k)
			if err != nil || !ok {
				bad("doc %x: %v", k, err)
				return nil
			}
			if idOf(m.URL) != id {
				bad("doc %x holds the url %q", id, m.URL)
			}
			if m.Gone {
				c.Tombstones++
			} else {
				c.Docs++
				live[id] = true
			}
			return nil
		})
		if err != nil {
			return err
		}
		want := make(map[string]int64)         // postings per term, from the records
		linked := make(map[docID]anchorCounts) // anchor terms per page, from the records' links
		err = each(txn, prefixRecord, func(k, v []byte) error {
			id, ok := parseIDKey(prefixRecord, k)
			if !ok || !live[id] {
				bad("record %x of no live page", id)
			}
			delete(live, id)
			s, err := decodeStored(v)
			if err != nil {
				bad("record %x: %v", id, err)
				return nil
			}
			r, err := crawl.DecodeRecord(s.Record)
			if err != nil {
				bad("record %x: %v", id, err)
				return nil
			}
			for target, terms := range anchorsOf(&r) {
				if linked[target] == nil {
					linked[target] = anchorCounts{}
				}
				for t := range terms {
					linked[target][t]++
				}
			}
			counts, err := getAnchorCounts(txn, id)
			if err != nil {
				bad("record %x: %v", id, err)
				return nil
			}
			for _, p := range withAnchors(s.Postings, counts.top()) {
				want[p.Term]++
				item, err := txn.Get(postingKey(p.Term, id))
				if err != nil {
					bad("record %x: posting %q: %v", id, p.Term, err)
					continue
				}
				_ = item.Value(func(b []byte) error {
					if w, fl, a, err := decodePostingValue(b); err != nil || w != p.Weight || fl != p.Flags || a != p.Anchor {
						bad("record %x: posting %q is %x, want weight %d flags %d anchor %d", id, p.Term, b, p.Weight, p.Flags, p.Anchor)
					}
					return nil
				})
			}
			return nil
		})
		if err != nil {
			return err
		}
		// Anchor counts: what the live records' links give, exactly
		// while no page has more distinct anchor terms than are counted.
		err = each(txn, prefixAnchor, func(k, v []byte) error {
			id, ok := parseIDKey(prefixAnchor, k)
			a, err := decodeAnchorCounts(v)
			if !ok || err != nil || len(a) == 0 {
				bad("anchors %x: %v", k, err)
				return nil
			}
			l := linked[id]
			for t, n := range a {
				if n > l[t] || (len(l) <= maxAnchorTerms && n != l[t]) {
					bad("anchors of %x: %q counted %d, linked from %d pages", id, t, n, l[t])
				}
			}
			if len(l) <= maxAnchorTerms && len(l) != len(a) {
				bad("anchors of %x: %d terms counted, %d linked", id, len(a), len(l))
			}
			delete(linked, id)
			return nil
		})
		if err != nil {
			return err
		}
		for id := range linked {
			bad("page %x is linked with anchors none of which are counted", id)
		}
		if err != nil {
			return err
		}
		for id := range live {
			bad("live page %x without a record", id)
		}
		got := make(map[string]int64)
		err = each(txn, prefixPosting, func(k, v []byte) error {
			t, _, ok := parsePostingKey(k)
			if !ok {
				bad("posting key %x", k)
				return nil
			}
			got[t]++
			c.Postings++
			return nil
		})
		if err != nil {
			return err
		}
		impacts := make(map[string]int64) // terms with an impact list → postings
		err = each(txn, prefixDF, func(k, v []byte) error {
			t := string(k[len(prefixDF):])
			st, err := decodeTermState(v)
			if err != nil || int64(st.df) != got[t] || int64(st.df) != want[t] {
				bad("term %q: df %d (%v), %d postings, %d in records", t, st.df, err, got[t], want[t])
			}
			if st.impact {
				impacts[t] = int64(st.df)
			}
			c.Terms++
			delete(got, t)
			return nil
		})
		if err != nil {
			return err
		}
		for t, n := range got {
			bad("term %q: %d postings without a document frequency", t, n)
		}
		// Impact lists: one key per posting of the terms that have one,
		// at the posting's impact; none for other terms.
		err = each(txn, prefixImpact, func(k, v []byte) error {
			rest := k[len(prefixImpact):]
			if len(rest) < 1 || len(rest) < 1+int(rest[0]) {
				bad("impact key %x", k)
				return nil
			}
			t := string(rest[1 : 1+rest[0]])
			q, id, ok := parseImpactKey(impactPrefix(t), k)
			if !ok {
				bad("impact key %x", k)
				return nil
			}
			if _, has := impacts[t]; !has {
				bad("impact key of %q %x: the term has no impact list", t, id)
				return nil
			}
			impacts[t]--
			w, fl, a, found, err := getPosting(txn, t, id)
			if err != nil || !found || impactOf(w, fl, a) != q {
				bad("impact key of %q %x at %v: posting found %v (%v), impact %v", t, id, q, found, err, impactOf(w, fl, a))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for t, n := range impacts {
			if n != 0 {
				bad("term %q: impact list differs from its postings by %d keys", t, n)
			}
		}
		perProfile := make(map[string]int64)
		err = each(txn, prefixMatch, func(k, v []byte) error {
			name, id, ok := parseMatchKey(k)
			if !ok {
				bad("match key %x", k)
				return nil
			}
			m, err := decodeMatch(v)
			if err != nil {
				bad("match %q %x: %v", name, id, err)
				return nil
			}
			if _, err := txn.Get(matchRankKey(name, m.Relevance, id)); err != nil {
				bad("match %q %x without rank key: %v", name, id, err)
			}
			if _, err := txn.Get(recordKey(id)); err != nil {
				bad("match %q %x of no live page", name, id)
			}
			perProfile[name]++
			c.Matches++
			return nil
		})
		if err != nil {
			return err
		}
		var ranks int64
		err = each(txn, prefixMatchRank, func(k, v []byte) error { ranks++; return nil })
		if err != nil {
			return err
		}
		if ranks != c.Matches {
			bad("%d rank keys for %d matches", ranks, c.Matches)
		}
		return each(txn, prefixProfileCount, func(k, v []byte) error {
			name := string(k[len(prefixProfileCount):])
			if n, err := decodeUvarint(v); err != nil || int64(n) != perProfile[name] {
				bad("profile %q: count %d, %d matches", name, n, perProfile[name])
			}
			return nil
		})
	})
	if err == nil && len(errs) > 0 {
		err = fmt.Errorf("%w: %w", ErrCorruptValue, errors.Join(errs...))
	}
	return c, err
}
