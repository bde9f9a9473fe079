package index

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/dgraph-io/badger/v4"
	"github.com/micra-net/micra/crawl"
)

// Verify reads the whole index once and checks that its counters, document
// frequencies, postings, impact lists, posting blocks and profile
// annotations agree with the stored records. It is meant for tests and for operators after an incident; it
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
	v := verifier{ctx: ctx, x: x}
	err := x.db.View(func(txn *badger.Txn) error {
		v.txn = txn
		for _, step := range []func() error{v.docs, v.records, v.anchors, v.postings, v.terms, v.impacts, v.blocks, v.matches} {
			if err := step(); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil && len(v.errs) > 0 {
		err = fmt.Errorf("%w: %w", ErrCorruptValue, errors.Join(v.errs...))
	}
	return v.c, err
}

// verifier is one scan of scanCounts: each step reads one key space and
// checks it against what the steps before it gathered.
type verifier struct {
	x    *Index
	ctx  context.Context
	txn  *badger.Txn
	c    counts
	errs []error // the first ten problems found

	live       map[docID]bool         // live pages without a record seen yet
	want       map[string]int64       // postings per term, from the records
	linked     map[docID]anchorCounts // anchor terms per page, from the records' links
	got        map[string]int64       // postings per term, as stored
	listed     map[string]int64       // terms with an impact list → postings not yet met
	packed     map[string]termState   // terms with a run of posting blocks
	perProfile map[string]int64       // matches per profile
}

func (v *verifier) bad(format string, a ...any) {
	if len(v.errs) < 10 {
		v.errs = append(v.errs, fmt.Errorf(format, a...))
	}
}

// each calls f with every key and value under prefix.
func (v *verifier) each(prefix []byte, f func(k, v []byte) error) error {
	it := v.txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: prefix})
	defer it.Close()
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		if err := v.ctx.Err(); err != nil {
			return err
		}
		k := it.Item().Key()
		if err := it.Item().Value(func(b []byte) error { return f(k, b) }); err != nil {
			return err
		}
	}
	return nil
}

// docs counts live pages and tombstones.
func (v *verifier) docs() error {
	v.live = make(map[docID]bool)
	return v.each(prefixDoc, func(k, b []byte) error {
		m, err := decodeDocMeta(b)
		id, ok := parseIDKey(prefixDoc, k)
		if err != nil || !ok {
			v.bad("doc %x: %v", k, err)
			return nil
		}
		if idOf(m.URL) != id {
			v.bad("doc %x holds the url %q", id, m.URL)
		}
		if m.Gone {
			v.c.Tombstones++
		} else {
			v.c.Docs++
			v.live[id] = true
		}
		return nil
	})
}

// records checks that each live page has a record whose postings are
// stored, and gathers the postings and anchors the records give.
func (v *verifier) records() error {
	v.want, v.linked = make(map[string]int64), make(map[docID]anchorCounts)
	err := v.each(prefixRecord, func(k, b []byte) error {
		id, ok := parseIDKey(prefixRecord, k)
		if !ok || !v.live[id] {
			v.bad("record %x of no live page", id)
		}
		delete(v.live, id)
		s, err := decodeStored(b)
		if err != nil {
			v.bad("record %x: %v", id, err)
			return nil
		}
		r, err := crawl.DecodeRecord(s.Record)
		if err != nil {
			v.bad("record %x: %v", id, err)
			return nil
		}
		for target, terms := range anchorsOf(&r) {
			if v.linked[target] == nil {
				v.linked[target] = anchorCounts{}
			}
			for t := range terms {
				v.linked[target][t]++
			}
		}
		counts, err := getAnchorCounts(v.txn, id)
		if err != nil {
			v.bad("record %x: %v", id, err)
			return nil
		}
		for _, p := range withAnchors(s.Postings, counts.top()) {
			v.want[p.Term]++
			w, fl, a, found, err := getPosting(v.txn, p.Term, id)
			if err != nil || !found {
				v.bad("record %x: posting %q: found %v (%v)", id, p.Term, found, err)
				continue
			}
			if w != p.Weight || fl != p.Flags || a != p.Anchor {
				v.bad("record %x: posting %q is weight %d flags %d anchor %d, want %d, %d, %d", id, p.Term, w, fl, a, p.Weight, p.Flags, p.Anchor)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for id := range v.live {
		v.bad("live page %x without a record", id)
	}
	return nil
}

// anchors checks the anchor counts against what the live records' links
// give, exactly while no page has more distinct anchor terms than are
// counted.
func (v *verifier) anchors() error {
	err := v.each(prefixAnchor, func(k, b []byte) error {
		id, ok := parseIDKey(prefixAnchor, k)
		a, err := decodeAnchorCounts(b)
		if !ok || err != nil || len(a) == 0 {
			v.bad("anchors %x: %v", k, err)
			return nil
		}
		l := v.linked[id]
		for t, n := range a {
			if n > l[t] || (len(l) <= maxAnchorTerms && n != l[t]) {
				v.bad("anchors of %x: %q counted %d, linked from %d pages", id, t, n, l[t])
			}
		}
		if len(l) <= maxAnchorTerms && len(l) != len(a) {
			v.bad("anchors of %x: %d terms counted, %d linked", id, len(a), len(l))
		}
		delete(v.linked, id)
		return nil
	})
	if err != nil {
		return err
	}
	for id := range v.linked {
		v.bad("page %x is linked with anchors none of which are counted", id)
	}
	return nil
}

// postings counts the stored postings of each term.
func (v *verifier) postings() error {
	v.got = make(map[string]int64)
	return v.each(prefixPosting, func(k, _ []byte) error {
		t, _, ok := parsePostingKey(k)
		if !ok {
			v.bad("posting key %x", k)
			return nil
		}
		v.got[t]++
		v.c.Postings++
		return nil
	})
}

// terms checks each term's document frequency against its stored
// postings and the records', and notes the terms with impact lists.
func (v *verifier) terms() error {
	v.listed = make(map[string]int64)
	v.packed = make(map[string]termState)
	err := v.each(prefixDF, func(k, b []byte) error {
		t := string(k[len(prefixDF):])
		st, err := decodeTermState(b)
		if err != nil || int64(st.df) != v.got[t] || int64(st.df) != v.want[t] {
			v.bad("term %q: df %d (%v), %d postings, %d in records", t, st.df, err, v.got[t], v.want[t])
		}
		if st.impact {
			v.listed[t] = int64(st.df)
		}
		if st.gen > 0 {
			v.packed[t] = st
		}
		v.c.Terms++
		delete(v.got, t)
		return nil
	})
	if err != nil {
		return err
	}
	for t, n := range v.got {
		v.bad("term %q: %d postings without a document frequency", t, n)
	}
	return nil
}

// impacts checks the impact lists: one key per posting of the terms that
// have one, at the posting's impact; none for other terms.
func (v *verifier) impacts() error {
	err := v.each(prefixImpact, func(k, _ []byte) error {
		rest := k[len(prefixImpact):]
		if len(rest) < 1 || len(rest) < 1+int(rest[0]) {
			v.bad("impact key %x", k)
			return nil
		}
		t := string(rest[1 : 1+rest[0]])
		q, id, ok := parseImpactKey(impactPrefix(t), k)
		if !ok {
			v.bad("impact key %x", k)
			return nil
		}
		if _, has := v.listed[t]; !has {
			v.bad("impact key of %q %x: the term has no impact list", t, id)
			return nil
		}
		v.listed[t]--
		w, fl, a, found, err := getPosting(v.txn, t, id)
		if err != nil || !found || impactOf(w, fl, a) != q {
			v.bad("impact key of %q %x at %v: posting found %v (%v), impact %v", t, id, q, found, err, impactOf(w, fl, a))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for t, n := range v.listed {
		if n != 0 {
			v.bad("term %q: impact list differs from its postings by %d keys", t, n)
		}
	}
	return nil
}

// matches checks the profile annotations, their rank keys and counts.
func (v *verifier) matches() error {
	v.perProfile = make(map[string]int64)
	err := v.each(prefixMatch, func(k, b []byte) error {
		name, id, ok := parseMatchKey(k)
		if !ok {
			v.bad("match key %x", k)
			return nil
		}
		m, err := decodeMatch(b)
		if err != nil {
			v.bad("match %q %x: %v", name, id, err)
			return nil
		}
		if _, err := v.txn.Get(matchRankKey(name, m.Relevance, id)); err != nil {
			v.bad("match %q %x without rank key: %v", name, id, err)
		}
		if _, err := v.txn.Get(recordKey(id)); err != nil {
			v.bad("match %q %x of no live page", name, id)
		}
		v.perProfile[name]++
		v.c.Matches++
		return nil
	})
	if err != nil {
		return err
	}
	var ranks int64
	if err := v.each(prefixMatchRank, func(_, _ []byte) error { ranks++; return nil }); err != nil {
		return err
	}
	if ranks != v.c.Matches {
		v.bad("%d rank keys for %d matches", ranks, v.c.Matches)
	}
	return v.each(prefixProfileCount, func(k, b []byte) error {
		name := string(k[len(prefixProfileCount):])
		if n, err := decodeUvarint(b); err != nil || int64(n) != v.perProfile[name] {
			v.bad("profile %q: count %d, %d matches", name, n, v.perProfile[name])
		}
		return nil
	})
}

// blocks checks the runs of posting blocks and their deltas: blocks only
// of the generation their term's state names, each well formed and named
// by its last id, deltas only of terms with a run, and each run merged
// with its delta the term's postings.
func (v *verifier) blocks() error {
	err := v.each(prefixBlock, func(k, b []byte) error {
		t, rest, ok := splitTermKey(prefixBlock, k)
		if !ok || len(rest) != 4+idLen {
			v.bad("block key %x", k)
			return nil
		}
		if gen := binary.BigEndian.Uint32(rest); gen != v.packed[t].gen {
			v.bad("block of %q: generation %d, the term's %d", t, gen, v.packed[t].gen)
			return nil
		}
		blk, err := decodeBlock(b)
		if err != nil {
			v.bad("block of %q: %v", t, err)
			return nil
		}
		for i := 1; i < blk.n; i++ {
			if a, b := blk.id(i-1), blk.id(i); bytes.Compare(a[:], b[:]) >= 0 {
				v.bad("block of %q: ids out of order at %d", t, i)
				return nil
			}
		}
		if last := blk.id(blk.n - 1); !bytes.Equal(last[:], rest[4:]) {
			v.bad("block of %q: key names %x, last id %x", t, rest[4:], last)
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = v.each(prefixDelta, func(k, b []byte) error {
		t, rest, ok := splitTermKey(prefixDelta, k)
		switch {
		case !ok || len(rest) != 4+idLen:
			v.bad("delta key %x", k)
		case v.packed[t].gen == 0:
			v.bad("delta of %q, which has no run", t)
		case binary.BigEndian.Uint32(rest) != v.packed[t].gen:
			v.bad("delta of %q: generation %d, the term's %d", t, binary.BigEndian.Uint32(rest), v.packed[t].gen)
		case len(b) > 0:
			if _, _, _, err := decodePostingValue(b); err != nil {
				v.bad("delta of %q: %v", t, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, t := range slices.Sorted(maps.Keys(v.packed)) {
		if err := v.ctx.Err(); err != nil {
			return err
		}
		v.sameAsLoose(t, v.packed[t])
	}
	return nil
}

// sameAsLoose checks that the run and delta of t read as its postings.
func (v *verifier) sameAsLoose(t string, st termState) {
	loose := newCursor(v.txn, t, nil, 0)
	defer loose.close()
	packed, err := v.x.openCursor(v.txn, t, st, 0)
	if err != nil {
		v.bad("blocks of %q: %v", t, err)
		return
	}
	defer packed.close()
	for packed.ok && loose.ok {
		if packed.id != loose.id || packed.w != loose.w || packed.flags != loose.flags || packed.a != loose.a {
			v.bad("blocks of %q: %x (%d, %d, %d) where the postings have %x (%d, %d, %d)", t,
				packed.id, packed.w, packed.flags, packed.a, loose.id, loose.w, loose.flags, loose.a)
			return
		}
		packed.next()
		loose.next()
	}
	switch {
	case packed.err != nil || loose.err != nil:
		v.bad("blocks of %q: %v", t, errors.Join(packed.err, loose.err))
	case packed.ok != loose.ok:
		v.bad("blocks of %q: a run and delta of other postings than the term's (ends: %v, %v)", t, packed.ok, loose.ok)
	}
}
